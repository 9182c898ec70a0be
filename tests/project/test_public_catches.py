"""`attn-course check` already catches most bugs: the public suite alone,
graded on the whole mutant catalogue, fails most mutants of every unit and
every classic bug a student is likely to write (issue 17)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import mutants
from conftest import ROOT
from autograder.core.manifest import load_course

# Its module fixture is built once: every test of this module runs on one xdist worker.
pytestmark = pytest.mark.xdist_group("public-checks")

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
}
# The public suite only, with the submission's own siblings, in process: what `check` runs.
# One grading run per unit, over every mutant folder at once.
GRADE_PUBLIC = """
import json, sys
from pathlib import Path
from autograder.grading.grade import grade
from autograder.core.manifest import load_course
unit, folders = sys.argv[1], [Path(p) for p in sys.argv[2:]]
results = grade(load_course(), folders, units=[unit], suites=("public",), isolate=False, sandbox=False)
print(json.dumps([r.to_dict()["units"][unit] for r in results]))
"""


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """unit -> mutant name -> that unit's public result."""
    out = {}
    for unit in UNITS:
        spec, base = COURSE.units[unit], tmp_path_factory.mktemp(unit)
        cases = {m["name"]: mutants.write(spec.file, m, base / m["name"]) for m in mutants.load(unit)}
        cases["solutions"] = COURSE.solutions
        proc = subprocess.run([sys.executable, "-c", GRADE_PUBLIC, unit, *map(str, cases.values())],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[unit] = dict(zip(cases, json.loads(proc.stdout)))
    return out


def _caught(result: dict) -> bool:
    return result["score"] < result["max_score"]


def test_solutions_pass_check(checked):
    failing = {u: r["solutions"]["tests"] for u, r in checked.items() if _caught(r["solutions"])}
    assert not failing, failing


@pytest.mark.parametrize("unit", UNITS)
def test_check_catches_most_mutants(checked, unit):
    results = {name: r for name, r in checked[unit].items() if name != "solutions"}
    caught = sorted(name for name, r in results.items() if _caught(r))
    fraction = len(caught) / len(results)
    missed = sorted(set(results) - set(caught))
    print(f"{unit}: check catches {len(caught)}/{len(results)} mutants ({fraction:.0%}); missed: {missed}")
    assert fraction >= TARGET, f"{unit}: check catches {fraction:.0%} < {TARGET:.0%}; missed: {missed}"


@pytest.mark.parametrize("unit", sorted(CLASSIC))
def test_check_catches_the_classic_bugs(checked, unit):
    spared = [name for name in CLASSIC[unit] if not _caught(checked[unit][name])]
    assert not spared, f"{unit}: `check` passes these classic bugs: {spared}"



def _failed_tests(result: dict) -> set[str]:
    return {t["id"].split("::")[1] for t in result["tests"] if t["status"] == "failed"}


def test_rope_failures_name_the_bug(checked):
    """The frequency bug fails the frequency test, not the pairing one, and the other way round."""
    frequency = _failed_tests(checked["positional_encoding"]["rope_exponent_i_over_dim"])
    pairing = _failed_tests(checked["positional_encoding"]["rope_rotate_half"])
    assert "test_rope_pair_frequency" in frequency and "test_rope_pairs_are_interleaved" not in frequency, frequency
    assert "test_rope_pairs_are_interleaved" in pairing, pairing
