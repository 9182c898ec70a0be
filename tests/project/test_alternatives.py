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
    extra = () if seed is None else ("--seed", str(seed))
    for result in grade_json([ALTERNATIVES, COURSE.solutions], UNITS, *extra):
        for unit in UNITS:
            got = result["units"][unit]
            failed = [(t["name"], t["output"]) for t in got["tests"] if t["status"] == "failed"]
            assert got["score"] == got["max_score"] > 0, f"{result['submission']} {unit} (seed {seed}): {failed}"
