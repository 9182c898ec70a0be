"""Budgets that fit the work (issue 43, item 5): after two calls of a unit ran into the time
limit, its remaining calls fail at once ("time budget exhausted: an endless loop?"), in the
sandbox and in-process alike; code that never hits the limit keeps its points, however slow.

The whole-grade side (an endless loop waits out two limits per unit) is in test_sandbox.py's
loop tests; benchmarks/bench_endless_loop.py measures it with the default limits.
"""
from __future__ import annotations

import contextlib
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from autograder.core.manifest import load_course
from autograder.core.protocol import Call, Failure, Result, StudentError
from autograder.core.settings import DEFAULTS
from autograder.trust.subject import InProcessSubject
from autograder.sandbox.host import SandboxSubject
from test_sandbox import RAW, drive, leftovers

sys.path.insert(0, str(ROOT / "tests" / "hostile"))
import generated  # noqa: E402

COURSE = load_course(ROOT)
LIMIT = 0.5  # per call, for the subjects built here
ENDLESS = "time budget exhausted: an endless loop?"
SUBJECTS = {"sandbox": SandboxSubject, "in-process": InProcessSubject}


def call(subject, test: str, target: str, *args) -> tuple[Result | StudentError, float]:
    """Run ``target(*args)`` of attention as the first call of a new test: what it gave, and how long."""
    subject.begin(test)
    start = time.monotonic()
    try:
        out = subject.run(Call("attention", target, args))
    except StudentError as error:
        out = error
    return out, time.monotonic() - start


@pytest.fixture
def endless(tmp_path) -> Path:
    """Unit 2 never returns (plain code the course's rules accept); unit 4 is the reference."""
    shutil.copy(ROOT / "tests" / "hostile" / "endless_loop" / "attention.py", tmp_path)
    shutil.copy(ROOT / "solutions" / "positional_encoding.py", tmp_path)
    return tmp_path


def transcript(kind: str, folder: Path) -> list[tuple[StudentError | Result, float]]:
    """Three tests' first calls into the endless unit 2, then a call of unit 4."""
    with contextlib.closing(SUBJECTS[kind](COURSE, folder, timeout=LIMIT)) as subject:
        got = [call(subject, f"t{i}", target, *args) for i, (target, args) in enumerate(
            [("softmax", (torch.zeros(3),)), ("causal_mask", (3,)), ("scaled_dot_product_attention", (torch.zeros(2, 4),) * 3)])]
        subject.begin("t3")
        other = subject.run(Call("positional_encoding", "sinusoidal_encoding", (4, 8)))
    return got + [(other, 0.0)]


@pytest.mark.parametrize("kind", SUBJECTS)
def test_two_timeouts_end_the_unit_at_once(kind, endless):
    (first, t1), (second, t2), (third, t3), (other, _) = transcript(kind, endless)
    for error, seconds in ((first, t1), (second, t2)):
        assert isinstance(error, StudentError) and error.kind == Failure.TIMEOUT, error
        assert error.message == f"timed out after {LIMIT:g} s" and seconds >= LIMIT, (error, seconds)
    assert isinstance(third, StudentError) and third.kind == Failure.TIMEOUT, third
    assert third.message.startswith(ENDLESS), third.message
    # What the student needs: which call timed out first, and where it was spinning.
    assert re.search(rf"{DEFAULTS.timeouts_per_unit} calls ran past the {LIMIT:g} s limit \(the first: softmax, at attention\.py "
                     r"line \d+\)", third.message), third.message
    assert t3 < LIMIT / 2, t3
    # The rule is per unit: another unit of the same submission is graded as usual.
    assert isinstance(other, Result) and other.output.shape == (4, 8), other


def test_both_modes_fail_the_same_calls_the_same_way(endless):
    sandboxed, in_process = ([out.describe() for out, _ in transcript(kind, endless)[:3]] for kind in SUBJECTS)
    assert sandboxed == in_process


def test_a_loop_that_swallows_the_interruption_counts_too(tmp_path):
    # A bare except catches the worker's interruption, so the worker is killed after its grace.
    (tmp_path / "attention.py").write_text(
        "def softmax(x, dim=-1):\n    while True:\n        try:\n            while True:\n                pass\n"
        "        except:\n            pass\n", encoding="utf-8")
    with SandboxSubject(COURSE, tmp_path, timeout=LIMIT) as subject:
        got = [call(subject, f"t{i}", "softmax", torch.zeros(3)) for i in range(3)]
    for error, seconds in got[:2]:
        assert isinstance(error, StudentError) and error.message == f"timed out after {LIMIT:g} s", error
        assert seconds >= LIMIT + subject.grace, seconds
    error, seconds = got[2]
    assert isinstance(error, StudentError) and error.message.startswith(ENDLESS), error
    assert "(the first: softmax)" in error.message and seconds < LIMIT / 2, (error.message, seconds)


def slowed_reference(dest: Path, prefix: str) -> Path:
    """The reference of unit 2 with ``prefix`` run first in every softmax call, ``time`` imported
    for it: the course's rules refuse that import, so these submissions are graded with them off."""
    source = (ROOT / "solutions" / "attention.py").read_text(encoding="utf-8")
    assert source.count(generated.SOFTMAX_BODY) == 1, "the reference softmax changed: update tests/hostile/generated.py"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "attention.py").write_text(
        "import time\n" + source.replace(generated.SOFTMAX_BODY, prefix + generated.SOFTMAX_BODY), encoding="utf-8")
    return dest


SLOW = 0.6  # of the call limit, in every call of the slow submission
SLOW_LIMIT = 1.0  # per call for it: 0.4 s to spare for a loaded machine


@pytest.fixture
def slow_with_one_hang(tmp_path) -> Path:
    """Every softmax call 0.6 of the limit slow, and endless on one input (7 columns)."""
    return slowed_reference(tmp_path, "    if x.shape[-1] == 7:\n        while True:\n            pass\n"
                                      f"    time.sleep({SLOW * SLOW_LIMIT!r})\n")


@pytest.mark.parametrize("kind", SUBJECTS)
def test_one_timeout_and_slow_calls_leave_the_unit_running(kind, slow_with_one_hang):
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    with contextlib.closing(SUBJECTS[kind](RAW, slow_with_one_hang, timeout=SLOW_LIMIT)) as subject:
        hang, _ = call(subject, "hang", "softmax", torch.zeros(2, 7))
        assert isinstance(hang, StudentError) and hang.kind == Failure.TIMEOUT, hang
        # More calls near the limit than the rule allows time-outs, some in one test: none counts.
        slow = [call(subject, f"slow{i}", "softmax", x) for i in range(DEFAULTS.timeouts_per_unit + 1)]
        slow.append((subject.run(Call("attention", "softmax", (x,))), 0.0))
    for out, seconds in slow:
        assert isinstance(out, Result), out
        torch.testing.assert_close(out.output, torch.softmax(x, -1))
    assert all(seconds >= SLOW * SLOW_LIMIT for _, seconds in slow[:-1]), [s for _, s in slow]


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory) -> dict:
    """The reference 30 ms slower in each softmax call (about 700 calls: 20 s for the unit, some
    40 times what the reference's calls take), graded sandboxed with the default limits and budgets."""
    slow = slowed_reference(tmp_path_factory.mktemp("slow") / "slow_correct", "    time.sleep(0.03)\n")
    run = drive([slow], ["attention"], allow_list=False)
    run["leftovers"] = leftovers(run)
    return run


def test_slow_correct_code_keeps_full_marks(slow_run):
    unit = slow_run["results"][0]["units"]["attention"]
    assert unit["score"] == unit["max_score"] > 0, [(t["id"], t["output"]) for t in unit["tests"] if t["score"] < t["max_score"]]
    assert not slow_run["leftovers"], slow_run["leftovers"]
