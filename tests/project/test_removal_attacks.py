"""Trust by removal (issue 57): the attack suite written against the new design.

tests/hostile/removal/attacks.toml holds the attacks as data: each a patch (find/replace, the format of
tests/mutants/*.toml) of one unit's reference solution that would earn points if the design had a hole,
with its kind (deferred, c_callable, swapped_submodule, kept_reference, memory); the README's table lists
them with the score today's grader (42e5088) gave each. tests/project/removal.py materializes each into a
folder holding only that unit's file (its siblings are the course's stand-ins, as in the trust suite).
All of them are graded in one sandboxed run per mode (``attack_runs``: "full", "container", "plain"), with
the trust suite's attacks and next to the reference solutions; test_trust_attacks.py checks that run's mode,
that the reference keeps full marks in it and that nothing outlives it.

What a sound grader does with each attack:
  * deferred, c_callable, swapped_submodule, kept_reference (a forbidden computation run where the engine,
    a stand-in or torch's Python calls it): the unit earns at most the points of its suite's pure shape
    checks (SHAPE_CHECKS; in practice 0, since a refused kernel costs the whole unit);
  * memory (flash_attention's memory bound faked through the export): the values are right, so the unit
    may keep those points, but never the memory bound's (at least MEMORY_POINTS below full marks).
"""
from __future__ import annotations

import ast
from collections import Counter

import pytest

from removal import ATTACKS, BY_NAME, COURSE, KINDS, REMOVAL, materialize, source
from test_sandbox import drive
import attack_runs

TIMEOUT = attack_runs.TIMEOUT
MEMORY_POINTS = 2  # the API page's memory bound of flash_attention
# Attacks the grader does not stop yet (strict: an attack that starts failing must leave this list).
OPEN: dict[str, str] = {}

NAMES = [a["name"] for a in ATTACKS]
UNITS = sorted({a["unit"] for a in ATTACKS}, key=list(COURSE.units).index)


def shape_points(unit: str, tests: dict) -> float:
    """The points of the suite's SHAPE_CHECKS (read without importing the suite)."""
    path = COURSE.hidden_tests / f"test_{unit}_properties.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SHAPE_CHECKS" for t in node.targets):
            return sum(tests[i]["max_score"] for i in ast.literal_eval(node.value) if i in tests)
    raise AssertionError(f"{path.name} defines no SHAPE_CHECKS")


def test_the_suite_covers_every_kind_and_unit():
    assert len(ATTACKS) >= 28, len(ATTACKS)
    assert len(set(NAMES)) == len(NAMES), [n for n, c in Counter(NAMES).items() if c > 1]
    for attack in ATTACKS:
        assert set(attack) == {"name", "unit", "kind", "attack", "replace"}, (attack["name"], sorted(attack))
        assert attack["kind"] in KINDS and attack["unit"] in COURSE.units, (attack["name"], attack["kind"], attack["unit"])
        assert attack["name"].startswith(attack["unit"] + "_"), attack["name"]
    kinds = Counter(a["kind"] for a in ATTACKS)
    assert set(kinds) == set(KINDS) and min(kinds.values()) >= 4, kinds
    units = Counter(a["unit"] for a in ATTACKS)
    # Every unit with a kernel family (positional_encoding has none, and no stand-in or handed module).
    assert {u for u, spec in COURSE.units.items() if spec.kernels} <= set(units), units
    assert min(units.values()) >= 3, units
    assert {a["unit"] for a in ATTACKS if a["kind"] == "memory"} == {"efficient_attention"}
    listed = (REMOVAL / "README.md").read_text(encoding="utf-8")
    assert all(f"`{n}`" in listed for n in NAMES), [n for n in NAMES if f"`{n}`" not in listed]


@pytest.mark.parametrize("name", NAMES)
def test_each_patch_applies(name):
    attack = BY_NAME[name]
    solution = (COURSE.solutions / COURSE.units[attack["unit"]].file).read_text(encoding="utf-8")
    for find, _ in attack["replace"]:
        assert solution.count(find) == 1, (name, find[:80], solution.count(find))
    patched = source(attack)  # each find still occurs once when its turn comes
    assert patched != solution
    compile(patched, COURSE.units[attack["unit"]].file, "exec")


def _assert_sound(name: str, result: dict) -> None:
    attack = BY_NAME[name]
    tests = {t["id"]: t for t in result["tests"]}
    earned = [(i, t["score"]) for i, t in tests.items() if t["score"]]
    if attack["kind"] == "memory":
        # Honest values, a faked memory bound: the bound's points are lost, whatever else it earns.
        assert result["max_score"] > 0, (name, result["status"], result["message"])
        assert result["score"] <= result["max_score"] - MEMORY_POINTS, (name, result["score"], result["max_score"])
    else:
        bound = shape_points(attack["unit"], tests)
        assert result["score"] <= bound, (name, attack["unit"], result["status"], result["score"], bound, earned[:8])


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(n in OPEN, reason=OPEN.get(n, ""), strict=True))
                                  for n in NAMES])
def test_attack_earns_nothing_for_what_it_did_not_do(attack_run, name):
    _assert_sound(name, attack_run["removal"][name])


@pytest.mark.xdist_group("removal-in-process")
def test_in_process_grading_holds_the_same_bounds(tmp_path):
    """The paths that grade in process (`check`, so Classroom's; a notebook's kernel; `--no-sandbox`)
    refuse the families during the call instead of for the process's life: the same bounds hold."""
    run = drive([COURSE.solutions, *(materialize(a, tmp_path) for a in ATTACKS)], UNITS, timeout=TIMEOUT, sandbox=False)
    for unit in UNITS:
        assert run["results"][0]["units"][unit]["score"] == run["results"][0]["units"][unit]["max_score"] > 0, unit
    for attack, result in zip(ATTACKS, run["results"][1:]):
        _assert_sound(attack["name"], result["units"][attack["unit"]])
