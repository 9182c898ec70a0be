"""Hidden properties of unit 5, the Transformer block (LayerNorm, FeedForward, TransformerBlock).

Each test's docstring is the property students read; its points are marked.
Tests reach the student's code only through ``subject``. The right answers come
from torch itself (``F.layer_norm``, ``nn.TransformerEncoderLayer`` in float64);
the hand-written oracles only build known-wrong answers for hints.

Decisions where the API page is silent (following ``nn.TransformerEncoderLayer``):
  * ``bias=False`` removes the biases of every Linear (self_attn and ffn) and of
    both LayerNorms, as the API page says (``nn.TransformerEncoderLayer(bias=False)``);
  * masks are tested only on rows that keep at least one key (torch gives NaN
    on the others), and the attention dropout inside ``self_attn`` is not tested;
  * ``FeedForward`` and ``TransformerBlock`` are called on (B, L, d_model) only;
  * ``LayerNorm(elementwise_affine=False)`` has no parameters (as ``nn.LayerNorm``);
  * LayerNorm values are compared tightly on well-conditioned rows and loosely
    (1e-3 + 1e-2 relative) on near-constant ones, so that any correct float32
    formula passes (two-pass, ``torch.var``, even E[x^2] - E[x]^2), while the
    eps placement, which changes such rows by a factor of 3, is still pinned.
"""

import dataclasses
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from autograder.core.cases import attach
from autograder.testing.compare import assert_raises, assert_roughly, assert_unmodified, check_tensor, with_hint
from autograder.core.protocol import Call, New, StudentError
from anchors import DOWNCAST, assert_close, check_gradients_of, known_answer, tolerance
from oracles_transformer_block import (
    LINEAR_BIASES, NORM_BIASES, block64, block_hints, block_input_grads, block_state, ffn64, ffn_state, layer_norm64,
    norm_state, one_thread, torch_block, torch_layer_norm,
)
from tensors import permutation, rand_bool, randn, seeds

pytestmark = pytest.mark.unit("transformer_block")
BLOCK_TOL = dict(atol=1e-4, rtol=1e-4)
# The checks a constant or shape-only answer may pass, and so the only points it may earn
# (tests/project/test_nothing_for_nothing.py): shapes, structure and argument errors;
# the public pre-norm check's answer is the input itself.
SHAPE_CHECKS = (
    "test_transformer_block_public.py::test_block_output_shape",
    "test_transformer_block_public.py::test_layer_norm_without_affine_has_no_parameters",
    "test_transformer_block_public.py::test_layer_norm_wrong_size_raises_value_error",
    "test_transformer_block_public.py::test_pre_norm_block_with_silent_sublayers_is_identity",
    "test_transformer_block_properties.py::test_bad_sizes_raise_value_error",
)


@pytest.fixture(autouse=True)
def _single_threaded():
    """The float64 oracles run on tiny tensors: torch's CPU thread pool only costs
    time there (~20 ms per parallel op on a busy machine); values do not depend on it."""
    with one_thread():
        yield


# -- shapes and calls -------------------------------------------------------------

class BlockShapes(NamedTuple):
    """A counterexample's sizes, labelled (its repr is what a student reads)."""

    B: int
    L: int
    d_model: int
    num_heads: int
    d_ff: int


@st.composite
def block_shapes(draw, *, min_len=1, max_len=6, max_batch=3):
    """(B, L, d_model, num_heads, d_ff) with d_model a multiple of num_heads."""
    heads = draw(st.sampled_from([1, 2, 4]))
    # d_model >= 4: a LayerNorm over 2 features maps every row to +-1, where many bugs look alike.
    d_model = max(4, heads * draw(st.integers(1, 4)))
    return BlockShapes(draw(st.integers(1, max_batch)), draw(st.integers(min_len, max_len)), d_model, heads,
                       draw(st.integers(1, 24)))


def block_recipe(shapes, state, **kwargs):
    _, _, d, heads, d_ff = shapes
    return New("TransformerBlock", (d, heads, d_ff), kwargs, state=state)


def run_block(subject, shapes, state, x, *, norm_first, init=None, **kwargs):
    init = {"norm_first": norm_first, **(init or {})}
    return subject.run(Call(subject.unit, block_recipe(shapes, state, **init), (x,), kwargs)).output


def layer_norm_recipe(d, state=None, **kwargs):
    return New("LayerNorm", (d,), kwargs, state=state)


def run_layer_norm(subject, x, state=None, **kwargs):
    return subject.run(Call(subject.unit, layer_norm_recipe(x.shape[-1], state, **kwargs), (x,))).output


def layer_norm_hints(x, state, eps):
    w, b = (state or {}).get("weight"), (state or {}).get("bias")
    hints = [
        (layer_norm64(x, w, b, eps, unbiased=True), "use the biased variance (divide by d, not d - 1), as nn.LayerNorm."),
        (layer_norm64(x, w, b, eps, eps_outside=True), "eps goes inside the square root: (x - mean) / sqrt(var + eps)."),
        # x.std() (unbiased) + eps, as The Annotated Transformer writes it
        (layer_norm64(x, w, b, eps, unbiased=True, eps_outside=True),
         "x.std() + eps is not LayerNorm's denominator: use the biased variance (divide by d, not d - 1) and add eps "
         "inside the square root, sqrt(var + eps)."),
        (layer_norm64(x, w, b, 1e-5), f"the `eps` argument ({eps:g}) was ignored."),
        (layer_norm64(x, None, None, eps), "multiply by `weight` and add `bias` after normalizing."),
        # (eps 0 and a tiny default such as 1e-12 give one answer: the advice fits both)
        (layer_norm64(x, w, b, 0.0), "eps is missing or far too small: add `eps` (default 1e-5, as nn.LayerNorm) "
                                     "to the variance before taking the square root."),
    ]
    # A NaN answer matches every other NaN answer: such a hint would be a guess.
    return [(wrong, text) for wrong, text in hints if bool(wrong.isfinite().all())]


def spread_out(x, min_std):
    """``x`` (float64) as float32, each row's deviations stretched so its std is >= ``min_std``.

    Rows with a tiny spread are ill-conditioned: correct float32 formulas (two-pass,
    or E[x^2] - E[x]^2) differ there by more than a tight tolerance. They have a
    test of their own with a loose one (test_layer_norm_near_constant_rows)."""
    mean = x.mean(-1, keepdim=True)
    dev = x - mean
    std = dev.pow(2).mean(-1, keepdim=True).sqrt()
    factor = torch.where(std < min_std, min_std / std.clamp_min(1e-30), torch.ones_like(std))
    return (mean + dev * factor).float()


def ln_state(d, seed):
    return {k.removeprefix("n."): v for k, v in norm_state("n", d, seed).items()}


def identity_ffn_state(d):
    eye = torch.eye(d)
    return {"linear1.weight": eye, "linear1.bias": torch.zeros(d), "linear2.weight": eye, "linear2.bias": torch.zeros(d)}


def zeroed(state, *prefixes):
    """``state`` with the weight and bias of each named Linear set to zero."""
    out = dict(state)
    for prefix in prefixes:
        for key in (f"{prefix}.weight", f"{prefix}.bias"):
            if key in out:
                out[key] = torch.zeros_like(out[key])
    return out


# Advice written once and given in several places, or for answers that are no tensor (proven by
# ``known_answer``): module constants, so that a pair naming one is read as written.
NO_AFFINE = ("with elementwise_affine=False register weight and bias as None "
             "(self.register_parameter(\"weight\", None)), as nn.LayerNorm does.")
BIAS_IGNORED = ("bias=False was ignored: pass it on to self_attn, ffn, norm1 and norm2, as "
                "nn.TransformerEncoderLayer(..., bias=False) does.")
# (the norms built without bias=bias, or a LayerNorm that ignores it: one answer, so one advice for both)
NORMS_KEEP_BIAS = ("norm1 and norm2 kept their biases: build them as LayerNorm(d_model, bias=bias), and "
                   "LayerNorm(bias=False) registers bias as None.")
LN_BIAS_KEPT = "LayerNorm(d, bias=False) has a weight and no bias: it registers bias as None, as nn.LayerNorm(d, bias=False)."
LN_SIZE_CHECK = ("LayerNorm checks that x's last dim is normalized_shape and raises ValueError naming both sizes, "
                 "before any broadcast can fail.")
EVAL_DROPOUT = "dropout is off in eval mode: use nn.Dropout, or pass training=self.training to F.dropout."
SUM_DROPPED = ("apply dropout1 and dropout2 each to its sublayer's output, before the residual addition, "
               "not to the sum.")
CPU_TENSOR = ("a tensor the code creates (a mask, zeros, a table) sits on the CPU: create it on the input's "
              "device, torch.ones(..., device=x.device).")
IN_PLACE = ("an in-place operation on an argument (x += ..., x.add_(...)) writes into the caller's tensor: "
            "write x = x + ... instead.")


def nearest(out, candidates):
    """The answer of a bug whose every entry is one of ``candidates`` (tensors shaped like ``out``, one
    per way its random draws fall): each entry of ``out`` taken to its nearest candidate. It matches
    ``out`` only when every entry is one of them."""
    stack = torch.stack(candidates)  # (n, *out.shape)
    pick = (stack - out.double()).abs().argmin(0, keepdim=True)  # (1, *out.shape)
    return stack.gather(0, pick)[0]

def fail_with(message: str, advice: str | None, call=None):
    """An AssertionError saying ``message`` and, when some advice is proven, the hint."""
    return attach(AssertionError(with_hint(message, advice)), call=call)


def raised_kind(subject, call) -> str | None:
    """The kind of error ``call`` raises (None when it returns)."""
    try:
        subject.run(call)
    except StudentError as error:
        return error.kind
    return None


# -- LayerNorm ----------------------------------------------------------------------

@pytest.mark.points(2)
@given(batch=st.lists(st.integers(1, 4), max_size=3), d=st.sampled_from([1, 2, 3, 8, 17]), seed=seeds,
       eps=st.sampled_from([1e-5, 1e-3, 0.1]), scale=st.sampled_from([0.05, 1.0, 10.0]))
def test_layer_norm_matches_torch(subject, batch, d, seed, eps, scale):
    """LayerNorm equals torch's layer_norm (any leading dims, small d, any eps, learned weight and bias)"""
    # Checks: T1, T2.
    x = spread_out(randn((*batch, d), seed, scale=scale, dtype=torch.float64), 0.1 * scale)
    state = ln_state(d, seed + 1)
    got = run_layer_norm(subject, x, state, eps=eps)
    assert_close(got, torch_layer_norm(x, state["weight"], state["bias"], eps), what=f"LayerNorm({d}, eps={eps:g})(x)",
                 atol=1e-5, rtol=2e-4, dtype=torch.float32, hints=layer_norm_hints(x, state, eps))


@pytest.mark.points(2)
@given(rows=st.integers(1, 6), d=st.integers(2, 16), seed=seeds, spread=st.sampled_from([0.0, 1e-4, 1e-3, 3e-3]))
def test_layer_norm_near_constant_rows(subject, rows, d, seed, spread):
    """LayerNorm equals torch on near-constant rows, where the placement of eps matters (and constant rows stay finite)"""
    # Checks: T2.
    offset = randn((rows, 1), seed, scale=0.2).clamp(-0.5, 0.5)
    x = offset + randn((rows, d), seed + 1, scale=spread)
    state = ln_state(d, seed + 2)
    expected = torch_layer_norm(x, state["weight"], state["bias"])
    got = run_layer_norm(subject, x, state)
    assert_close(got, expected, atol=1e-3, rtol=1e-2, what=f"LayerNorm({d}) of rows with spread {spread:g}",
                 hints=layer_norm_hints(x, state, 1e-5))


@pytest.mark.points(1)
@given(batch=st.lists(st.integers(1, 4), min_size=1, max_size=3), d=st.integers(2, 16), seed=seeds,
       scale=st.floats(0.5, 20.0), shift=st.floats(-3.0, 3.0))
def test_layer_norm_default_standardizes(subject, batch, d, seed, scale, shift):
    """with its default parameters, LayerNorm gives each position mean 0 and (biased) variance 1"""
    # Checks: T1, T2.
    x = spread_out(randn((*batch, d), seed, scale=scale, dtype=torch.float64) + shift, 0.1 * scale)
    out = check_tensor(run_layer_norm(subject, x), shape=x.shape, dtype=torch.float32, what=f"LayerNorm({d})(x)")
    out = out.double()
    assert_close(out.mean(-1), torch.zeros(batch, dtype=torch.float64), atol=1e-4, what="mean of each position")
    x64 = x.double()
    var_x = x64.var(-1, unbiased=False)
    expected_var = var_x / (var_x + 1e-5)  # exactly what eps leaves of 1
    unbiased = layer_norm64(x, eps=1e-5, unbiased=True).var(-1, unbiased=False)
    assert_close(out.var(-1, unbiased=False), expected_var, atol=1e-3, rtol=1e-3, what="variance of each position",
                 hints=[(unbiased, "use the biased variance (divide by d, not d - 1), as nn.LayerNorm."),
                        (var_x / (var_x + 1e-5) ** 2, "divide by the standard deviation, not the variance.")])


@pytest.mark.points(1)
@given(batch=st.lists(st.integers(1, 4), min_size=1, max_size=2), d=st.integers(2, 16), seed=seeds)
def test_layer_norm_affine_invariance(subject, batch, d, seed):
    """LayerNorm(a * x + b) equals LayerNorm(x) for every a > 0 and b (per position, tiny eps)"""
    # Checks: T2.
    x = spread_out(randn((*batch, d), seed, dtype=torch.float64), 0.5)
    gen = torch.Generator().manual_seed(seed + 1)
    # Moderate a and b: in float32, a large shift of a narrow row loses digits in any formula.
    a = 0.5 + 2.5 * torch.rand((*batch, 1), generator=gen)
    b = 4.0 * torch.rand((*batch, 1), generator=gen) - 2.0
    state = ln_state(d, seed + 2)
    plain = run_layer_norm(subject, x, state, eps=1e-8)
    moved = run_layer_norm(subject, a * x + b, state, eps=1e-8)
    check_tensor(plain, shape=x.shape, what="LayerNorm(x)")
    assert_close(moved, plain, atol=1e-4, rtol=1e-3, what="LayerNorm(a * x + b) compared with LayerNorm(x)")
    # A constant answer is invariant too.
    assert_roughly(plain, torch_layer_norm(x, state["weight"], state["bias"], 1e-8), what="LayerNorm(x)")


@pytest.mark.points(2)
@given(B=st.integers(1, 3), L=st.integers(2, 5), d=st.integers(2, 12), seed=seeds, data=st.data())
def test_layer_norm_positions_are_independent(subject, B, L, d, seed, data):
    """LayerNorm normalizes the last dim only: each position is normalized on its own"""
    # Checks: T2.
    x = spread_out(randn((B, L, d), seed, scale=2.0, dtype=torch.float64), 0.2)
    state = ln_state(d, seed + 1)
    b, i = data.draw(st.integers(0, B - 1), label="b"), data.draw(st.integers(0, L - 1), label="i")
    whole = run_layer_norm(subject, x, state)
    alone = run_layer_norm(subject, x[b:b + 1, i:i + 1], state)
    check_tensor(alone, shape=(1, 1, d), what="LayerNorm of a single position")
    known = [(layer_norm64(x, state["weight"], state["bias"], dims=dims), text) for dims, text in [
        ((-2,), "normalize over the last dim (the features), not over the positions."),
        ((-2, -1), "normalize over the last dim only, not over positions and features together."),
    ]]
    hints = [(wrong[b:b + 1, i:i + 1], text) for wrong, text in known]
    check_tensor(whole, shape=x.shape, what="LayerNorm(x)")
    assert_close(whole[b:b + 1, i:i + 1], alone, what=f"position ({b}, {i}) normalized within x vs on its own",
                 hints=hints)
    changed = x.clone()
    changed[b, i] = randn((d,), seed + 2, scale=5.0)
    others = torch.ones(B, L, dtype=torch.bool)
    others[b, i] = False
    after = run_layer_norm(subject, changed, state)
    assert_close(after[others], whole[others], what=f"other positions after changing position ({b}, {i})")
    # A constant answer is position-wise too.
    assert_roughly(whole, torch_layer_norm(x, state["weight"], state["bias"]), what="LayerNorm(x)")


@pytest.mark.points(1)
@given(batch=st.lists(st.integers(1, 4), min_size=1, max_size=2), d=st.integers(1, 12), seed=seeds)
def test_layer_norm_without_affine(subject, batch, d, seed):
    """LayerNorm(elementwise_affine=False) has no parameters and only normalizes"""
    # Checks: T1, G1.
    x = randn((*batch, d), seed)
    recipe = layer_norm_recipe(d, elementwise_affine=False)
    result = subject.run(Call(subject.unit, recipe, (x,), grad_outputs=randn((*batch, d), seed + 1)))
    assert_close(result.output, torch_layer_norm(x), what=f"LayerNorm({d}, elementwise_affine=False)(x)")
    if result.param_grads:
        found = sorted(result.param_grads)
        raise fail_with(f"with elementwise_affine=False there must be no parameters (as nn.LayerNorm), found {found}",
                        known_answer(found, [(names, NO_AFFINE) for names in (["bias", "weight"], ["weight"], ["bias"])]))


@pytest.mark.points(1)
@settings(max_examples=10)
@given(batch=st.lists(st.integers(1, 3), min_size=1, max_size=2), d=st.integers(2, 6), seed=seeds)
def test_layer_norm_gradients(subject, batch, d, seed):
    """LayerNorm in float64 is right to float64 precision, its input gradient agrees with finite differences (float64 gradcheck), and its weight and bias gradients equal torch's"""
    # Checks: T1, T2, G7.
    x = randn((*batch, d), seed, dtype=torch.float64)
    state = ln_state(d, seed + 1)

    def build(tensors, grad_outputs):
        return Call(subject.unit, layer_norm_recipe(d, state), tuple(tensors), dtype=torch.float64, grad_outputs=grad_outputs)

    expected = torch_layer_norm(x, state["weight"], state["bias"])
    check_gradients_of(subject, build, [x], seed=seed, expect=lambda base: assert_close(
        base, expected, what=f"LayerNorm({d})(x) in float64", hints=lambda: layer_norm_hints(x, state, 1e-5),
        **tolerance(torch.float64)))
    upstream = randn(x.shape, seed + 2, dtype=torch.float64)
    result = subject.run(build([x], upstream))
    w = state["weight"].double().requires_grad_()
    b = state["bias"].double().requires_grad_()
    gw, gb = torch.autograd.grad(F.layer_norm(x, (d,), w, b), [w, b], upstream)
    for name, expected in (("weight", gw), ("bias", gb)):
        if name not in result.param_grads:
            raise AssertionError(f"LayerNorm has no parameter named {name!r}")
        assert_close(result.param_grads[name], expected, what=f"gradient of LayerNorm.{name}", **tolerance(torch.float64))


# -- FeedForward --------------------------------------------------------------------

@pytest.mark.points(2)
@given(B=st.integers(1, 3), L=st.integers(1, 6), d=st.integers(1, 8), d_ff=st.integers(1, 24), seed=seeds)
def test_feed_forward_uses_exact_gelu(subject, B, L, d, d_ff, seed):
    """FeedForward is linear2(gelu(linear1(x))) with the exact (erf) GELU, for identity and random linears: the tanh approximation and ReLU fail"""
    # Checks: T3.
    # Identity layers make the output the activation itself, on a grid where the approximations differ.
    grid = torch.linspace(-6.0, 6.0, 64 * d).reshape(1, 64, d)
    got = subject.run(Call(subject.unit, New("FeedForward", (d, d), state=identity_ffn_state(d)), (grid,))).output
    act_hints = [(ffn64(grid, identity_ffn_state(d), act=act), text) for act, text in [
        ("tanh", "use the exact GELU x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))), not the tanh approximation."),
        ("relu", "the activation is GELU, not ReLU."),
        ("sigmoid", "use the exact GELU (with erf), not x * sigmoid(1.702 x)."),
    ]]
    assert_close(got, F.gelu(grid.double()), atol=1e-5, rtol=1e-5, what="FeedForward with identity linear layers",
                 dtype=torch.float32, hints=act_hints)
    x = randn((B, L, d), seed)
    state = ffn_state(d, d_ff, seed + 1)
    got = subject.run(Call(subject.unit, New("FeedForward", (d, d_ff), state=state), (x,))).output
    assert_close(got, ffn64(x, state), what=f"FeedForward({d}, {d_ff})(x)", dtype=torch.float32,
                 hints=[(ffn64(x, state, act="relu"), "the activation is GELU, not ReLU.")])


def dropout_ffn_state(d, seed):
    """Non-identity linears that keep the hidden units readable: linear1 a positive scaling of
    permuted features (every GELU input stays > 0.5 for x in [0.5, 1.5]), linear2 orthogonal
    (so the hidden units can be read back exactly from the output)."""
    gen = torch.Generator().manual_seed(seed)
    scales = 1.0 + torch.rand(d, generator=gen)  # (d,)
    w1 = torch.diag(scales)[torch.randperm(d, generator=gen)]  # (d, d)
    w2, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))  # (d, d), orthogonal
    return {"linear1.weight": w1, "linear1.bias": torch.zeros(d), "linear2.weight": w2.float(),
            "linear2.bias": torch.randn(d, generator=gen)}


@pytest.mark.points(1)
@pytest.mark.aspect("mode")
@settings(max_examples=5)
@given(p=st.sampled_from([0.25, 0.5]), seed=seeds)
def test_feed_forward_dropout(subject, p, seed):
    """FeedForward's dropout, against the same layers at dropout 0: between the GELU and linear2, in training mode it zeroes hidden units with probability p and scales the rest by 1/(1-p), reproducibly for a torch seed; in eval mode it does nothing"""
    # Checks: T3, G1.
    d = 32
    x = 0.5 + torch.rand((2, 16, d), generator=torch.Generator().manual_seed(seed))
    state = dropout_ffn_state(d, seed + 1)
    w2, b2 = state["linear2.weight"].double(), state["linear2.bias"].double()
    # The plain path, the same layers with dropout 0; linear2 is orthogonal, so the hidden units that
    # reached it are read back from an output.
    plain = subject.run(Call(subject.unit, New("FeedForward", (d, d), state=state), (x,))).output
    plain = check_tensor(plain, shape=x.shape, what="FeedForward output with dropout=0").double()

    def reached_linear2(out):
        return (out.double() - b2) @ w2  # (2, 16, d)

    hidden = reached_linear2(plain)  # every unit > 0.3 for the exact GELU
    recipe = New("FeedForward", (d, d), {"dropout": p}, state=state)
    call = Call(subject.unit, recipe, (x,), train=True, seed=seed)
    got = check_tensor(subject.run(call).output, shape=x.shape, what="FeedForward output in training mode")
    assert torch.equal(got, subject.run(call).output), (
        "two training-mode runs with the same torch seed differ: use nn.Dropout / torch's RNG")
    dropped = reached_linear2(got) <= 1e-4  # (2, 16, d)
    expected = hidden.masked_fill(dropped, 0.0) / (1 - p) @ w2.T + b2
    before_gelu = F.gelu((x.double() @ state["linear1.weight"].double().T).masked_fill(dropped, 0.0) / (1 - p))
    assert_close(got, expected, what=f"FeedForward output in training mode with dropout={p}", hints=[
        (plain.masked_fill(got == 0, 0.0) / (1 - p), "FeedForward's dropout goes between the GELU and linear2 "
                                                     "(linear2(dropout(gelu(linear1(x))))), not after linear2."),
        (before_gelu @ w2.T + b2, "FeedForward's dropout goes after the GELU (linear2(dropout(gelu(linear1(x))))), "
                                  "not before it."),
        (plain, "FeedForward's dropout was not applied in training mode."),
        # (with no unit dropped, the unscaled survivors are the undropped answer: no proof of either bug)
        *([(hidden.masked_fill(dropped, 0.0) @ w2.T + b2, "scale the surviving hidden units by 1 / (1 - p).")]
          if bool(dropped.any()) else []),
    ])
    zero_rate = float(dropped.double().mean())
    assert abs(zero_rate - p) < 0.08, (
        f"with dropout={p} in training mode, {zero_rate:.1%} of the hidden units were zeroed; expected about {p:.0%}")
    evaluated = subject.run(Call(subject.unit, recipe, (x,), train=False, seed=seed)).output
    check_tensor(evaluated, shape=x.shape, what="FeedForward output in eval mode")
    off = reached_linear2(evaluated) <= 1e-4  # units an eval-mode dropout zeroed
    assert_close(evaluated, plain, what="FeedForward output in eval mode, compared with dropout=0",
                 hints=[(hidden.masked_fill(off, 0.0) / (1 - p) @ w2.T + b2, EVAL_DROPOUT)] if bool(off.any()) else [])
    clean = F.gelu(x.double() @ state["linear1.weight"].double().T) @ w2.T + b2  # (2, 16, d)
    assert_roughly(plain, clean, what="FeedForward output with dropout=0")


# -- TransformerBlock against torch ------------------------------------------------

@pytest.mark.points(3)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans(), explicit=st.booleans())
def test_block_matches_torch(subject, shapes, seed, norm_first, explicit):
    """with dropout 0, TransformerBlock equals nn.TransformerEncoderLayer (gelu, batch_first) in both norm modes"""
    # Checks: T6, T8, T9, T10, G5.
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1)
    init = {"norm_first": norm_first} if norm_first or explicit else {}  # norm_first defaults to False
    got = subject.run(Call(subject.unit, block_recipe(shapes, state, **init), (x,))).output
    expected = torch_block(x, state, heads, norm_first=norm_first)
    assert_close(got, expected, hints=lambda: block_hints(x, state, heads, norm_first=norm_first),
                      what=f"TransformerBlock(norm_first={norm_first})(x)", dtype=torch.float32, **BLOCK_TOL)


@st.composite
def block_masks(draw, B, L, heads, seed):
    """attn_mask / key_padding_mask / is_causal, every query keeping key 0 (torch gives NaN on empty rows)."""
    masks = {}
    kind = draw(st.sampled_from(["none", "bool", "bool4d", "float"]), label="attn_mask kind")
    if kind == "bool":
        masks["attn_mask"] = rand_bool((L, L), seed, p_true=0.6)
    elif kind == "bool4d":
        masks["attn_mask"] = rand_bool((B, heads, L, L), seed, p_true=0.6)
    elif kind == "float":
        mask = randn((L, L), seed, scale=2.0)
        masks["attn_mask"] = mask.masked_fill(~rand_bool((L, L), seed + 1, p_true=0.6), float("-inf"))
    if "attn_mask" in masks:
        mask = masks["attn_mask"]
        mask[..., 0] = True if mask.dtype == torch.bool else 0.0
    if draw(st.booleans(), label="key_padding_mask"):
        padding = ~rand_bool((B, L), seed + 2, p_true=0.6)
        padding[:, 0] = False
        masks["key_padding_mask"] = padding
    if draw(st.booleans(), label="is_causal"):
        masks["is_causal"] = True
    return masks


@pytest.mark.points(3)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans(), data=st.data())
def test_block_masks_match_torch(subject, shapes, seed, norm_first, data):
    """with attn_mask (bool or float, (L, L) or (B, H, L, L)), key_padding_mask and is_causal, the block equals torch's layer"""
    # Checks: T7, T10.
    B, L, d, heads, d_ff = shapes
    masks = data.draw(block_masks(B, L, heads, seed + 5), label="masks")
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1)
    got = run_block(subject, shapes, state, x, norm_first=norm_first, **masks)
    expected = torch_block(x, state, heads, norm_first=norm_first, **masks)

    def hints():
        known = block_hints(x, state, heads, norm_first=norm_first, **masks)
        if masks.get("attn_mask") is not None and masks["attn_mask"].dtype == torch.bool:
            flipped = {**masks, "attn_mask": ~masks["attn_mask"]}  # rows left with no key get zero attention
            known.append((block64(x, state, heads, norm_first=norm_first, **flipped),
                          "a bool attn_mask means True = may attend (the course convention); do not invert it."))
        if masks.get("key_padding_mask") is not None:
            flipped = {**masks, "key_padding_mask": ~masks["key_padding_mask"]}
            known.append((block64(x, state, heads, norm_first=norm_first, **flipped),
                          "key_padding_mask is True at padding (the keys to ignore), as in nn.TransformerEncoderLayer: "
                          "pass it on as it is."))
        return known

    assert_close(got, expected, hints=hints, what=f"TransformerBlock(norm_first={norm_first}) with "
                      f"{sorted(masks) or 'no masks'}", dtype=torch.float32, **BLOCK_TOL)


@pytest.mark.points(2)
@settings(max_examples=10)
@given(shapes=block_shapes(max_len=5), seed=seeds, norm_first=st.booleans(), is_causal=st.booleans())
def test_block_gradients_match_torch(subject, shapes, seed, norm_first, is_causal):
    """the gradients of the input and of every parameter equal those of torch's layer"""
    # Checks: T10.
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1)
    upstream = randn((B, L, d), seed + 2)
    result = subject.run(Call(subject.unit, block_recipe(shapes, state, norm_first=norm_first), (x,), {"is_causal": is_causal},
                              grad_outputs=upstream))
    _, grad_x, grads = torch_block(x, state, heads, norm_first=norm_first, is_causal=is_causal, grad_output=upstream)
    assert_close(result.arg_grads[0], grad_x, atol=1e-4, rtol=1e-3, what="gradient of x",
                 hints=lambda: block_input_grads(x, state, heads, upstream, norm_first=norm_first, is_causal=is_causal))
    for name, expected in grads.items():
        if name not in result.param_grads:
            raise AssertionError(f"TransformerBlock has no parameter named {name!r}")
        assert_close(result.param_grads[name], expected, atol=1e-4, rtol=1e-3, what=f"gradient of {name}")


@pytest.mark.points(2)
@settings(max_examples=6)
@given(shapes=block_shapes(max_len=4, max_batch=2), seed=seeds, norm_first=st.booleans(), is_causal=st.booleans())
def test_block_gradcheck(subject, shapes, seed, norm_first, is_causal):
    """a small float64 block is right to float64 precision and its input gradient agrees with finite differences (float64 gradcheck), in both norm modes"""
    # Checks: T8, T9, G7.
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1, dtype=torch.float64)
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[:, 1:] = rand_bool((B, L - 1), seed + 2, p_true=0.3)

    def build(tensors, grad_outputs):
        return Call(subject.unit, block_recipe(shapes, state, norm_first=norm_first), tuple(tensors),
                    {"is_causal": is_causal, "key_padding_mask": padding}, dtype=torch.float64, grad_outputs=grad_outputs)

    expected = torch_block(x, state, heads, norm_first=norm_first, is_causal=is_causal, key_padding_mask=padding)
    # The identity's gradients are right too: the output is checked first.
    check_gradients_of(subject, build, [x], seed=seed, expect=lambda base: assert_close(
        base, expected, what="output of a float64 block", **tolerance(torch.float64), hints=lambda: block_hints(
            x, state, heads, norm_first=norm_first, is_causal=is_causal, key_padding_mask=padding)))


# -- structure ------------------------------------------------------------------------

@pytest.mark.points(2)
@given(shapes=block_shapes(min_len=2), seed=seeds, norm_first=st.booleans())  # L = 1 makes a LayerNorm over positions look like other bugs
def test_zeroed_sublayers_pin_the_residuals(subject, shapes, seed, norm_first):
    """with out_proj and linear2 zeroed, a pre-norm block is the identity and a post-norm block is norm2(norm1(x)), its own two LayerNorms applied in turn"""
    # Checks: T8, T9.
    B, L, d, heads, d_ff = shapes
    state = zeroed(block_state(d, d_ff, seed), "self_attn.out_proj", "ffn.linear2")
    x = randn((B, L, d), seed + 1)
    got = run_block(subject, shapes, state, x, norm_first=norm_first)
    if norm_first:  # x + 0 + 0, exactly: no numerical slip can show, and x is its own anchor
        expected = x.double()
        what = "a pre-norm block whose sublayers output 0 (must be the identity)"
    else:
        # The unit's own LayerNorm with each norm's parameters: a LayerNorm slip fails the LayerNorm properties.
        norm1, norm2 = ({"weight": state[f"{n}.weight"], "bias": state[f"{n}.bias"]} for n in ("norm1", "norm2"))
        once = check_tensor(run_layer_norm(subject, x, norm1), shape=x.shape, what="norm1(x)")
        expected = check_tensor(run_layer_norm(subject, once, norm2), shape=x.shape, what="norm2(norm1(x))")
        what = "a post-norm block whose sublayers output 0 (must be norm2(norm1(x)))"
    assert_close(got, expected, hints=lambda: block_hints(x, state, heads, norm_first=norm_first),
                      what=what, dtype=torch.float32, **BLOCK_TOL)
    if not norm_first:  # a constant answer may be its own norms' composition too
        once = torch_layer_norm(x, state["norm1.weight"], state["norm1.bias"])
        assert_roughly(expected, torch_layer_norm(once, state["norm2.weight"], state["norm2.bias"]),
                       what="norm2(norm1(x))")


@pytest.mark.points(2)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans(), data=st.data())
def test_block_is_causal(subject, shapes, seed, norm_first, data):
    """with is_causal, changing later positions leaves the block's earlier outputs unchanged"""
    # Checks: T7.
    B, L, d, heads, d_ff = shapes
    t = data.draw(st.integers(0, L - 1), label="t")
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1)
    later = x.clone()
    later[:, t + 1:] += randn(later[:, t + 1:].shape, seed + 2, scale=3.0)
    a = run_block(subject, shapes, state, x, norm_first=norm_first, is_causal=True)
    b = run_block(subject, shapes, state, later, norm_first=norm_first, is_causal=True)
    check_tensor(a, shape=(B, L, d), what="TransformerBlock output")
    assert_close(b[:, : t + 1], a[:, : t + 1], atol=1e-5,
                 what=f"outputs at positions <= {t} after changing later positions (is_causal=True)")
    # The identity is causal too.
    assert_roughly(a, torch_block(x, state, heads, norm_first=norm_first, is_causal=True), what="TransformerBlock output")


@pytest.mark.points(2)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans())
def test_block_is_position_wise_outside_attention(subject, shapes, seed, norm_first):
    """apart from attention, the block works position by position: with out_proj's weight zeroed, each output depends only on its own position"""
    # Checks: T8, T9.
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    state["self_attn.out_proj.weight"] = torch.zeros(d, d)  # attention now adds only out_proj.bias
    x = randn((B, L, d), seed + 1)
    whole = check_tensor(run_block(subject, shapes, state, x, norm_first=norm_first), shape=(B, L, d),
                         what="TransformerBlock output")
    for i in range(L):
        alone = run_block(subject, (B, 1, d, heads, d_ff), state, x[:, i:i + 1], norm_first=norm_first)
        assert_close(whole[:, i:i + 1], alone, what=f"position {i} computed within the sequence vs on its own")
    # The identity is position-wise too.
    assert_roughly(whole, torch_block(x, state, heads, norm_first=norm_first), what="TransformerBlock output")


@pytest.mark.points(1)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans())
def test_block_permutation_equivariant(subject, shapes, seed, norm_first):
    """without masks, permuting the positions permutes the block's outputs the same way"""
    # Checks: T8, T9.
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1)
    perm = permutation(L, seed)
    a = check_tensor(run_block(subject, shapes, state, x, norm_first=norm_first), shape=(B, L, d), what="output")
    b = run_block(subject, shapes, state, x[:, perm], norm_first=norm_first)
    assert_close(b, a[:, perm], what="output after permuting the positions")
    # The identity is equivariant too.
    assert_roughly(a, torch_block(x, state, heads, norm_first=norm_first), what="output")


@pytest.mark.points(1)
@pytest.mark.aspect("mode")
@settings(max_examples=10)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans(), p=st.sampled_from([0.1, 0.5]))
def test_eval_mode_is_deterministic(subject, shapes, seed, norm_first, p):
    """in eval mode a block built with dropout > 0 is deterministic and equals the same block built with dropout 0"""
    # Checks: T10, G1.
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1)
    plain = check_tensor(run_block(subject, shapes, state, x, norm_first=norm_first, is_causal=True), shape=(B, L, d),
                         what="output of the block with dropout=0")
    recipe = block_recipe(shapes, state, norm_first=norm_first, dropout=p)
    a = subject.run(Call(subject.unit, recipe, (x,), {"is_causal": True}, seed=1)).output
    b = subject.run(Call(subject.unit, recipe, (x,), {"is_causal": True}, seed=2)).output
    check_tensor(a, shape=(B, L, d), what="output in eval mode")
    assert torch.equal(a, b), "in eval mode two runs with different torch seeds differ: dropout must be off outside training"
    assert_close(a, plain, what=f"eval-mode output of a block with dropout={p} compared with dropout=0")
    assert_roughly(plain, torch_block(x, state, heads, norm_first=norm_first, is_causal=True),
                   what="output of the block with dropout=0")


@pytest.mark.points(2)
@settings(max_examples=6)
@given(p=st.sampled_from([0.25, 0.5]), seed=seeds, sublayer=st.sampled_from(["attention", "feed-forward"]))
def test_train_dropout_is_placed_and_seeded(subject, p, seed, sublayer):
    """in training mode dropout1 and dropout2 drop each sublayer's output (before the residual addition) with probability p and scale the rest by 1/(1-p), reproducibly for a torch seed and differently for another"""
    # Checks: T6, T8, T9.
    shapes = (4, 16, 16, 2, 8)
    B, L, d, heads, d_ff = shapes
    c = 1.0 + torch.rand(d, generator=torch.Generator().manual_seed(seed))
    state = zeroed(block_state(d, d_ff, seed), "self_attn.v_proj", "self_attn.out_proj", "ffn.linear2")
    # The chosen sublayer outputs the constant c at every position, the other one 0 (pre-norm).
    state["self_attn.out_proj.bias" if sublayer == "attention" else "ffn.linear2.bias"] = c
    x = randn((B, L, d), seed + 1)
    call = Call(subject.unit, block_recipe(shapes, state, norm_first=True, dropout=p), (x,), train=True, seed=seed)
    out = check_tensor(subject.run(call).output, shape=(B, L, d), what="output in training mode")
    added = out.double() - x.double()  # what the residual connection added: dropout(c)
    scaled = c.double().expand(B, L, d) / (1 - p)
    is_zero = added.abs() <= 1e-5
    name = "dropout1" if sublayer == "attention" else "dropout2"
    # The known bugs, each rebuilt with the entries the student's run zeroed.
    wrong = [(x.double() + c.double(), f"apply {name} to the {sublayer} sublayer's output, before the residual addition."),
             (torch.zeros_like(added), "the feed-forward sublayer lost its residual connection (x + ...).")]
    if abs(float((out == 0).double().mean()) - p) < 0.08:  # whole entries dropped: dropout after the residual addition
        wrong.append(((x.double() + c.double()).masked_fill(out == 0, 0.0) / (1 - p), SUM_DROPPED))
    # The other sublayer's dropout applied to its sum, the residual included: each entry of that answer
    # is one of a few values, whichever its two dropouts drew.
    k, x64, c64 = 1 / (1 - p), x.double(), c.double().expand(B, L, d)
    if sublayer == "attention":  # dropout2(x + dropout1(c) + 0)
        wrong.append((nearest(out, [torch.zeros_like(x64), x64 * k, (x64 + c64 * k) * k]), SUM_DROPPED))
    else:  # dropout1(x + 0) + dropout2(c)
        wrong.append((nearest(out, [torch.zeros_like(x64), x64 * k, c64 * k, (x64 + c64) * k]), SUM_DROPPED))
    if sublayer == "feed-forward":
        wrong.append((x.double() + (scaled / (1 - p)).masked_fill(is_zero, 0.0),
                      "the feed-forward output was dropped out twice: FeedForward's own dropout goes between the GELU "
                      "and linear2, not after linear2."))
    assert_close(out, x.double() + scaled.masked_fill(is_zero, 0.0), hints=wrong,
                 what=f"a pre-norm block in training mode whose {sublayer} sublayer alone outputs a constant c: x + {name}(c), "
                      "each entry of dropout(c) 0 or c / (1 - p)")
    zero_rate = float(is_zero.double().mean())
    assert abs(zero_rate - p) < 0.08, (
        f"with dropout={p}, {name} zeroed {zero_rate:.1%} of the {sublayer} sublayer's output; expected about {p:.0%}")
    assert torch.equal(out, subject.run(call).output), (
        "two training-mode runs with the same torch seed differ: use nn.Dropout (torch's RNG)")
    other = subject.run(Call(subject.unit, call.target, (x,), train=True, seed=seed + 1)).output
    assert not torch.equal(out, other), "training-mode runs with different torch seeds give the same output"


# -- dtypes, devices, contract ------------------------------------------------------

def assert_moved(got, plain, dtype, what):
    """``got``, the answer of a module moved to ``dtype``, has that dtype and equals ``plain``, the same
    module's float32 answer on the same (rounded) numbers, within ``dtype``'s tolerance (float32's for
    float64)."""
    tol = BLOCK_TOL if dtype == torch.float64 else dict(atol=1e-1, rtol=5e-2)
    assert_close(got, plain, dtype=dtype, what=f"{what} compared with the float32 answer", **tol)


def assert_not_cast_up(got, what):
    """A float64 answer whose every entry is a float32 number, one at least needing more digits than
    float16 has, was computed in float32 and cast up: a float64 computation lands on a float32 number
    about once in 2**29. (Only for an answer that depends on the input: a copy of a float32 parameter
    is a float32 number too, so it runs after the anchor.)"""
    finite = got[got.isfinite()]

    def held_by(lower):
        return bool((finite.to(lower).double() == finite).all())

    if got.dtype == torch.float64 and finite.numel() and held_by(torch.float32) and not held_by(torch.float16):
        raise fail_with(f"{what}: every entry is a float32 number, so it was computed in float32", DOWNCAST)


@pytest.mark.points(2)
@pytest.mark.aspect("dtype")
@settings(max_examples=10)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans(), dtype=st.sampled_from([torch.float64, torch.bfloat16]))
def test_dtype_is_preserved(subject, shapes, seed, norm_first, dtype):
    """a block (and a LayerNorm) moved to float64 or bfloat16 returns that dtype and equals its own float32 answer: float64 to float32 tolerance and computed in float64 (not a float32 answer cast up), bfloat16 within bfloat16 tolerance"""
    # Checks: G3, G4, G7.
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    rounded = {k: v.to(dtype).float() for k, v in state.items()}  # the weights the moved block holds
    x = randn((B, L, d), seed + 1, dtype=dtype)
    recipe = block_recipe(shapes, state, norm_first=norm_first)
    got = subject.run(Call(subject.unit, recipe, (x,), {"is_causal": True}, dtype=dtype)).output
    plain = subject.run(Call(subject.unit, block_recipe(shapes, rounded, norm_first=norm_first), (x.float(),),
                             {"is_causal": True})).output
    check_tensor(plain, shape=(B, L, d), what="output of the float32 block")
    assert_moved(got, plain, dtype, f"output of a {dtype} block")
    ln = subject.run(Call(subject.unit, layer_norm_recipe(d), (x,), dtype=dtype)).output
    ln_plain = check_tensor(run_layer_norm(subject, x.float()), shape=x.shape, what="LayerNorm of a float32 tensor")
    assert_moved(ln, ln_plain, dtype, f"LayerNorm of a {dtype} tensor")
    assert_roughly(plain, torch_block(x, rounded, heads, norm_first=norm_first, is_causal=True),
                   what="output of the float32 block")
    assert_not_cast_up(got, f"output of a {dtype} block")
    assert_not_cast_up(ln, f"LayerNorm of a {dtype} tensor")


def run_on_meta(subject, call, plain, what):
    """``call`` moved to the meta device gives a meta tensor shaped like ``plain``, the CPU answer."""
    call = dataclasses.replace(call, device="meta")
    try:
        out = subject.run(call).output
    except StudentError as error:
        # It ran on the CPU: a tensor it made itself sits on the CPU (no device=x.device).
        found = (error.kind, "device" in error.message)
        raise fail_with(error.describe(), known_answer(found, [(("RuntimeError", True), CPU_TENSOR)]), call) from None
    check_tensor(out, shape=plain.shape, device_type="meta", what=what)


@pytest.mark.points(2)
@pytest.mark.aspect("device")
@settings(max_examples=3)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans(), data=st.data())
def test_runs_on_meta_device(subject, shapes, seed, norm_first, data):
    """the unit runs on the meta device (every tensor is created on the input's device): a block and a FeedForward on meta give the shapes of their CPU answers"""
    # Checks: G3, G4.
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1)
    masks = {**data.draw(block_masks(B, L, heads, seed + 5), label="masks"), "is_causal": True}
    block = Call(subject.unit, block_recipe(shapes, state, norm_first=norm_first), (x,), masks)
    plain = check_tensor(subject.run(block).output, shape=(B, L, d), what="block output on the CPU")
    run_on_meta(subject, block, plain, f"block output on meta with {sorted(masks)}")
    ffn = Call(subject.unit, New("FeedForward", (d, d_ff)), (x,))
    ffn_plain = check_tensor(subject.run(ffn).output, shape=(B, L, d), what="FeedForward output on the CPU")
    run_on_meta(subject, ffn, ffn_plain, "FeedForward output on meta")
    assert_roughly(plain, torch_block(x, state, heads, norm_first=norm_first, **masks), what="block output on the CPU")


@pytest.mark.points(0)
@pytest.mark.aspect("device")
@settings(max_examples=5)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans())
def test_cpu_and_cuda_agree(subject, shapes, seed, norm_first):
    """CPU and CUDA give the same result (TF32 off); informational, worth no points"""
    # Checks: G4.
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1)
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[:, 1:] = rand_bool((B, L - 1), seed + 2, p_true=0.3)
    call = dict(target=block_recipe(shapes, state, norm_first=norm_first), args=(x,),
                kwargs={"is_causal": True, "key_padding_mask": padding})
    cpu = subject.run(Call(subject.unit, **call)).output
    cuda = subject.run(Call(subject.unit, **call, device="cuda")).output
    check_tensor(cuda, device_type="cuda", what="output of a CUDA call")
    assert_close(cuda.cpu(), cpu, what="CUDA output compared with CPU output", **BLOCK_TOL)
    assert_roughly(cpu, torch_block(x, state, heads, norm_first=norm_first, is_causal=True, key_padding_mask=padding),
                   what="output of a CPU call")


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
@settings(max_examples=4)
@given(shapes=block_shapes(), seed=seeds, extra=st.integers(1, 3), norm_first=st.booleans())
def test_bad_sizes_raise_value_error(subject, shapes, seed, extra, norm_first):
    """a wrong feature size raises ValueError naming both sizes (LayerNorm, TransformerBlock), and d_model % num_heads != 0 raises ValueError naming both"""
    # Checks: G8.
    B, L, d, heads, d_ff = shapes
    wide = randn((B, L, d + extra), seed)
    call = Call(subject.unit, layer_norm_recipe(d), (wide,))
    try:
        assert_raises(subject.run, call, "ValueError", mentions=(d, d + extra))
    except AssertionError as error:
        # An affine LayerNorm that checks nothing fails where weight meets x: a broadcasting RuntimeError.
        raise fail_with(str(error), known_answer(raised_kind(subject, call), [("RuntimeError", LN_SIZE_CHECK)]),
                        call) from None
    assert_raises(subject.run, Call(subject.unit, block_recipe(shapes, None, norm_first=norm_first), (wide,)), "ValueError",
                  mentions=(d, d + extra))
    if heads > 1:
        odd = heads * 2 + 1
        assert_raises(subject.run, Call(subject.unit, New("TransformerBlock", (odd, heads, d_ff)), (randn((B, L, odd), seed),)),
                      "ValueError", mentions=(odd, heads))


@pytest.mark.points(1)
@pytest.mark.aspect("layout")
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans(), is_causal=st.booleans())
def test_noncontiguous_inputs_left_unmodified(subject, shapes, seed, norm_first, is_causal):
    """a non-contiguous input gives the output of the contiguous one, and is not modified in place"""
    # Checks: G6.
    B, L, d, heads, d_ff = shapes
    state = block_state(d, d_ff, seed)
    x = randn((B, L, d), seed + 1)
    call = Call(subject.unit, block_recipe(shapes, state, norm_first=norm_first), (x,), {"is_causal": is_causal})
    plain = check_tensor(subject.run(call).output, shape=(B, L, d), what="output for a contiguous x")
    result = subject.run(dataclasses.replace(call, noncontiguous=True))
    try:
        assert_unmodified(result)
    except AssertionError as error:
        raise fail_with(str(error), known_answer(bool(result.mutated), [(True, IN_PLACE)])) from None
    assert_close(result.output, plain, what="output for a non-contiguous x compared with a contiguous one")
    assert_roughly(plain, torch_block(x, state, heads, norm_first=norm_first, is_causal=is_causal),
                   what="output for a contiguous x")


@pytest.mark.points(1)
@settings(max_examples=10)
@given(shapes=block_shapes(), seed=seeds, norm_first=st.booleans())
def test_bias_false_matches_torch(subject, shapes, seed, norm_first):
    """bias=False removes the biases of the Linear layers, and the block then equals torch's layer with bias=False"""
    # Checks: T5.
    B, L, d, heads, d_ff = shapes
    x = randn((B, L, d), seed + 1)
    probe = subject.run(Call(subject.unit, block_recipe(shapes, None, norm_first=norm_first, bias=False), (x,), return_state=True))
    keys = set(probe.state or {})
    kept = sorted(keys & {*LINEAR_BIASES, *NORM_BIASES})
    if kept:
        raise fail_with(f"with bias=False the block still has {kept} (pass bias=False on to self_attn, the "
                        "feed-forward and both norms, as nn.TransformerEncoderLayer does)",
                        known_answer(kept, [(sorted({*LINEAR_BIASES, *NORM_BIASES}), BIAS_IGNORED),
                                            (sorted(NORM_BIASES), NORMS_KEEP_BIAS)]))
    theirs = block_state(d, d_ff, seed, bias=False)
    ours = dict(theirs)
    unexpected = sorted(keys - set(ours))
    if unexpected:
        raise AssertionError(f"with bias=False the block has unexpected parameters or buffers {unexpected}")
    got = run_block(subject, shapes, ours, x, norm_first=norm_first, init={"bias": False})
    assert_close(got, torch_block(x, theirs, heads, norm_first=norm_first, bias=False),
                 what="output of a block with bias=False", dtype=torch.float32, **BLOCK_TOL)


@pytest.mark.points(1)
@settings(max_examples=10)
@given(B=st.integers(1, 3), L=st.integers(1, 4), d=st.integers(1, 8), d_ff=st.integers(1, 16), seed=seeds)
def test_layer_norm_and_feed_forward_bias_false(subject, B, L, d, d_ff, seed):
    """bias=False: LayerNorm keeps only its weight and FeedForward only its two weights, as torch's bias=False"""
    # Checks: T1, T4.
    x = randn((B, L, d), seed)
    probe = subject.run(Call(subject.unit, layer_norm_recipe(d, bias=False), (x,), return_state=True))
    found = sorted(probe.state or {})
    if found != ["weight"]:
        raise fail_with(f"LayerNorm({d}, bias=False) must have only `weight` (as nn.LayerNorm(..., bias=False)); "
                        f"it has {found}", known_answer(found, [(["bias", "weight"], LN_BIAS_KEPT)]))
    norm = {"weight": norm_state("n", d, seed + 1, bias=False)["n.weight"]}
    assert_close(run_layer_norm(subject, x, norm, bias=False), torch_layer_norm(x, norm["weight"]),
                 what=f"LayerNorm({d}, bias=False)(x)", dtype=torch.float32)
    probe = subject.run(Call(subject.unit, New("FeedForward", (d, d_ff), {"bias": False}), (x,), return_state=True))
    if sorted(probe.state or {}) != ["linear1.weight", "linear2.weight"]:
        raise AssertionError(f"FeedForward({d}, {d_ff}, bias=False) must pass bias=False to both linears; "
                             f"it has {sorted(probe.state or {})}")
    ffn = ffn_state(d, d_ff, seed + 2, bias=False)
    got = subject.run(Call(subject.unit, New("FeedForward", (d, d_ff), {"bias": False}, state=ffn), (x,))).output
    assert_close(got, ffn64(x, ffn), what=f"FeedForward({d}, {d_ff}, bias=False)(x)", dtype=torch.float32)
