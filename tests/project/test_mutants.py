"""Every hidden property earns its place: the kept buggy versions lose points,
each in its own unit, and every property catches at least one of them. The
same grading runs also prove that the reference scores full marks, the stubs
zero, and that the sandbox and in-process modes agree on all of them."""
from __future__ import annotations

import shutil

import pytest

import mutants
from conftest import ROOT, grade_json
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
ALTERNATIVES = ROOT / "tests" / "alternatives"
# One xdist group per unit: all of a unit's checks share its two grading runs.
# Every unit: one without its catalogue fails here (and in test_registry), it is never skipped.
UNITS = [pytest.param(u, marks=pytest.mark.xdist_group(f"mutants-{u}"), id=u) for u in COURSE.units]
# Properties no mutant can reach on this machine, with the reason.
UNCATCHABLE = {
    "test_cpu_and_cuda_agree": "needs a CUDA device; worth no points, so it cannot lose any",
}


class Graded(dict):
    """unit -> case name -> that unit's result, from one grading run per unit on first use.

    The cases are solutions/, assignments/, the unit's alternative and every mutant.
    """

    def __init__(self, tmp_path_factory, *options: str):
        super().__init__()
        self.tmp, self.options = tmp_path_factory, options

    def __missing__(self, unit: str) -> dict[str, dict]:
        spec = COURSE.units[unit]
        base = self.tmp.mktemp(unit)
        cases = {"solutions": COURSE.solutions, "assignments": COURSE.assignments,
                 "alternative": shutil.copytree(COURSE.solutions, base / "alternative")}
        shutil.copy(ALTERNATIVES / spec.file, cases["alternative"] / spec.file)
        for m in mutants.load(unit):
            cases[m["name"]] = mutants.write(spec.file, m, base / m["name"])
        results = grade_json(list(cases.values()), [unit], *self.options)
        self[unit] = {name: r["units"][unit] for name, r in zip(cases, results)}
        return self[unit]


@pytest.fixture(scope="session")
def graded(tmp_path_factory) -> Graded:
    return Graded(tmp_path_factory)  # the default: sandboxed


@pytest.fixture(scope="session")
def graded_in_process(tmp_path_factory) -> Graded:
    return Graded(tmp_path_factory, "--no-sandbox")


def _mutants_of(graded: Graded, unit: str) -> dict[str, dict]:
    names = {m["name"] for m in mutants.load(unit)}
    return {name: r for name, r in graded[unit].items() if name in names}


@pytest.mark.parametrize("unit", UNITS)
def test_at_least_fifteen_mutants(unit):
    assert len(mutants.load(unit)) >= 15


@pytest.mark.parametrize("unit", UNITS)
def test_solutions_full_marks_stubs_zero(graded, unit):
    ref, stub = graded[unit]["solutions"], graded[unit]["assignments"]
    assert ref["max_score"] > 0 and ref["score"] == ref["max_score"], [t for t in ref["tests"] if t["status"] == "failed"]
    assert stub["score"] == 0 and stub["max_score"] == ref["max_score"], [t["name"] for t in stub["tests"] if t["score"]]


@pytest.mark.parametrize("unit", UNITS)
def test_each_mutant_loses_points_in_its_unit(graded, unit):
    spared = [name for name, r in _mutants_of(graded, unit).items() if r["score"] >= r["max_score"]]
    assert not spared, f"these {unit} mutants kept full marks: {spared}"


@pytest.mark.parametrize("unit", UNITS)
def test_every_property_catches_a_mutant(graded, unit):
    caught: dict[str, list[str]] = {}
    for name, result in _mutants_of(graded, unit).items():
        if result["status"] == "forbidden":  # every property reads as failed there: it proves nothing
            continue
        for test in result["tests"]:
            if test["status"] == "failed" and test["visibility"] == "hidden":
                caught.setdefault(test["id"], []).append(name)
    properties = {t["id"] for t in graded[unit]["solutions"]["tests"] if t["visibility"] == "hidden"}
    idle = sorted(p for p in properties if p not in caught and p.split("::")[1] not in UNCATCHABLE)
    assert not idle, f"{unit}: these properties catch no mutant: {idle}"


@pytest.mark.parametrize("unit", UNITS)
def test_forbidden_calls_zero_the_unit(graded, unit):
    forbidden = {name: r for name, r in _mutants_of(graded, unit).items() if r["status"] == "forbidden"}
    assert forbidden, f"{unit}: keep at least one mutant that calls a forbidden function"
    for name, result in forbidden.items():
        assert result["score"] == 0 and "must not call" in result["message"], (name, result["message"])


@pytest.mark.parametrize("unit", UNITS)
def test_same_scores_sandboxed_and_in_process(graded, graded_in_process, unit):
    def summary(result: dict) -> dict:
        return {"status": result["status"], "tests": {t["id"]: (t["status"], t["score"]) for t in result["tests"]}}

    differ = [name for name, result in graded[unit].items()
              if summary(result) != summary(graded_in_process[unit][name])]
    assert not differ, f"{unit}: the two modes disagree on {differ}"
