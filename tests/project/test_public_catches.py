"""`attn-course check` already catches most bugs: the public suite alone,
graded on the whole mutant catalogue, fails most mutants of every unit and
every classic bug a student is likely to write (issue 17)."""
from __future__ import annotations

import pytest

import mutants
from conftest import ROOT
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
UNITS = [u for u in COURSE.units if (mutants.MUTANTS / f"{u}.toml").is_file()]


TARGET = 0.6
# The classic bugs: each must fail `check`, so the student sees it before the grade.
CLASSIC = {
    "attention": ["mask_large_negative", "causal_top_left", "mask_polarity", "float_mask_ignored",
                  "causal_drops_mask", "neg_inf_rows_nan", "dropout_rate_hardcoded"],
    "multi_head": ["padding_large_negative", "padding_polarity", "kv_swapped", "kdim_ignored"],
    "positional_encoding": ["rope_rotate_half", "rope_exponent_i_over_dim", "concatenated_layout"],
    "transformer_block": ["norm_first_ignored", "norm_first_inverted", "pre_norm_residual_from_normalized"],
    # The online softmax without its rescale, of l, of acc or of both (issue 58: the public tile test
    # once let all three pass).
    "efficient_attention": ["no_rescale", "sum_not_rescaled", "output_not_rescaled"],
}
# What `check` reports is the public suite's verdict, and that verdict is already in each
# catalogue case's grade: the public tests run there with the same derandomized examples (each
# test's examples are a function of the test alone), and a mutant's siblings are the reference's
# own files, which `check` imports and the grade's stand-ins stand for. So the catalogue graded
# once for the whole run (conftest's `catalogue`, shared with test_mutants.py and test_hints.py)
# is read here, its visible tests only, rather than graded a second time (78 s of CI).


def checked(catalogue, unit: str) -> dict[str, dict]:
    """Mutant name (and "solutions") -> that unit's public tests, from the catalogue's in-process grade."""
    cases = {**catalogue.mutants(unit), "solutions": catalogue[unit]["solutions"]}
    return {name: _public(result) for name, result in cases.items()}


def _public(result: dict) -> dict:
    return {**result, "tests": [t for t in result["tests"] if t["visibility"] == "visible"]}


def _caught(result: dict) -> bool:
    """A forbidden call zeroes every test, public ones included: `check` refuses it too."""
    return result["status"] == "forbidden" or any(t["status"] == "failed" for t in result["tests"])


@pytest.mark.parametrize("unit", mutants.grouped(UNITS))
def test_solutions_pass_check(unit, catalogue):
    solutions = checked(catalogue, unit)["solutions"]
    assert not _caught(solutions), solutions["tests"]


@pytest.mark.parametrize("unit", mutants.grouped(UNITS))
def test_check_catches_most_mutants(unit, catalogue):
    results = {name: r for name, r in checked(catalogue, unit).items() if name != "solutions"}
    caught = sorted(name for name, r in results.items() if _caught(r))
    fraction = len(caught) / len(results)
    missed = sorted(set(results) - set(caught))
    print(f"{unit}: check catches {len(caught)}/{len(results)} mutants ({fraction:.0%}); missed: {missed}")
    assert fraction >= TARGET, f"{unit}: check catches {fraction:.0%} < {TARGET:.0%}; missed: {missed}"


@pytest.mark.parametrize("unit", mutants.grouped(sorted(CLASSIC)))
def test_check_catches_the_classic_bugs(unit, catalogue):
    results = checked(catalogue, unit)
    spared = [name for name in CLASSIC[unit] if not _caught(results[name])]
    assert not spared, f"{unit}: `check` passes these classic bugs: {spared}"


def _failed_tests(result: dict) -> set[str]:
    return {t["id"].split("::")[1] for t in result["tests"] if t["status"] == "failed"}


@pytest.mark.xdist_group("mutants-positional_encoding")
def test_rope_failures_name_the_bug(catalogue):
    """The frequency bug fails the frequency test, not the pairing one, and the other way round."""
    results = checked(catalogue, "positional_encoding")
    frequency = _failed_tests(results["rope_exponent_i_over_dim"])
    pairing = _failed_tests(results["rope_rotate_half"])
    assert "test_rope_pair_frequency" in frequency and "test_rope_pairs_are_interleaved" not in frequency, frequency
    assert "test_rope_pairs_are_interleaved" in pairing, pairing
