"""Public tests for unit 3: run them with `attn-course check multi_head`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.testing.compare import assert_close, assert_raises, check_tensor
from autograder.core.protocol import Call, New

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
    # Checks: M1.
    x = torch.arange(8.0).reshape(1, 2, 4)  # (B=1, L=2, E=4)
    got = subject.run(Call(subject.unit, "split_heads", (x, 2))).output
    check_tensor(got, shape=(1, 2, 2, 2), what="split_heads(x, 2)")
    want = torch.tensor([[[[0.0, 1.0], [4.0, 5.0]], [[2.0, 3.0], [6.0, 7.0]]]])
    assert_close(got, want, atol=0, rtol=0, what="split_heads(x, 2)")


@pytest.mark.points(1)
def test_merge_heads_undoes_split_heads(subject):
    """merge_heads(split_heads(x)) gives x back"""
    # Checks: M2.
    x = torch.arange(2 * 3 * 8.0).reshape(2, 3, 8)  # L = 3 positions, H = 4 heads: a swap of the two shows
    split = subject.run(Call(subject.unit, "split_heads", (x, 4))).output
    back = subject.run(Call(subject.unit, "merge_heads", (split,))).output
    # The right split, (B, H, L, Dh), flattened to (B, L, E) without moving the heads back.
    unmoved = x.reshape(2, 3, 4, 2).transpose(1, 2).reshape(2, 3, 8)
    assert_close(back, x, atol=0, rtol=0, what="merge_heads(split_heads(x, 4))",
                 hints=[(unmoved, "merge_heads must transpose (B, H, L, Dh) back to (B, L, H, Dh) before flattening the "
                                  "heads; a plain reshape mixes positions and heads.")])


@pytest.mark.points(1)
@pytest.mark.aspect("shape")
def test_output_and_weight_shapes(subject):
    """the output is (B, L, E); the weights (B, L, S) averaged, or (B, H, L, S) per head"""
    # Checks: M4, M9.
    gen = torch.Generator().manual_seed(0)  # the same inputs on every run, so the same message
    q, kv = torch.randn(2, 3, 8, generator=gen), torch.randn(2, 5, 8, generator=gen)
    recipe = New("MultiHeadAttention", (8, 2))
    out, weights = subject.run(Call(subject.unit, recipe, (q, kv, kv))).output
    check_tensor(out, shape=(2, 3, 8), what="output")
    check_tensor(weights, shape=(2, 3, 5), what="averaged weights")
    _, per_head = subject.run(Call(subject.unit, recipe, (q, kv, kv), {"average_attn_weights": False})).output
    check_tensor(per_head, shape=(2, 2, 3, 5), what="per-head weights")


@pytest.mark.points(1)
def test_identity_projections_hand_example(subject):
    """with identity projections and one head, it is softmax(x x^T / sqrt(E)) x"""
    # Checks: M8.
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2, 2)
    w = torch.softmax(torch.tensor([[1.0, 0.0], [0.0, 1.0]]) / math.sqrt(2.0), dim=-1)
    recipe = New("MultiHeadAttention", (2, 1), state=identity_state(2))
    out, weights = subject.run(Call(subject.unit, recipe, (x,))).output
    assert_close(weights, w.unsqueeze(0), what="weights")
    assert_close(out, (w @ x[0]).unsqueeze(0), what="output")


@pytest.mark.points(1)
def test_padded_key_gets_no_weight(subject):
    """a key marked True in key_padding_mask gets zero weight"""
    # Checks: M6.
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, 3, 2)
    padding = torch.tensor([[False, False, True]])
    recipe = New("MultiHeadAttention", (2, 1), state=identity_state(2))
    _, weights = subject.run(Call(subject.unit, recipe, (x,), {"key_padding_mask": padding})).output
    check_tensor(weights, shape=(1, 3, 3), what="weights")
    assert_close(weights[..., 2], torch.zeros(1, 3), what="weights of the padded key")
    assert_close(weights.sum(-1), torch.ones(1, 3), what="weight row sums")


def torch_reference(E: int, H: int, kdim: int, vdim: int, *, bias: bool):
    """A seeded nn.MultiheadAttention and the same weights under this unit's names."""
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=True).eval()
    state = {"q_proj.weight": ref.q_proj_weight, "k_proj.weight": ref.k_proj_weight,
             "v_proj.weight": ref.v_proj_weight, "out_proj.weight": ref.out_proj.weight}
    if bias:
        for name, b in zip(("q_proj", "k_proj", "v_proj"), ref.in_proj_bias.chunk(3)):
            state[f"{name}.bias"] = b
        state["out_proj.bias"] = ref.out_proj.bias
    return ref, {name: t.detach().clone() for name, t in state.items()}


@pytest.mark.points(1)
def test_cross_attention_matches_torch(subject):
    """cross-attention with kdim=3, vdim=5, L=2 queries and S=4 keys equals nn.MultiheadAttention, with and without bias"""
    # Checks: M3, M4.
    gen = torch.Generator().manual_seed(1)
    q, key, value = torch.randn(2, 2, 4, generator=gen), torch.randn(2, 4, 3, generator=gen), torch.randn(2, 4, 5, generator=gen)
    for bias in (True, False):
        ref, state = torch_reference(4, 2, 3, 5, bias=bias)
        with torch.no_grad():
            want_out, want_weights = ref(q, key, value)
            _, want_per_head = ref(q, key, value, average_attn_weights=False)
        recipe = New("MultiHeadAttention", (4, 2), {"kdim": 3, "vdim": 5, "bias": bias}, state=state)
        out, weights = subject.run(Call(subject.unit, recipe, (q, key, value))).output
        assert_close(weights, want_weights, what=f"weights averaged over heads (bias={bias})")
        assert_close(out, want_out, what=f"output (bias={bias})")
        _, per_head = subject.run(Call(subject.unit, recipe, (q, key, value), {"average_attn_weights": False})).output
        assert_close(per_head, want_per_head, what=f"per-head weights (bias={bias})")


@pytest.mark.points(1)
def test_fully_padded_batch_element_gives_out_proj_bias(subject):
    """a batch element whose keys are all padding gets zero weights, and its output is out_proj.bias"""
    # Checks: M10.
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [2.0, 0.0]]])  # (B=2, L=2, E=2)
    padding = torch.tensor([[False, True], [True, True]])  # element 1: every key padded
    state = identity_state(2)
    state["out_proj.bias"] = torch.tensor([0.5, -0.5])
    recipe = New("MultiHeadAttention", (2, 1), state=state)
    out, weights = subject.run(Call(subject.unit, recipe, (x,), {"key_padding_mask": padding})).output
    check_tensor(weights, shape=(2, 2, 2), what="weights")
    assert_close(weights[0], torch.tensor([[1.0, 0.0], [1.0, 0.0]]), what="weights of batch element 0 (key 1 padded)")
    assert_close(weights[1], torch.zeros(2, 2), what="weights of batch element 1 (all keys padded)")
    assert_close(out[1], state["out_proj.bias"].expand(2, 2), what="output of batch element 1 (all keys padded)")


@pytest.mark.points(1)
def test_attn_mask_true_means_may_attend(subject):
    """a bool attn_mask (L, S) follows unit 2: True = may attend (torch's bool masks mean the opposite)"""
    # Checks: M7.
    x = torch.zeros(1, 2, 2)  # equal scores: the weights spread evenly over the allowed keys
    mask = torch.tensor([[True, False], [True, True]])
    recipe = New("MultiHeadAttention", (2, 1), state=identity_state(2))
    _, weights = subject.run(Call(subject.unit, recipe, (x,), {"attn_mask": mask})).output
    assert_close(weights, torch.tensor([[[1.0, 0.0], [0.5, 0.5]]]), what="weights")


@pytest.mark.points(1)
def test_is_causal_hides_later_keys(subject):
    """is_causal=True: query i attends only keys j <= i"""
    # Checks: M7.
    x = torch.zeros(1, 3, 2)
    recipe = New("MultiHeadAttention", (2, 1), state=identity_state(2))
    _, weights = subject.run(Call(subject.unit, recipe, (x,), {"is_causal": True})).output
    want = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    assert_close(weights, want.unsqueeze(0), what="weights")


@pytest.mark.points(1)
def test_need_weights_false_and_eval_dropout(subject):
    """need_weights=False returns None for the weights, and dropout is off in eval mode"""
    # Checks: M9, G1.
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    w = torch.softmax(torch.tensor([[1.0, 0.0], [0.0, 1.0]]) / math.sqrt(2.0), dim=-1)
    recipe = New("MultiHeadAttention", (2, 1), {"dropout": 0.5}, state=identity_state(2))
    out, weights = subject.run(Call(subject.unit, recipe, (x,), {"need_weights": False}, seed=0)).output
    assert weights is None, f"need_weights=False should give None, got {type(weights).__name__}"
    assert_close(out, (w @ x[0]).unsqueeze(0), what="output in eval mode (dropout off)")


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
def test_wrong_sizes_raise_value_error(subject):
    """embed_dim not divisible by num_heads, or a query of the wrong width, raises ValueError naming the sizes"""
    # Checks: G8.
    assert_raises(subject.run, Call(subject.unit, New("MultiHeadAttention", (6, 4)), (torch.zeros(1, 2, 6),)),
                  "ValueError", mentions=(6, 4))
    assert_raises(subject.run, Call(subject.unit, New("MultiHeadAttention", (4, 2)), (torch.zeros(1, 2, 3),)),
                  "ValueError", mentions=(3,))
