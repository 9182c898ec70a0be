"""Honest idioms keep their marks (issue 57): the correct alternatives of tests/alternatives/idioms.toml.

Each entry is the reference with one unit's file patched into an idiom the old allow-list refused
(`x.device.type == "meta"`, `t.type(dtype)`, `from torch.autograd.function import Function`,
`torch.utils.checkpoint`, `self._private` in the file's own classes) or into a correct port of public
code (Meta LLaMA's and GPT-J's RoPE, HF's DynamicCache, LLaMA's repeat_kv). Every entry must keep
FULL MARKS in its unit, sandboxed, graded beside the reference in one run. One entry imports numpy
for a constant: refused by decision (numpy is not an allowed module), it scores 0 and the refusal
names numpy and its line.

benchmarks/bench_idioms_seeds.py grades the same entries (and solutions/, tests/alternatives/) under
hypothesis seeds 0 to 9, by hand.
"""
from __future__ import annotations

import pytest

import idioms
from conftest import ROOT
from autograder.core.manifest import load_course
from test_sandbox import drive

COURSE = load_course(ROOT)
TIMEOUT = 4.0  # per call: the reference's flash_attention at L = S = 4096 needs about 1 s here
ENTRIES = idioms.load()
BY_NAME = {e["name"]: e for e in ENTRIES}
UNITS = sorted({e["unit"] for e in ENTRIES}, key=list(COURSE.units).index)
FULL = [e["name"] for e in ENTRIES if e["expect"] == "full_marks"]
REFUSED = [e["name"] for e in ENTRIES if e["expect"] == "refused"]

# Every test of this module reads one grading run: one worker makes it.
pytestmark = pytest.mark.xdist_group("idioms")


def test_the_catalogue_covers_every_idiom_where_it_is_natural():
    have = {(e["idiom"], e["unit"]) for e in ENTRIES}
    wanted = {("device_type", u) for u in ("attention", "multi_head", "efficient_attention", "transformer_block",
                                            "positional_encoding")}
    wanted |= {("type_cast", u) for u in ("positional_encoding", "efficient_attention")}
    wanted |= {("autograd_function", "attention"), ("autograd_function", "efficient_attention")}
    wanted |= {("checkpoint", "efficient_attention"), ("checkpoint", "transformer_block")}
    wanted |= {("private_self", u) for u in ("recurrent_cells", "positional_encoding", "efficient_attention")}
    assert wanted <= have, sorted(wanted - have)
    assert sum(e["idiom"] == "port" for e in ENTRIES) >= 4
    assert [BY_NAME[n]["idiom"] for n in REFUSED] == ["numpy"], REFUSED
    assert all(e["source"].strip() for e in ENTRIES)


@pytest.mark.parametrize("name", [e["name"] for e in ENTRIES])
def test_every_patch_applies_once_and_compiles(name):
    entry = BY_NAME[name]
    original = (COURSE.solutions / COURSE.units[entry["unit"]].file).read_text(encoding="utf-8")
    patched = idioms.patched_source(entry)  # ValueError unless each find occurs exactly once
    assert patched != original
    compile(patched, COURSE.units[entry["unit"]].file, "exec")


# One sandboxed grading run for every entry and the reference (session scope: interleaved modules
# would start it again).
@pytest.fixture(scope="session")
def idiom_run(tmp_path_factory) -> dict:
    folders = idioms.materialize(tmp_path_factory.mktemp("idioms"), ENTRIES)
    names = list(folders)
    run = drive([COURSE.solutions, *folders.values()], UNITS, timeout=TIMEOUT)
    run["reference"] = run["results"][0]["units"]
    run["by_name"] = {n: r["units"][BY_NAME[n]["unit"]] for n, r in zip(names, run["results"][1:])}
    return run


def lost(result: dict) -> list:
    return [(t["id"], t["output"][:400]) for t in result["tests"] if t["score"] < t["max_score"]]


def test_reference_keeps_full_marks_beside_the_idioms(idiom_run):
    for unit in UNITS:
        result = idiom_run["reference"][unit]
        assert result["score"] == result["max_score"] > 0, (unit, result["status"], result["message"], lost(result)[:3])


@pytest.mark.parametrize("name", FULL)
def test_honest_idiom_keeps_full_marks(idiom_run, name):
    result = idiom_run["by_name"][name]
    assert result["score"] == result["max_score"] > 0, (
        f"{name} ({BY_NAME[name]['idiom']}, {BY_NAME[name]['unit']}): {result['score']}/{result['max_score']} "
        f"{result['status']}: {result['message']}", lost(result)[:5])


@pytest.mark.parametrize("name", REFUSED)
def test_numpy_is_refused_by_decision_naming_the_line(idiom_run, name):
    entry = BY_NAME[name]
    result = idiom_run["by_name"][name]
    line = idioms.line_of(entry, "import numpy")
    assert result["score"] == 0 and result["max_score"] > 0, (result["score"], result["status"])
    assert "numpy" in result["message"] and f"line {line}" in result["message"], result["message"]
