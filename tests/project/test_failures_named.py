"""Failures where their names say (issue 58).

A property about a side aspect (a device, a dtype, a layout, a mode, the cache's bookkeeping,
the argument checks, shapes) is marked ``@pytest.mark.aspect(NAME)``; an unmarked one is about
values. Each entry of tests/mutants/<unit>.toml declares, as ``fails``, the aspects its bug fails.
Graded, every mutant fails exactly the aspects it declares: a numerical bug fails value properties
only, so a student who reads "dtype is preserved: failed" has a dtype bug.

Two exceptions: a side property's anchor (``compare.assert_roughly``), which an answer a whole
norm off the right one (or of the wrong shape) fails too, with a message that sends the student to
the value properties; and a file refused for a forbidden use, which fails every property with the
refusal's words.
"""
from __future__ import annotations

import ast
import re

import pytest

import mutants
from conftest import ROOT
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
UNITS_ALL = [u for u in COURSE.units if (mutants.MUTANTS / f"{u}.toml").is_file()]
UNITS = mutants.grouped(UNITS_ALL)
ASPECTS = {"value", "device", "dtype", "layout", "mode", "cache", "errors", "shape"}
# assert_roughly's message (autograder/testing/compare.py), as the English report writes it.
ANCHOR = "counts once that answer is roughly right"


def aspects_of(path) -> dict[str, str]:
    """Test function name -> its aspect, read from the ``pytest.mark.aspect("...")`` decorators."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            found[node.name] = "value"
            for decorator in node.decorator_list:
                if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                        and decorator.func.attr == "aspect"):
                    found[node.name] = ast.literal_eval(decorator.args[0])
    return found


def suite_aspects(unit: str) -> dict[str, str]:
    """``file::test`` -> aspect, over the unit's public and hidden suites (the ids its grade uses)."""
    found = {}
    for path in [COURSE.hidden_tests / f"test_{unit}_properties.py", ROOT / "tests" / "public" / f"test_{unit}_public.py"]:
        if path.is_file():
            found.update({f"{path.name}::{name}": aspect for name, aspect in aspects_of(path).items()})
    return found


def base_id(test_id: str) -> str:
    return re.sub(r"\[.*\]$", "", test_id)


def misnamed(unit: str, graded: dict[str, dict], aspects: dict[str, str]) -> list[str]:
    """What each mutant fails beyond what its entry declares, and what it declares but never fails
    (``aspects``: :func:`suite_aspects`)."""
    found = []
    for m in mutants.load(unit):
        if graded[m["name"]].get("status") == "forbidden":
            continue  # refused before any property runs: every one fails, with the refusal's words
        declared = set(m.get("fails", ()))
        failed: dict[str, list[str]] = {}
        for test in graded[m["name"]]["tests"]:
            if test["status"] == "failed" and ANCHOR not in (test["output"] or ""):
                failed.setdefault(aspects.get(base_id(test["id"]), "value"), []).append(test["id"].split("::")[-1])
        found += [f"{m['name']} fails {aspect} properties it does not declare: {tests}"
                  for aspect, tests in failed.items() if aspect not in declared]
        found += [f"{m['name']} declares {aspect} but fails no {aspect} property" for aspect in declared - set(failed)]
    return found


def test_every_entry_declares_known_aspects_and_every_marker_is_one():
    bad = [f"{unit}/{m['name']}: fails = {m.get('fails')!r}" for unit in UNITS_ALL for m in mutants.load(unit)
           if not m.get("fails") or not set(m["fails"]) <= ASPECTS]
    bad += [f"{unit}: {test} is marked {aspect!r}" for unit in UNITS_ALL
            for test, aspect in suite_aspects(unit).items() if aspect not in ASPECTS]
    assert not bad, "every catalogue entry declares the aspects it fails, from " + f"{sorted(ASPECTS)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("unit", UNITS)
def test_each_mutant_fails_the_aspects_it_declares(unit, catalogue):
    found = misnamed(unit, catalogue.mutants(unit), suite_aspects(unit))
    assert not found, "\n".join(found)


def test_the_check_reads_markers_and_tells_an_undeclared_aspect(tmp_path, monkeypatch):
    suite = tmp_path / "test_u_properties.py"
    suite.write_text('import pytest\n\n@pytest.mark.points(1)\n@pytest.mark.aspect("dtype")\ndef test_d(subject):\n'
                     '    """d"""\n\n\ndef test_v(subject):\n    """v"""\n', encoding="utf-8")
    assert aspects_of(suite) == {"test_d": "dtype", "test_v": "value"}
    monkeypatch.setattr(mutants, "load", lambda unit: [{"name": "m", "fails": ["value"]}])
    aspects = {f"{suite.name}::{name}": aspect for name, aspect in aspects_of(suite).items()}

    def graded(*failed):
        return {"m": {"tests": [{"id": f"test_u_properties.py::{t}[x]", "status": "failed", "output": o}
                                for t, o in failed]}}

    assert misnamed("u", graded(("test_v", "wrong")), aspects) == []
    assert misnamed("u", graded(("test_v", "wrong"), ("test_d", f"far off: it {ANCHOR}")), aspects) == []
    assert misnamed("u", graded(("test_v", "wrong"), ("test_d", "dtype float32")), aspects) == \
        ["m fails dtype properties it does not declare: ['test_d[x]']"]
    assert misnamed("u", graded(("test_d", "dtype float32")), aspects) == \
        ["m fails dtype properties it does not declare: ['test_d[x]']", "m declares value but fails no value property"]
