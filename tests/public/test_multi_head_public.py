"""Public tests for unit 3: run them with `attn-course check multi_head`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.compare import assert_close, check_tensor
from autograder.subject import Call, New

pytestmark = pytest.mark.unit("multi_head")


def identity_state(E: int) -> dict:
    """Every projection the identity, every bias zero."""
    state = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        state[f"{name}.weight"] = torch.eye(E)
        state[f"{name}.bias"] = torch.zeros(E)
    return state


@pytest.mark.points(1)
def test_split_heads_small_example(subject):
    """split_heads of features [0 1 2 3] into 2 heads gives [0 1] and [2 3]"""
    x = torch.arange(8.0).reshape(1, 2, 4)  # (B=1, L=2, E=4)
    got = subject.run(Call("multi_head", "split_heads", (x, 2))).output
    check_tensor(got, shape=(1, 2, 2, 2), what="split_heads(x, 2)")
    want = torch.tensor([[[[0.0, 1.0], [4.0, 5.0]], [[2.0, 3.0], [6.0, 7.0]]]])
    assert_close(got, want, atol=0, rtol=0, what="split_heads(x, 2)")


@pytest.mark.points(1)
def test_merge_heads_undoes_split_heads(subject):
    """merge_heads(split_heads(x)) gives x back"""
    x = torch.arange(2 * 3 * 6.0).reshape(2, 3, 6)
    split = subject.run(Call("multi_head", "split_heads", (x, 3))).output
    back = subject.run(Call("multi_head", "merge_heads", (split,))).output
    assert_close(back, x, atol=0, rtol=0, what="merge_heads(split_heads(x, 3))")


@pytest.mark.points(1)
def test_output_and_weight_shapes(subject):
    """the output is (B, L, E); the weights (B, L, S) averaged, or (B, H, L, S) per head"""
    q, kv = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    recipe = New("MultiHeadAttention", (8, 2))
    out, weights = subject.run(Call("multi_head", recipe, (q, kv, kv))).output
    check_tensor(out, shape=(2, 3, 8), what="output")
    check_tensor(weights, shape=(2, 3, 5), what="averaged weights")
    _, per_head = subject.run(Call("multi_head", recipe, (q, kv, kv), {"average_attn_weights": False})).output
    check_tensor(per_head, shape=(2, 2, 3, 5), what="per-head weights")


@pytest.mark.points(1)
def test_identity_projections_hand_example(subject):
    """with identity projections and one head, it is softmax(x x^T / sqrt(E)) x"""
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2, 2)
    w = torch.softmax(torch.tensor([[1.0, 0.0], [0.0, 1.0]]) / math.sqrt(2.0), dim=-1)
    recipe = New("MultiHeadAttention", (2, 1), state=identity_state(2))
    out, weights = subject.run(Call("multi_head", recipe, (x,))).output
    assert_close(weights, w.unsqueeze(0), what="weights")
    assert_close(out, (w @ x[0]).unsqueeze(0), what="output")


@pytest.mark.points(1)
def test_padded_key_gets_no_weight(subject):
    """a key marked True in key_padding_mask gets zero weight"""
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, 3, 2)
    padding = torch.tensor([[False, False, True]])
    recipe = New("MultiHeadAttention", (2, 1), state=identity_state(2))
    _, weights = subject.run(Call("multi_head", recipe, (x,), {"key_padding_mask": padding})).output
    check_tensor(weights, shape=(1, 3, 3), what="weights")
    assert_close(weights[..., 2], torch.zeros(1, 3), what="weights of the padded key")
    assert_close(weights.sum(-1), torch.ones(1, 3), what="weight row sums")
