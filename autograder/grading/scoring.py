"""A unit's result from its tests' records: the scoring policy.

A unit that did not load is "unavailable" (its tests failed in setup). A unit
that uses a forbidden name, or reaches past the course's allow-list (``allowlist.scan``,
both on this trusted side), or whose code asked for a kernel family it may not use
(refused at run time by ``enforce``), scores 0 whatever its tests said.
"""
from __future__ import annotations

import ast
from typing import cast

from autograder.trust import allowlist
from autograder.trust.forbidden import Use, scan_file
from autograder.core.i18n import N_, _, translate_text
from autograder.trust.source import read_source
from autograder.core.manifest import Rules, Unit
from autograder.core.protocol import Subject
from autograder.core.results import TestResult, UnitResult

FORBIDDEN_TEST_OUTPUT = N_("no points: the unit calls a forbidden function")


def unit_result(spec: Unit, subject: Subject, tests: list[TestResult], rules: Rules | None = None,
                siblings: tuple[str, ...] = ()) -> UnitResult:
    unit = UnitResult(name=spec.name, title=spec.title, tests=tests)
    problem = subject.status(spec.name)
    path = subject.folder / spec.file
    uses = []
    # A file the scan refuses is "forbidden" even when it then failed to load (its refused
    # builtins are absent at run time, so `eval(...)` ends its import with a NameError).
    if path.is_file() and not path.is_symlink() and not (problem and not _parses(path)):
        uses = scan_file(path, spec.forbidden)
        if rules is not None:
            # One finding per line: the forbidden name when there is one (the most telling), else the
            # allow-list's first (`torch.ops.aten._softmax` would otherwise be named four ways).
            lines = {u.line for u in uses}
            for use in allowlist.scan_file(path, rules, spec.forbidden, siblings):
                if use.line not in lines:
                    uses.append(use)
                    lines.add(use.line)
            uses.sort(key=lambda u: cast(int, u.line))  # the scans' findings all have a line
    uses += [Use(name, None) for name in sorted(subject.runtime_uses(spec.name))]
    if problem and not uses:
        unit.status, unit.message = "unavailable", translate_text(problem)
        return unit
    if uses:
        unit.status = "forbidden"
        unit.message = _(
            "{uses}. This unit must not call the function it teaches, nor reach past what the API page allows a unit "
            "(its list of modules, names and builtins), so it scores 0: write it from basic tensor operations."
        ).format(uses="; ".join(u.describe(spec.file) for u in uses))
        for test in unit.tests:
            if test.score:
                test.score, test.status, test.output = 0.0, "failed", _(FORBIDDEN_TEST_OUTPUT)
    return unit


def _parses(path) -> bool:
    """Whether the file is Python at all (one that is not is "unavailable", with the compiler's message)."""
    try:
        ast.parse(read_source(path)[0])
    except (OSError, SyntaxError, ValueError, LookupError):
        return False
    return True
