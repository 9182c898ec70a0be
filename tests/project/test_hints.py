"""Hints are proven (issue 16): a hint fires only when the answer on the counterexample is
that of one catalogued bug. Every mutant names in tests/mutants/<unit>.toml, as ``hints``,
the advice its bug should get (a part of each hint's text); grading every mutant and every
correct alternative shows that

  * each hint a mutant names fires on that mutant;
  * no other hint fires on it (none names a bug it does not have);
  * no hint fires on a correct alternative;
  * and the other way round: every hint the unit's suite can give (each advice text written in
    its hidden files, found by :func:`written_hints`) fires on some mutant of its catalogue.

The catalogue's in-process grade (conftest's ``catalogue``) serves all its cases (it tests the
suites, not the sandbox).
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

import mutants
from hint_texts import fired, written_hints
from conftest import ROOT
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
UNITS = mutants.grouped(u for u in COURSE.units if (mutants.MUTANTS / f"{u}.toml").is_file())
UNITS_ALL = [u for u in COURSE.units if (mutants.MUTANTS / f"{u}.toml").is_file()]
HIDDEN = ROOT / "tests" / "hidden"


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


def _unit_files(unit: str) -> list[Path]:
    return [p for p in sorted(HIDDEN.glob("*.py")) if p.stem in (f"oracles_{unit}", f"test_{unit}_properties")]


@pytest.mark.parametrize("unit", UNITS)
def test_every_written_hint_fires_on_a_mutant_of_its_unit(unit, catalogue):
    """No hint is unproven: each one the unit's suite can give fires on some mutant of its catalogue."""
    texts = {text for result in catalogue.mutants(unit).values() for text in fired(result)}
    unproven = [f"{path.name}: {shown!r}" for path in _unit_files(unit)
                for shown, pattern in written_hints(path).items() if not any(pattern.match(t) for t in texts)]
    assert not unproven, "hints no mutant triggers (add the bug to tests/mutants/, or drop the hint):\n" + \
        "\n".join(unproven)


def test_the_public_tests_give_the_hidden_grades_words():
    """A public case that shows a catalogued bug gives the hidden grade's advice, word for word
    (``check`` and the grade then agree; the mutant's own test proves it fires)."""
    public = ROOT / "tests" / "public"
    for unit in UNITS_ALL:
        hidden = {text for path in _unit_files(unit) for text in written_hints(path)}
        for path in sorted(public.glob(f"test_{unit}_public.py")):
            assert set(written_hints(path)) <= hidden, sorted(set(written_hints(path)) - hidden)


def test_every_shared_hint_is_named_by_a_mutant():
    """The hints every suite shares (anchors.py) are each named by a mutant of some unit, whose
    own test proves it fires (test_hints_fire_on_their_own_mutant_only)."""
    declared = {d for unit in UNITS_ALL for m in mutants.load(unit) for d in m.get("hints", [])}
    written = [*written_hints(HIDDEN / "anchors.py"), hidden_anchors().DOWNCAST]
    assert [shown for shown in written if not any(d in shown for d in declared)] == []


def test_written_hints_finds_literals_fstrings_and_constants(tmp_path):
    (tmp_path / "suite.py").write_text(
        'TILE = "query head h shares kv head h // G: consecutive heads."\n'
        'hints = [(a, "the scale is 1/sqrt(E), not 1/E."), (b, f"the `eps` argument ({eps:g}) was ignored."),\n'
        '         (c, TILE), (d, "norm2")]\n')
    found = written_hints(tmp_path / "suite.py")
    assert set(found) == {"the scale is 1/sqrt(E), not 1/E.", "the `eps` argument (…) was ignored.",
                          "query head h shares kv head h // G: consecutive heads."}
    assert found["the `eps` argument (…) was ignored."].match("the `eps` argument (0.001) was ignored.")


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


def test_a_small_error_in_float64_is_not_called_a_precision_bug():
    """A wrong scale (1/sqrt(Ev) for 1/sqrt(E), with E close to Ev) errs by less than a float32
    rounding here, yet was computed in float64: no precision hint (it was a guess before)."""
    anchors = hidden_anchors()
    right = torch.linspace(0.1, 1.0, 5, dtype=torch.float64)
    scaled = right * (64 / 64.00001) ** 0.5
    assert 0 < (scaled - right).abs().max() < 1e-6
    with pytest.raises(AssertionError) as error:
        anchors.assert_close(scaled, right, dtype=torch.float64, **anchors.tolerance(torch.float64))
    assert "Hint" not in str(error.value)


# -- coverage (issue 58): a hint for every bug the catalogue holds ------------------------------
#
# A mutant is "named" when one of the hints its entry declares fires in one of its failed tests (and,
# by test_hints_fire_on_their_own_mutant_only, no other hint does: none misdirects), or when the
# grader refuses its file for a forbidden use, a refusal that names the use and its line. An entry
# that cannot be told apart from the right answer or from another bug on any case keeps `hints = []`,
# with a comment saying why; at most a tenth of the catalogue may.
COVERAGE = 0.90


def coverage(unit: str, graded: dict[str, dict]) -> tuple[list[str], list[str]]:
    """(the mutants of ``unit`` whose declared hint fires, those whose hint misdirects)."""
    named, misdirected = [], []
    for m in mutants.load(unit):
        hints = fired(graded[m["name"]])
        declared = m.get("hints", [])
        refused = graded[m["name"]].get("status") == "forbidden" and "line" in (graded[m["name"]].get("message") or "")
        if refused or any(d in text for d in declared for text in hints):
            named.append(m["name"])
        if any(not any(d in text for d in declared) for text in hints):
            misdirected.append(m["name"])
    return named, misdirected


@pytest.mark.xdist_group("hint-coverage")
def test_the_catalogue_is_named_by_its_hints(catalogue):
    """Over the whole catalogue, at least COVERAGE of the bugs get the hint that names them, and
    none gets a hint for another bug. Prints the figure the README gives."""
    total = named = 0
    wrong: list[str] = []
    lines = []
    for unit in UNITS_ALL:
        right, misdirected = coverage(unit, catalogue.mutants(unit))
        count = len(mutants.load(unit))
        total, named = total + count, named + len(right)
        wrong += [f"{unit}/{name}" for name in misdirected]
        lines.append(f"{unit}: {len(right)}/{count}")
    print(f"hint coverage: {named}/{total} = {named / total:.0%} ({', '.join(lines)}); misdirected: {len(wrong)}")
    assert not wrong, f"hints that name another bug: {wrong}"
    assert named / total >= COVERAGE, f"only {named}/{total} of the catalogue's bugs get their hint: " + \
        ", ".join(lines)


def test_coverage_counts_a_declared_hint_and_flags_a_stray_one(monkeypatch):
    entries = [{"name": "a", "hints": ["divide by sqrt"]}, {"name": "b", "hints": []}, {"name": "c", "hints": ["x y"]}]
    monkeypatch.setattr(mutants, "load", lambda unit: entries)

    def result(*outputs):
        return {"tests": [{"id": f"t.py::t{i}", "status": "failed", "output": o} for i, o in enumerate(outputs)]}

    graded = {"a": result("wrong. Hint: did you divide by sqrt(d)?"), "b": result("wrong"),
              "c": result("wrong. Hint: normalize over the keys (counterexample: ...)")}
    assert coverage("u", graded) == (["a"], ["c"])
    graded["b"].update(status="forbidden", message="u.py uses torch.softmax (line 3)")
    assert coverage("u", graded) == (["a", "b"], ["c"])
