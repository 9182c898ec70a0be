"""Hints are proven (issue 16): a hint fires only when the answer on the counterexample is
that of one catalogued bug. Every mutant names in tests/mutants/<unit>.toml, as ``hints``,
the advice its bug should get (a part of each hint's text); grading every mutant and every
correct alternative shows that

  * each hint a mutant names fires on that mutant;
  * no other hint fires on it (none names a bug it does not have);
  * no hint fires on a correct alternative.

The catalogue's in-process grade (conftest's ``catalogue``) serves all its cases (it tests the
suites, not the sandbox).
"""
from __future__ import annotations

import importlib.util
import re

import pytest
import torch

import mutants
from conftest import ROOT
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
UNITS = mutants.grouped(u for u in COURSE.units if (mutants.MUTANTS / f"{u}.toml").is_file())
# A hint runs from "Hint: " to the counterexample the grader appends, or to the end.
HINT = re.compile(r"Hint: (.+?)(?= \(counterexample:|\Z)", re.S)


def fired(result: dict) -> dict[str, set[str]]:
    """Every hint in a unit's failed tests: hint text -> the tests it fired in."""
    found: dict[str, set[str]] = {}
    for test in result["tests"]:
        if test["status"] == "failed":
            for text in HINT.findall(test["output"] or ""):
                found.setdefault(text.strip(), set()).add(test["id"].split("::")[-1])
    return found


def problems(name: str, declared: list[str], hints: dict[str, set[str]]) -> list[str]:
    """What is wrong with one case's hints, against the advice its catalogue entry names."""
    silent = [d for d in declared if not any(d in text for text in hints)]
    stray = {text: tests for text, tests in hints.items() if not any(d in text for d in declared)}
    return ([f"{name}: its hint {d!r} never fired" for d in silent]
            + [f"{name}: a hint for another bug fired in {sorted(tests)}: {text!r}" for text, tests in stray.items()])


@pytest.mark.parametrize("unit", UNITS)
def test_hints_fire_on_their_own_mutant_only(unit, catalogue):
    declared = {m["name"]: m.get("hints", []) for m in mutants.load(unit)}
    cases = {"alternative": catalogue[unit]["alternative"], **catalogue.mutants(unit)}
    found = [p for name, result in cases.items() for p in problems(name, declared.get(name, []), fired(result))]
    assert not found, "\n".join(found)


def hidden_anchors():
    """tests/hidden/anchors.py, where the suites' hint rule lives."""
    spec = importlib.util.spec_from_file_location("hidden_anchors", ROOT / "tests" / "hidden" / "anchors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_hint_needs_exactly_one_matching_bug():
    anchors = hidden_anchors()
    right, got = torch.zeros(3), torch.ones(3)

    def hint(*catalogue):
        return anchors.proven_hint(got, right, catalogue, atol=1e-5, rtol=1e-4)

    assert hint((torch.ones(3), "a"), (2 * torch.ones(3), "b")) == "a"
    assert hint((torch.ones(3), "a"), (torch.ones(3) + 1e-7, "b")) is None  # two bugs match: no guess
    assert hint((torch.zeros(3), "a")) is None  # the bug changes nothing here: it proves nothing
    assert hint((torch.ones(3), "a"), (torch.ones(3), "a")) == "a"


def test_float64_computed_in_float32_gets_the_precision_hint():
    anchors = hidden_anchors()
    right = torch.linspace(0.1, 1.0, 5, dtype=torch.float64)
    lowered = right.float().double()
    with pytest.raises(AssertionError, match="lower precision") as error:
        anchors.assert_close(lowered, right, dtype=torch.float64, **anchors.tolerance(torch.float64))
    got, expected = re.search(r"got (\S+), expected (\S+) ", str(error.value)).groups()
    assert got != expected, "the values must print with enough digits to differ"
    assert anchors.proven_hint(lowered.float(), right, [], **anchors.tolerance(torch.float32, atol=1e-5, rtol=1e-4)) is None
