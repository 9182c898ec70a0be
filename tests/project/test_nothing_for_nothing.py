"""Nothing for nothing (issue 13): answers of the right shape, dtype and device
that compute nothing (constant, zero, uniform, identity) earn at most the points
of the unit's pure shape checks, the list its hidden suite keeps as SHAPE_CHECKS.

The hostile answers are the corpus's constant_* and shape_only_* cases (tests/hostile/: folders,
or patches of them in patches.toml; tests/project/hostile_cases.py writes either), one unit file
each. They are graded in-process: this tests the suites, not the sandbox.
"""
from __future__ import annotations

import ast

from conftest import ROOT, grade_json
import hostile_cases
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
CASES = sorted(n for n in hostile_cases.NAMES if n.startswith(("constant_", "shape_only_")))


def unit_of(case: str) -> str:
    """The unit whose file the case holds (exactly one)."""
    units = [u.name for u in COURSE.units.values() if u.file in hostile_cases.files(case)]
    assert len(units) == 1, f"{case} must hold exactly one unit file, holds {units}"
    return units[0]


def shape_checks(unit: str) -> set[str]:
    """The suite's SHAPE_CHECKS, read without importing it (its imports resolve only under the grader)."""
    path = COURSE.hidden_tests / f"test_{unit}_properties.py"
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SHAPE_CHECKS" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{path.name} defines no SHAPE_CHECKS")


def problems_of(case: str, result: dict) -> list[str]:
    """What is wrong with one case's grade: points beyond the unit's shape checks, or a vacuous case."""
    unit = unit_of(case)
    allowed = shape_checks(unit)
    tests = {t["id"]: t for t in result["tests"]}
    if result["status"] != "graded":
        return [f"{case}: {unit} was not graded ({result['status']}: {result['message']})"]
    if not allowed <= set(tests):
        return [f"SHAPE_CHECKS of {unit} names tests that do not exist: {sorted(allowed - set(tests))}"]
    bound = sum(tests[i]["max_score"] for i in allowed)
    earned = {i: t["score"] for i, t in tests.items() if t["score"] > 0 and i not in allowed}
    found = [f"{case} earned points in {unit} beyond its shape checks: {earned}"] if earned else []
    if bound > result["max_score"] / 8:
        found.append(f"{unit}'s shape checks are worth {bound} of {result['max_score']}: that is not small")
    if result["score"] == 0:  # a real attempt is well-formed enough to pass shape checks
        found.append(f"{case} passes no shape check: {[(i, tests[i]['output'][:200]) for i in sorted(allowed)]}")
    return found


def test_every_unit_has_a_constant_answer():
    assert {unit_of(c) for c in CASES} == set(COURSE.units)


def test_constant_answers_earn_only_shape_points(tmp_path):
    # One test, so that one grading run serves every case (xdist would split a parametrized one).
    units = sorted({unit_of(c) for c in CASES})
    results = grade_json([hostile_cases.write(c, tmp_path) for c in CASES], units, "--no-sandbox")
    found = [p for case, r in zip(CASES, results) for p in problems_of(case, r["units"][unit_of(case)])]
    assert not found, "\n".join(found)
