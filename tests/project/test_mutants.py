"""Every hidden property earns its place: the kept buggy versions lose points,
each in its own unit, and every property catches at least one of them. The
same grading runs also prove that the reference scores full marks, the stubs
zero, that the sandbox and in-process modes agree (on a sample, see FULL), and
that every failure tells the student its case and how to rebuild it."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

import mutants
from conftest import ROOT, attn_course
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
# One xdist group per unit: one worker makes its two grading runs, which all of its checks share.
# Every unit: one without its catalogue fails here (and in test_registry), it is never skipped.
UNITS = mutants.grouped(COURSE.units)
# Properties no mutant can reach on this machine, with the reason.
UNCATCHABLE = {
    "test_cpu_and_cuda_agree": "needs a CUDA device; worth no points, so it cannot lose any",
}


# The sandbox-versus-in-process equivalence runs on a sample, by a fixed rule: the reference,
# the stubs, the alternative, every eighth mutant in catalogue order and every mutant that calls
# a forbidden function (the two modes catch those by different machinery). The whole catalogue
# is graded in process (conftest's `catalogue`), which every other check here reads.
# AUTOGRADER_TEST_FULL=1 (`make test-full`) grades the whole catalogue sandboxed too.
FULL = os.environ.get("AUTOGRADER_TEST_FULL") == "1"
SAMPLE_EVERY = 8  # every fourth took 45-70 s a unit in CI (341 s in all), twice this


@pytest.fixture(scope="session")
def graded_sandboxed(tmp_path_factory, catalogue) -> mutants.Graded:
    """The sample (or, with AUTOGRADER_TEST_FULL=1, the whole catalogue), sandboxed."""
    def keep(unit: str, name: str) -> bool:
        order = [m["name"] for m in mutants.load(unit)]
        return FULL or order.index(name) % SAMPLE_EVERY == 0 or catalogue[unit][name]["status"] == "forbidden"

    return mutants.Graded(tmp_path_factory, keep=keep)


@pytest.mark.parametrize("unit", UNITS)
def test_at_least_fifteen_mutants(unit):
    assert len(mutants.load(unit)) >= 15


@pytest.mark.parametrize("unit", UNITS)
def test_solutions_full_marks_stubs_zero(catalogue, unit):
    ref, stub = catalogue[unit]["solutions"], catalogue[unit]["assignments"]
    assert ref["max_score"] > 0 and ref["score"] == ref["max_score"], [t for t in ref["tests"] if t["status"] == "failed"]
    assert stub["score"] == 0 and stub["max_score"] == ref["max_score"], [t["name"] for t in stub["tests"] if t["score"]]


@pytest.mark.parametrize("unit", UNITS)
def test_each_mutant_loses_points_in_its_unit(catalogue, unit):
    spared = [name for name, r in catalogue.mutants(unit).items() if r["score"] >= r["max_score"]]
    assert not spared, f"these {unit} mutants kept full marks: {spared}"


@pytest.mark.parametrize("unit", UNITS)
def test_every_property_catches_a_mutant(catalogue, unit):
    caught: dict[str, list[str]] = {}
    for name, result in catalogue.mutants(unit).items():
        if result["status"] == "forbidden":  # every property reads as failed there: it proves nothing
            continue
        for test in result["tests"]:
            if test["status"] == "failed" and test["visibility"] == "hidden":
                caught.setdefault(test["id"], []).append(name)
    properties = {t["id"] for t in catalogue[unit]["solutions"]["tests"] if t["visibility"] == "hidden"}
    idle = sorted(p for p in properties if p not in caught and p.split("::")[1] not in UNCATCHABLE)
    assert not idle, f"{unit}: these properties catch no mutant: {idle}"


@pytest.mark.parametrize("unit", UNITS)
def test_forbidden_calls_zero_the_unit(catalogue, unit):
    forbidden = {name: r for name, r in catalogue.mutants(unit).items() if r["status"] == "forbidden"}
    assert forbidden, f"{unit}: keep at least one mutant that calls a forbidden function"
    for name, result in forbidden.items():
        assert result["score"] == 0 and "must not call" in result["message"], (name, result["message"])


@pytest.mark.parametrize("unit", UNITS)
def test_same_scores_sandboxed_and_in_process(catalogue, graded_sandboxed, unit):
    def summary(result: dict) -> dict:
        return {"status": result["status"], "tests": {t["id"]: (t["status"], t["score"]) for t in result["tests"]}}

    sample = graded_sandboxed[unit]
    assert len(sample) >= 3 + len(mutants.load(unit)) // SAMPLE_EVERY, sorted(sample)
    differ = [name for name, result in sample.items() if summary(result) != summary(catalogue[unit][name])]
    assert not differ, f"{unit}: the two modes disagree on {differ}"


# -- what a failure tells the student (issue 17) --------------------------------------------------

# A counterexample value that is a bare tuple of sizes of several kinds, ((), 1, 2, 2, 1): the
# student cannot tell which is which. Labelled ones read QKVShapes(B=(), L=1, ...) or L=1, S=2
# (a tensor's own shape, shape=(2, 5, 4), is labelled by its name).
BARE_TUPLE = re.compile(r"=\(\(")
# Results where no property ran the code, so there is no case to show.
NO_CASE = ("no points:", "not implemented yet", "importing ")  # the last: the unit did not load, no case to name


def _failures(catalogue: mutants.Graded, unit: str):
    for name, result in catalogue.mutants(unit).items():
        for test in result["tests"]:
            if test["status"] == "failed" and not test["output"].startswith(NO_CASE):
                yield name, test


@pytest.mark.parametrize("unit", UNITS)
def test_every_failure_labels_its_case(catalogue, unit):
    """Each failure names its case: hypothesis's counterexample with labels, or (a fixed example)
    the command that rebuilds it, or the call by shapes where its tensors are too big to print;
    no counterexample is a bare tuple of sizes."""
    unlabelled = [(name, t["id"], t["output"][:300]) for name, t in _failures(catalogue, unit)
                  if not any(mark in t["output"] for mark in ("(counterexample: ", "\nreproduce: ", "\nthe call: "))]
    bare = [(name, t["id"], t["output"].split("(counterexample: ")[1][:120]) for name, t in _failures(catalogue, unit)
            if "(counterexample: " in t["output"] and BARE_TUPLE.search(t["output"].split("(counterexample: ")[1])]
    assert not unlabelled and not bare, {"no case": unlabelled[:5], "bare tuples": bare[:5]}


def _reproduce_command(output: str) -> list[str]:
    line = output.split("\nreproduce: ", 1)[1].splitlines()[0]
    return shlex.split(line)[1:]  # without the program's name: run through this venv's


@pytest.mark.parametrize("unit", UNITS)
def test_repro_rebuilds_a_failure(catalogue, unit, tmp_path):
    """The command a hidden property's failure ends with, run on the mutant's own code, shows the
    same failure (exit 1); on the reference it shows the expected values (exit 0)."""
    with_case = [(name, t) for name, t in _failures(catalogue, unit)
                 if t["visibility"] == "hidden" and "\nreproduce: " in t["output"] and "\"expected\":" in t["output"]]
    assert with_case, f"{unit}: no hidden failure carries a reproduce command"
    name, test = with_case[0]
    mutant = mutants.write(COURSE.units[unit].file, next(m for m in mutants.load(unit) if m["name"] == name),
                           tmp_path / name)
    args = _reproduce_command(test["output"])
    assert args[:3] == ["repro", unit, test["id"].split("::")[1]], args[:3]
    run = attn_course(*args, "--path", str(mutant), check=False, timeout=120)
    assert run.returncode == 1 and "differ" in run.stdout, (name, test["output"][:400], run.stdout[-1500:], run.stderr[-1500:])
    fixed = attn_course(*args, "--path", str(COURSE.solutions), check=False, timeout=120)
    assert fixed.returncode == 0 and "equal within" in fixed.stdout, (name, fixed.stdout[-1500:], fixed.stderr[-1500:])
    # The same case as a script, run where the stubs' package holds the mutant, then the reference.
    script = attn_course(*args, "--snippet", timeout=120).stdout
    for folder, ok in ((mutant, False), (COURSE.solutions, True)):
        home = tmp_path / f"as-student-{ok}"
        shutil.copytree(folder, home / COURSE.assignments.name)
        ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=home)
        assert (ran.returncode == 0) == ok and ("Traceback" in ran.stderr) != ok, (folder.name, script, ran.stderr[-1500:])
        assert ok or "AssertionError" in ran.stderr, ran.stderr[-1500:]
