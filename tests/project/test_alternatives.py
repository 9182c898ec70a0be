"""Correct code written in another style keeps full marks, under several
hypothesis seeds as well as the derandomized grading examples."""
from __future__ import annotations

import pytest

from conftest import ROOT, grade_json
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
ALTERNATIVES = ROOT / "tests" / "alternatives"
UNITS = list(COURSE.units)  # every unit: one without its alternative fails here (and in test_registry)


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_alternatives_and_solutions_keep_full_marks(seed):
    # In process: this tests the suites' verdicts. The sandbox gives the same ones on the
    # alternatives and the reference in test_mutants.py::test_same_scores_sandboxed_and_in_process.
    extra = ("--no-sandbox",) if seed is None else ("--no-sandbox", "--seed", str(seed))
    for result in grade_json([ALTERNATIVES, COURSE.solutions], UNITS, *extra):
        for unit in UNITS:
            got = result["units"][unit]
            failed = [(t["name"], t["output"]) for t in got["tests"] if t["status"] == "failed"]
            assert got["score"] == got["max_score"] > 0, f"{result['submission']} {unit} (seed {seed}): {failed}"
