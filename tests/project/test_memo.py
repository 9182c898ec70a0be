"""autograder.testing.memo: a remembered reference answer is the answer, never a stale or shared one."""
from __future__ import annotations

import torch

from autograder.testing import memo


def counting():
    calls = []

    @memo.remembered
    def double(x, *, factor=2.0, extra=None):
        calls.append(1)
        return x * factor, {"sum": (x * factor).sum()}

    return double, calls


def test_the_same_values_are_computed_once_and_other_values_again():
    double, calls = counting()
    x = torch.arange(6.0).reshape(2, 3)
    first = double(x)
    again = double(x.clone())  # another tensor, the same values
    assert len(calls) == 1 and torch.equal(first[0], again[0]) and torch.equal(first[1]["sum"], again[1]["sum"])
    changed = x.clone()
    changed[1, 2] += 1e-6
    double(changed)
    double(x, factor=3.0)
    double(x.double())  # the same numbers in another dtype
    double(x.reshape(3, 2))  # the same bytes in another shape
    assert len(calls) == 5


def test_an_answer_changed_by_its_caller_does_not_change_the_next():
    double, calls = counting()
    x = torch.ones(3)
    double(x)[0].fill_(-1)
    kept = double(x)
    kept[0].fill_(-2)
    assert torch.equal(double(x)[0], torch.full((3,), 2.0)) and len(calls) == 1


def test_what_cannot_be_keyed_exactly_is_computed_every_time():
    double, calls = counting()
    x = torch.ones(3, requires_grad=True)
    double(x)
    double(x)
    double(torch.ones(3), extra=object())
    double(torch.ones(3), extra=object())
    assert len(calls) == 4


def test_the_oldest_answers_go_first_past_the_budget(monkeypatch):
    monkeypatch.setattr(memo, "MAX_BYTES", 3 * (100 + 1) * 4 + 100)  # three answers of 100 floats and their sum
    double, calls = counting()
    inputs = [torch.full((100,), float(i)) for i in range(5)]
    for x in inputs:
        double(x)
    double(inputs[-1])
    assert len(calls) == 5  # the newest is kept
    double(inputs[0])
    assert len(calls) == 6  # the oldest was dropped
    assert memo._held[0] <= memo.MAX_BYTES


def test_a_one_submission_grader_keeps_nothing(monkeypatch):
    """keep_at_most(0) (GradingSession(remember=False)) drops what is held and keeps nothing after:
    each question is computed, and answered right."""
    monkeypatch.setattr(memo, "MAX_BYTES", memo.MAX_BYTES)  # restored after the test
    double, calls = counting()
    x = torch.arange(4.0)
    double(x)
    assert memo._held[0] > 0
    memo.keep_at_most(0)
    assert memo._held[0] == 0 and not memo._answers
    assert torch.equal(double(x)[0], 2 * x) and torch.equal(double(x)[0], 2 * x)
    assert len(calls) == 3 and not memo._answers
