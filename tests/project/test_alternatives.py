"""Correct code written in another style keeps full marks, under several
hypothesis seeds as well as the derandomized grading examples."""
from __future__ import annotations

import pytest

import mutants
from conftest import ROOT, grade_json
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
UNITS = list(COURSE.units)  # every unit: one without its alternative fails here (and in test_registry)


def _assert_full_marks(got: dict, what: str) -> None:
    failed = [(t["name"], t["output"]) for t in got["tests"] if t["status"] == "failed"]
    assert got["score"] == got["max_score"] > 0, f"{what}: {failed}"


@pytest.mark.parametrize("unit", mutants.grouped(UNITS))
def test_alternative_and_solutions_keep_full_marks_on_the_grading_examples(unit, catalogue):
    """Each alternative as the catalogue grades it (the reference, its unit's file replaced): a
    graded unit sees its siblings only as the course's stand-ins, so this is the grade of
    tests/alternatives/ itself."""
    for case in ("alternative", "solutions"):
        _assert_full_marks(catalogue[unit][case], f"{case} {unit}")


@pytest.mark.parametrize("seed", [1, 2])
def test_alternatives_and_solutions_keep_full_marks(seed):
    # In process: this tests the suites' verdicts. The sandbox gives the same ones on the
    # alternatives and the reference in test_mutants.py::test_same_scores_sandboxed_and_in_process.
    for result in grade_json([mutants.ALTERNATIVES, COURSE.solutions], UNITS, "--no-sandbox", "--seed", str(seed)):
        for unit in UNITS:
            _assert_full_marks(result["units"][unit], f"{result['submission']} {unit} (seed {seed})")
