"""Public tests for unit 5: run them with `attn-course check transformer_block`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.testing.compare import assert_close, assert_raises, assert_roughly, check_tensor
from autograder.core.protocol import Call, New

pytestmark = pytest.mark.unit("transformer_block")
# The hidden grade's advice, word for word.
BIASED = "use the biased variance (divide by d, not d - 1), as nn.LayerNorm."
TANH_GELU = "use the exact GELU x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))), not the tanh approximation."


@pytest.mark.points(1)
def test_layer_norm_small_example(subject):
    """LayerNorm(4) of [1, 2, 3, 4] is (x - 2.5) / sqrt(1.25 + 1e-5)"""
    # Checks: T2.
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    expected = (x - 2.5) / math.sqrt(1.25 + 1e-5)  # mean 2.5, biased variance 1.25
    unbiased = (x - 2.5) / math.sqrt(5.0 / 3.0 + 1e-5)  # the sum of squares 5 divided by d - 1 = 3
    assert_close(subject.call(New("LayerNorm", (4,)), x), expected, what="LayerNorm(4)([1, 2, 3, 4])",
                 hints=[(unbiased, BIASED)])


@pytest.mark.points(1)
def test_feed_forward_identity_layers_give_gelu(subject):
    """FeedForward with identity linear layers is the exact GELU: gelu(1) = 0.8413447, gelu(-1) = -0.1586553"""
    # Checks: T3.
    state = {"linear1.weight": torch.eye(3), "linear1.bias": torch.zeros(3),
             "linear2.weight": torch.eye(3), "linear2.bias": torch.zeros(3)}
    x = torch.tensor([[[-1.0, 0.0, 1.0]]])
    expected = torch.tensor([[[-0.15865525, 0.0, 0.84134475]]])  # x * Phi(x)
    tanh = torch.nn.functional.gelu(x, approximate="tanh")  # -0.158808 and 0.841192
    assert_close(subject.call(New("FeedForward", (3, 3), state=state), x), expected, atol=1e-6,
                 what="FeedForward with identity layers", hints=[(tanh, TANH_GELU)])


@pytest.mark.points(1)
@pytest.mark.aspect("shape")
def test_block_output_shape(subject):
    """TransformerBlock(8, 2, 16) maps (2, 5, 8) to (2, 5, 8) in both norm modes"""
    # Checks: T7.
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    for norm_first in (False, True):
        out = subject.call(New("TransformerBlock", (8, 2, 16), {"norm_first": norm_first}), x)
        check_tensor(out, shape=(2, 5, 8), dtype=torch.float32, what=f"output with norm_first={norm_first}")


@pytest.mark.points(1)
def test_pre_norm_block_with_silent_sublayers_is_identity(subject):
    """a pre-norm block whose out_proj and linear2 are zero returns its input"""
    # Checks: T9.
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
    out = subject.call(New("TransformerBlock", (d, 2, d_ff), {"norm_first": True}, state=state), x)
    assert_close(out, x, what="pre-norm block with zero sublayer outputs (the residuals alone)")


def torch_layer(d: int, heads: int, d_ff: int, *, norm_first: bool, bias: bool = True):
    """A seeded nn.TransformerEncoderLayer, random norms included, and its weights under this unit's names."""
    torch.manual_seed(0)
    ref = torch.nn.TransformerEncoderLayer(d, heads, d_ff, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=norm_first, bias=bias).eval()
    with torch.no_grad():
        for norm in (ref.norm1, ref.norm2):  # not ones and zeros, so a swapped or shared norm shows
            norm.weight.uniform_(0.5, 1.5)
            if bias:
                norm.bias.uniform_(-0.5, 0.5)
    theirs = {k: v.detach().clone() for k, v in ref.state_dict().items()}
    state = {}
    for name, weight in zip(("q_proj", "k_proj", "v_proj"), theirs.pop("self_attn.in_proj_weight").chunk(3)):
        state[f"self_attn.{name}.weight"] = weight
    if bias:
        for name, b in zip(("q_proj", "k_proj", "v_proj"), theirs.pop("self_attn.in_proj_bias").chunk(3)):
            state[f"self_attn.{name}.bias"] = b
    for key, value in theirs.items():
        state[key.replace("linear1", "ffn.linear1").replace("linear2", "ffn.linear2")] = value
    return ref, state


def check_against_torch(subject, *, norm_first: bool, bias: bool = True, masks: bool = False):
    ref, state = torch_layer(8, 2, 16, norm_first=norm_first, bias=bias)
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(1))
    kwargs, theirs = {}, {}
    if masks:  # causal, and the last key of batch element 0 is padding
        padding = torch.tensor([[False, False, False, True], [False, False, False, False]])
        kwargs = {"is_causal": True, "key_padding_mask": padding}
        # torch's bool masks (True: masked), both of one type: a float src_mask beside a bool padding
        # mask makes torch warn, and the warning reaches the student's notebook.
        theirs = {"src_mask": torch.ones(4, 4, dtype=torch.bool).triu(1), "src_key_padding_mask": padding}
    with torch.no_grad():
        want = ref(x, **theirs)
    recipe = New("TransformerBlock", (8, 2, 16), {"norm_first": norm_first, "bias": bias}, state=state)
    assert_close(subject.call(recipe, x, **kwargs), want, atol=1e-5,
                 what=f"output with norm_first={norm_first}, bias={bias}" + (", is_causal and padding" if masks else ""))


@pytest.mark.points(1)
def test_post_norm_block_matches_torch(subject):
    """post-norm (norm_first=False): x = norm1(x + attn(x)), x = norm2(x + ffn(x)), as nn.TransformerEncoderLayer"""
    # Checks: T8, T10.
    check_against_torch(subject, norm_first=False)


@pytest.mark.points(1)
def test_pre_norm_block_matches_torch(subject):
    """pre-norm (norm_first=True): x = x + attn(norm1(x)), x = x + ffn(norm2(x)), as nn.TransformerEncoderLayer"""
    # Checks: T9, T10.
    check_against_torch(subject, norm_first=True)


@pytest.mark.points(1)
def test_block_passes_the_masks_to_attention(subject):
    """is_causal and key_padding_mask reach the attention, as in nn.TransformerEncoderLayer"""
    # Checks: T7.
    check_against_torch(subject, norm_first=True, masks=True)


@pytest.mark.points(1)
def test_bias_false_removes_every_bias(subject):
    """bias=False: no Linear and no LayerNorm has a bias, as nn.TransformerEncoderLayer(..., bias=False)"""
    # Checks: T1, T4, T5.
    norm = subject.run(Call(subject.unit, New("LayerNorm", (4,), {"bias": False}), (torch.zeros(1, 4),), return_state=True))
    assert sorted(norm.state) == ["weight"], f"LayerNorm(4, bias=False) should have only a weight, got {sorted(norm.state)}"
    ffn = subject.run(Call(subject.unit, New("FeedForward", (4, 8), {"bias": False}), (torch.zeros(1, 1, 4),), return_state=True))
    assert sorted(ffn.state) == ["linear1.weight", "linear2.weight"], f"FeedForward(4, 8, bias=False) has {sorted(ffn.state)}"
    check_against_torch(subject, norm_first=False, bias=False)


@pytest.mark.points(1)
def test_layer_norm_eps_and_rows(subject):
    """LayerNorm(2, eps=1) of [[1, 3], [0, 10]] normalizes each row: (x - mean) / sqrt(var + 1)"""
    # Checks: T1, T2.
    x = torch.tensor([[1.0, 3.0], [0.0, 10.0]])  # row means 2 and 5, biased variances 1 and 25
    centered = torch.tensor([[-1.0, 1.0], [-5.0, 5.0]])
    expected = centered / torch.tensor([[math.sqrt(2.0)], [math.sqrt(26.0)]])
    unbiased = centered / torch.tensor([[math.sqrt(3.0)], [math.sqrt(51.0)]])  # variances 2 and 50 (d - 1 = 1)
    assert_close(subject.call(New("LayerNorm", (2,), {"eps": 1.0}), x), expected, what="LayerNorm(2, eps=1)(x)",
                 hints=[(unbiased, BIASED)])


@pytest.mark.points(1)
@pytest.mark.aspect("shape")
def test_layer_norm_without_affine_has_no_parameters(subject):
    """LayerNorm(4, elementwise_affine=False) has no parameters"""
    # Checks: T1, G1.
    result = subject.run(Call(subject.unit, New("LayerNorm", (4,), {"elementwise_affine": False}), (torch.ones(1, 4),),
                              return_state=True))
    assert not result.state, f"state_dict should be empty, got {sorted(result.state)}"


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
def test_layer_norm_wrong_size_raises_value_error(subject):
    """LayerNorm(4) of x whose last dim is 3 raises ValueError naming both sizes"""
    # Checks: G8.
    assert_raises(subject.run, Call(subject.unit, New("LayerNorm", (4,)), (torch.zeros(2, 3),)), "ValueError", mentions=(4, 3))


@pytest.mark.points(1)
@pytest.mark.aspect("mode")
def test_feed_forward_dropout_is_off_in_eval_mode(subject):
    """FeedForward(3, 3, dropout=0.5) in eval mode drops nothing: it gives the output of FeedForward(3, 3) with the same layers"""
    # Checks: T3, G1.
    state = {"linear1.weight": torch.eye(3), "linear1.bias": torch.zeros(3),
             "linear2.weight": torch.eye(3), "linear2.bias": torch.zeros(3)}
    x = torch.tensor([[[-1.0, 0.0, 1.0]]])
    plain = subject.call(New("FeedForward", (3, 3), state=state), x)
    check_tensor(plain, shape=x.shape, what="FeedForward with dropout=0")
    got = subject.run(Call(subject.unit, New("FeedForward", (3, 3), {"dropout": 0.5}, state=state), (x,), seed=0)).output
    assert_close(got, plain, what="FeedForward with dropout=0.5 in eval mode, compared with dropout=0")
    assert_roughly(plain, torch.nn.functional.gelu(x), what="FeedForward with dropout=0")
