"""Public tests for unit 2: run them with `attn-course check attention`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.compare import assert_close, check_tensor
from autograder.subject import Call

pytestmark = pytest.mark.unit("attention")


def run(subject, target, *args, **kwargs):
    return subject.run(Call("attention", target, args, kwargs)).output


@pytest.mark.points(1)
def test_softmax_small_example(subject):
    """softmax([0, ln 2, ln 3]) is [1/6, 2/6, 3/6]"""
    x = torch.tensor([0.0, math.log(2.0), math.log(3.0)])
    assert_close(run(subject, "softmax", x), torch.tensor([1.0, 2.0, 3.0]) / 6, what="softmax([0, ln 2, ln 3])")


@pytest.mark.points(1)
def test_causal_mask_three_by_three(subject):
    """causal_mask(3) is the lower triangle"""
    got = check_tensor(run(subject, "causal_mask", 3), shape=(3, 3), dtype=torch.bool, what="causal_mask(3)")
    assert torch.equal(got, torch.ones(3, 3, dtype=torch.bool).tril()), f"causal_mask(3) gave\n{got}"


@pytest.mark.points(1)
def test_attention_shapes(subject):
    """attention returns output (B, L, Ev) and weights (B, L, S)"""
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    out, weights = run(subject, "scaled_dot_product_attention", q, k, v)
    check_tensor(out, shape=(2, 3, 6), what="output")
    check_tensor(weights, shape=(2, 3, 5), what="weights")


@pytest.mark.points(1)
def test_attention_hand_example(subject):
    """one query, two keys: the weights are softmax of the scaled scores"""
    q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2, 2)
    v = torch.tensor([[[10.0], [20.0]]])  # (1, 2, 1)
    w = torch.softmax(torch.tensor([1.0, 0.0]) / math.sqrt(2.0), dim=0)
    out, weights = run(subject, "scaled_dot_product_attention", q, k, v)
    assert_close(weights, w.reshape(1, 1, 2), what="weights")
    assert_close(out, (w @ torch.tensor([10.0, 20.0])).reshape(1, 1, 1), what="output")
