"""Trust by enforcement (issue 42): the attack suite written against the redesign.

tests/hostile/trust/attacks.toml holds the attacks as data: each a patch (find/replace, the format of
tests/mutants/*.toml) of one unit's reference solution that would earn points if the grader were
fooled (the patched file's docstring names the attack and its class, 1-5; the README's table lists
them with the score the old grader gave each). tests/project/trust.py materializes each into a folder
holding only that unit's file (its siblings are the course's stand-ins). All of them are graded in one
sandboxed run per mode (``attack_runs``: "full", "container", "plain"), which grades the removal suite's
attacks too, next to the reference solutions, which must keep full marks in that same run. The run's
own checks (its mode, the reference's marks, nothing left behind) are here, once for both suites.

What a sound grader does with each case:
  * classes 1-4 (forbidden work hidden from the grader, reports edited, code the scan never read,
    kernels outside the list, trust leaking from stand-ins and handed torch modules): the unit
    earns at most the points of its suite's pure shape checks (SHAPE_CHECKS; in practice 0, since
    a forbidden use costs the whole unit);
  * class 5 (flash_attention's memory bound faked): the values are right, so the unit keeps those
    points, but never the memory bound's (at least MEMORY_POINTS below full marks).
"""
from __future__ import annotations

import ast
from collections import Counter

import pytest

from conftest import ROOT
from autograder.core.manifest import load_course
import attack_runs
from trust import ATTACKS, BY_NAME, TRUST, materialize, source

COURSE = load_course(ROOT)
MEMORY_POINTS = 2  # the API page's memory bound of flash_attention ("keep the 2 points", issue 42)
# Attacks the grader does not stop yet (strict: an attack that starts failing must leave this list).
OPEN: dict[str, str] = {}


def unit_of(folder) -> str:
    units = [u.name for u in COURSE.units.values() if (folder / u.file).is_file()]
    assert len(units) == 1, f"{folder.name} must hold exactly one unit file, holds {units}"
    return units[0]


def attack_class(folder) -> int:
    """The class (1-5) the file's docstring names: 'Hostile (issue 42, class N): ...'."""
    doc = ast.get_docstring(ast.parse((folder / COURSE.units[unit_of(folder)].file).read_text(encoding="utf-8")))
    assert doc and doc.startswith("Hostile (issue 42, class "), folder.name
    return int(doc.split("class ", 1)[1][0])


CASES = sorted(a["name"] for a in ATTACKS)


def materialized(base) -> dict:
    """case -> its folder under ``base``, holding only the attack's unit file."""
    return {c: materialize(BY_NAME[c], base) for c in CASES}


def shape_points(unit: str, tests: dict) -> float:
    """The points of the suite's SHAPE_CHECKS (read without importing the suite)."""
    path = COURSE.hidden_tests / f"test_{unit}_properties.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SHAPE_CHECKS" for t in node.targets):
            return sum(tests[i]["max_score"] for i in ast.literal_eval(node.value) if i in tests)
    raise AssertionError(f"{path.name} defines no SHAPE_CHECKS")


def test_the_suite_covers_every_unit_and_class(tmp_path):
    assert len(CASES) >= 30, len(CASES)
    assert len(set(CASES)) == len(ATTACKS), [n for n, c in Counter(a["name"] for a in ATTACKS).items() if c > 1]
    folders = materialized(tmp_path)
    units = {}
    classes = {}
    for case in CASES:
        assert unit_of(folders[case]) == BY_NAME[case]["unit"], case
        units[unit_of(folders[case])] = units.get(unit_of(folders[case]), 0) + 1
        classes[attack_class(folders[case])] = classes.get(attack_class(folders[case]), 0) + 1
    assert set(units) == set(COURSE.units) and min(units.values()) >= 3, units
    assert set(classes) == {1, 2, 3, 4, 5} and min(classes.values()) >= 4, classes
    listed = (TRUST / "README.md").read_text(encoding="utf-8")
    assert all(f"`{case}`" in listed for case in CASES), [c for c in CASES if f"`{c}`" not in listed]


def test_each_patch_applies():
    for case in CASES:
        attack = BY_NAME[case]
        assert set(attack) == {"name", "unit", "replace"}, (case, sorted(attack))
        solution = (COURSE.solutions / COURSE.units[attack["unit"]].file).read_text(encoding="utf-8")
        for find, _ in attack["replace"]:
            assert solution.count(find) == 1, (case, find[:80], solution.count(find))
        patched = source(attack)  # each find still occurs once when its turn comes
        assert patched != solution, case
        compile(patched, COURSE.units[attack["unit"]].file, "exec")


def test_mode_is_the_one_asked_for(attack_run):
    assert attack_run["mode"] == attack_run["expected"], attack_run["mode"]
    assert attack_run["forked"] == (attack_run["mode"] == "container"), attack_run["forked"]


def test_reference_keeps_full_marks_beside_the_attacks(attack_run):
    for unit in attack_runs.UNITS:
        result = attack_run["reference"][unit]
        lost = [(t["id"], t["output"][:200]) for t in result["tests"] if t["score"] < t["max_score"]]
        assert result["score"] == result["max_score"] > 0, (unit, lost[:3])


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(c in OPEN, reason=OPEN.get(c, ""), strict=True))
                                  for c in CASES])
def test_attack_earns_nothing_for_what_it_did_not_do(attack_run, case):
    folder = attack_run["folders"]["trust"][case]
    unit = unit_of(folder)
    result = attack_run["trust"][case]
    tests = {t["id"]: t for t in result["tests"]}
    earned = [(i, t["score"]) for i, t in tests.items() if t["score"]]
    if attack_class(folder) == 5:
        # Honest values, a faked memory bound: the bound's points are lost, whatever else it earns.
        assert result["max_score"] > 0, (case, result["status"], result["message"])
        assert result["score"] <= result["max_score"] - MEMORY_POINTS, (case, result["score"], result["max_score"])
    else:
        bound = shape_points(unit, tests)
        assert result["score"] <= bound, (case, unit, result["status"], result["score"], bound, earned[:8])


def test_nothing_outlives_the_run(attack_run):
    assert not attack_run["leftovers"], attack_run["leftovers"]
