"""Every hidden property earns its place: the kept buggy versions lose points,
each in its own unit, and every property catches at least one of them."""
from __future__ import annotations

import pytest

import mutants
from conftest import ROOT, grade_json
from autograder.manifest import load_course

COURSE = load_course(ROOT)
# One xdist group per unit: all of a unit's checks share one grading run.
UNITS = [
    pytest.param(u, marks=pytest.mark.xdist_group(f"mutants-{u}"), id=u)
    for u in COURSE.units if (mutants.MUTANTS / f"{u}.toml").is_file()
]
# Properties no mutant can reach on this machine, with the reason.
UNCATCHABLE = {
    "test_cpu_and_cuda_agree": "needs a CUDA device; worth no points, so it cannot lose any",
}


class Graded(dict):
    """unit -> mutant name -> that unit's result; one grading run per unit, on first use."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self.tmp = tmp_path_factory

    def __missing__(self, unit: str) -> dict[str, dict]:
        cases = mutants.load(unit)
        base = self.tmp.mktemp(unit)
        paths = [mutants.write(COURSE.units[unit].file, m, base / m["name"]) for m in cases]
        results = grade_json(paths, [unit])
        self[unit] = {m["name"]: r["units"][unit] for m, r in zip(cases, results)}
        return self[unit]


@pytest.fixture(scope="session")
def graded(tmp_path_factory) -> Graded:
    return Graded(tmp_path_factory)


@pytest.mark.parametrize("unit", UNITS)
def test_at_least_fifteen_mutants(unit):
    assert len(mutants.load(unit)) >= 15


@pytest.mark.parametrize("unit", UNITS)
def test_each_mutant_loses_points_in_its_unit(graded, unit):
    spared = [name for name, r in graded[unit].items() if r["score"] >= r["max_score"]]
    assert not spared, f"these {unit} mutants kept full marks: {spared}"


@pytest.mark.parametrize("unit", UNITS)
def test_every_property_catches_a_mutant(graded, unit):
    caught: dict[str, list[str]] = {}
    for name, result in graded[unit].items():
        for test in result["tests"]:
            if test["status"] == "failed" and test["visibility"] == "hidden":
                caught.setdefault(test["id"], []).append(name)
    properties = {t["id"] for r in graded[unit].values() for t in r["tests"] if t["visibility"] == "hidden"}
    idle = sorted(p for p in properties if p not in caught and p.split("::")[1] not in UNCATCHABLE)
    assert not idle, f"{unit}: these properties catch no mutant: {idle}"


@pytest.mark.parametrize("unit", UNITS)
def test_forbidden_calls_zero_the_unit(graded, unit):
    for name, result in graded[unit].items():
        if result["status"] == "forbidden":
            assert result["score"] == 0 and "must not call" in result["message"], (name, result["message"])
