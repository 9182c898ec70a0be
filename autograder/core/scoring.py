"""A unit's result from its tests' records: the scoring policy.

A unit that did not load is "unavailable" (its tests failed in setup). A unit
that uses a forbidden name or operator, seen statically or at run time, or that
reaches past the course's allow-list (``allowlist.scan``, on this trusted side),
scores 0 whatever its tests said.
"""
from __future__ import annotations

from autograder.core import allowlist
from autograder.core.forbidden import Use, scan_file
from autograder.core.manifest import Rules, Unit
from autograder.core.protocol import Subject
from autograder.core.results import TestResult, UnitResult

FORBIDDEN_TEST_OUTPUT = "no points: the unit calls a forbidden function"


def unit_result(spec: Unit, subject: Subject, tests: list[TestResult], rules: Rules | None = None,
                siblings: tuple[str, ...] = ()) -> UnitResult:
    unit = UnitResult(name=spec.name, title=spec.title, tests=tests)
    problem = subject.status(spec.name)
    if problem:
        unit.status, unit.message = "unavailable", problem
        return unit
    path = subject.folder / spec.file
    uses = scan_file(path, spec.forbidden)
    if rules is not None:
        named = {u.name for u in uses}
        uses += [u for u in allowlist.scan_file(path, rules, spec.forbidden, siblings) if u.name not in named]
    static = {u.name for u in uses}
    uses += [Use(name, None) for name in sorted(subject.runtime_uses(spec.name) - static)]
    if uses:
        unit.status = "forbidden"
        unit.message = (
            f"{'; '.join(u.describe(spec.file) for u in uses)}. This unit must not call the function it teaches, "
            "nor reach past what the API page allows a unit (its list of modules, names and builtins), so it scores 0: "
            "write it from basic tensor operations."
        )
        for test in unit.tests:
            if test.score:
                test.score, test.status, test.output = 0.0, "failed", FORBIDDEN_TEST_OUTPUT
    return unit
