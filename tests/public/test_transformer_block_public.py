"""Public tests for unit 5: run them with `attn-course check transformer_block`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.compare import assert_close, check_tensor
from autograder.subject import Call, New

pytestmark = pytest.mark.unit("transformer_block")
UNIT = "transformer_block"


def run(subject, recipe, *args, **kwargs):
    return subject.run(Call(UNIT, recipe, args, kwargs)).output


@pytest.mark.points(1)
def test_layer_norm_small_example(subject):
    """LayerNorm(4) of [1, 2, 3, 4] is (x - 2.5) / sqrt(1.25 + 1e-5)"""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    expected = (x - 2.5) / math.sqrt(1.25 + 1e-5)  # mean 2.5, biased variance 1.25
    assert_close(run(subject, New("LayerNorm", (4,)), x), expected, what="LayerNorm(4)([1, 2, 3, 4])")


@pytest.mark.points(1)
def test_feed_forward_identity_layers_give_gelu(subject):
    """FeedForward with identity linear layers is the exact GELU: gelu(1) = 0.8413447, gelu(-1) = -0.1586553"""
    state = {"linear1.weight": torch.eye(3), "linear1.bias": torch.zeros(3),
             "linear2.weight": torch.eye(3), "linear2.bias": torch.zeros(3)}
    x = torch.tensor([[[-1.0, 0.0, 1.0]]])
    expected = torch.tensor([[[-0.15865525, 0.0, 0.84134475]]])  # x * Phi(x)
    assert_close(run(subject, New("FeedForward", (3, 3), state=state), x), expected, atol=1e-6,
                 what="FeedForward with identity layers")


@pytest.mark.points(1)
def test_block_output_shape(subject):
    """TransformerBlock(8, 2, 16) maps (2, 5, 8) to (2, 5, 8) in both norm modes"""
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    for norm_first in (False, True):
        out = run(subject, New("TransformerBlock", (8, 2, 16), {"norm_first": norm_first}), x)
        check_tensor(out, shape=(2, 5, 8), dtype=torch.float32, what=f"output with norm_first={norm_first}")


@pytest.mark.points(1)
def test_pre_norm_block_with_silent_sublayers_is_identity(subject):
    """a pre-norm block whose out_proj and linear2 are zero returns its input"""
    d, d_ff = 4, 8
    gen = torch.Generator().manual_seed(0)
    state = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        state[f"self_attn.{name}.weight"] = torch.randn(d, d, generator=gen)
        state[f"self_attn.{name}.bias"] = torch.randn(d, generator=gen)
    state.update({"ffn.linear1.weight": torch.randn(d_ff, d, generator=gen), "ffn.linear1.bias": torch.randn(d_ff, generator=gen),
                  "ffn.linear2.weight": torch.zeros(d, d_ff), "ffn.linear2.bias": torch.zeros(d),
                  "norm1.weight": torch.ones(d), "norm1.bias": torch.zeros(d),
                  "norm2.weight": torch.ones(d), "norm2.bias": torch.zeros(d)})
    state["self_attn.out_proj.weight"] = torch.zeros(d, d)
    state["self_attn.out_proj.bias"] = torch.zeros(d)
    x = torch.randn(1, 3, d, generator=gen)
    out = run(subject, New("TransformerBlock", (d, 2, d_ff), {"norm_first": True}, state=state), x)
    assert_close(out, x, what="pre-norm block with zero sublayer outputs (the residuals alone)")
