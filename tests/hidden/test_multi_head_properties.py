"""Hidden properties of unit 3, multi-head attention.

Each test's docstring is the property students read; its points are marked.
Tests reach the student's code only through ``subject``. While this unit is
graded, its ``from .attention import ...`` gets the course's trusted stand-in
(course/stand_ins/attention.py), so a unit-2 bug never costs unit-3 points.

Decisions where the API page is silent (the reference's docstring says the same):
  * ``embed_dim % num_heads != 0`` may raise ValueError in ``__init__`` or at
    the first call; both are accepted.
  * In training mode, dropout acts on the attention weights and the returned
    weights are the dropped ones (as in ``nn.MultiheadAttention``).
  * ``forward(query, key)`` with no ``value`` attends to ``key`` (the page: ``value``
    defaults to ``key``); nothing here calls it with a ``value`` and no ``key``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import torch
from hypothesis import given, settings, strategies as st

from autograder.testing.compare import (N_, assert_raises, assert_roughly, assert_unmodified, check_tensor, mismatch,
                                        with_hint)
from autograder.core.i18n import translate_text
from autograder.core.protocol import Call, New, StudentError
from anchors import assert_close, check_gradients_of, computed_in_float32, tolerance
from oracles_attention import attention64
from oracles_multi_head import explicit_mha64, expected_keys, make_state, permute_heads, torch_mha64
from tensors import permutation, rand_bool, randn, seeds

pytestmark = pytest.mark.unit("multi_head")
# The checks a constant or shape-only answer may pass, and so the only points it may earn
# (tests/project/test_nothing_for_nothing.py): shapes, structure and argument errors.
SHAPE_CHECKS = (
    "test_multi_head_public.py::test_output_and_weight_shapes",
    "test_multi_head_public.py::test_wrong_sizes_raise_value_error",
    "test_multi_head_properties.py::test_parameter_names_and_shapes",
    "test_multi_head_properties.py::test_indivisible_embed_dim_raises_value_error",
    "test_multi_head_properties.py::test_mismatched_sizes_raise_value_error",
)


# Failure messages the properties below raise (translated where raised: translate_text).
LAYOUT_DIFFERS = N_("{target} of a non-contiguous input differs from its result for the same values laid out "
                    "contiguously")
EVAL_CHANGED = N_("with dropout={p} in eval mode (torch seed {seed}), the {what} changed: the module without dropout "
                  "gives other values")
TRAINING_NOTHING_DROPPED = N_("with dropout={p} in training mode nothing was dropped")
TRAINING_WEIGHTS_BEFORE_DROPOUT = N_("with dropout={p} in training mode the returned weights are those before dropout")


@dataclass(frozen=True)
class Config:
    B: int
    L: int
    S: int
    E: int
    H: int
    kdim: int
    vdim: int
    bias: bool
    cross: bool  # key and value are their own tensors (else self-attention: key = value = query)

    @property
    def Dh(self) -> int:
        return self.E // self.H

    def state(self, seed: int, dtype=torch.float32) -> dict:
        return make_state(self.E, self.kdim, self.vdim, self.bias, seed, dtype=dtype)

    def recipe(self, state: dict | None, **extra) -> New:
        kwargs = {"bias": self.bias, **extra}
        if self.cross:
            kwargs.update(kdim=self.kdim, vdim=self.vdim)
        return New("MultiHeadAttention", (self.E, self.H), kwargs, state=state)

    def inputs(self, seed: int, dtype=torch.float32) -> tuple:
        q = randn((self.B, self.L, self.E), seed, dtype=dtype)
        if not self.cross:
            return (q,)
        return q, randn((self.B, self.S, self.kdim), seed + 1, dtype=dtype), randn((self.B, self.S, self.vdim), seed + 2, dtype=dtype)


@st.composite
def configs(draw, *, cross=False, min_heads=1, max_heads=4, max_len=5, max_batch=3, same_len=False, bias=True):
    """Sizes for one module and its inputs; ``bias=None`` draws the bias flag too."""
    H = draw(st.integers(min_heads, max_heads), label="H")
    Dh = draw(st.integers(1, 4), label="Dh")
    E = H * Dh
    B = draw(st.integers(1, max_batch), label="B")
    L = draw(st.integers(1, max_len), label="L")
    S = draw(st.integers(1, max_len), label="S") if cross and not same_len else L
    kdim = draw(st.integers(1, 7), label="kdim") if cross else E
    vdim = draw(st.integers(1, 7), label="vdim") if cross else E
    bias = draw(st.booleans(), label="bias") if bias is None else bias
    return Config(B, L, S, E, H, kdim, vdim, bias, cross)


def make_masks(cfg: Config, seed: int, *, padding: bool, mask_kind: str | None, allow_empty: bool = False):
    """(key_padding_mask, attn_mask). Unless ``allow_empty``, every query keeps key 0
    (torch gives NaN for a query with no key left)."""
    B, L, S, H = cfg.B, cfg.L, cfg.S, cfg.H
    kpm = rand_bool((B, S), seed + 20, p_true=0.35) if padding else None
    if kpm is not None and not allow_empty:
        kpm[:, 0] = False
    shape = {"bool_2d": (L, S), "bool_4d": (B, H, L, S), "float_2d": (L, S), "float_4d": (B, H, L, S)}.get(mask_kind)
    mask = None
    if mask_kind and mask_kind.startswith("bool"):
        mask = rand_bool(shape, seed + 21, p_true=0.6)
        if not allow_empty:
            mask[..., 0] = True
    elif mask_kind:
        mask = randn(shape, seed + 22, scale=1.5)
    return kpm, mask


mask_kinds = st.sampled_from([None, "bool_2d", "bool_4d", "float_2d", "float_4d"])

SEQ_FIRST = ("x is batch-first (B, L, E): split each position's features, reshape(B, L, H, Dh), then transpose(1, 2); "
             "a seq-first (L, B * H, Dh) reshape mixes the batch elements.")
NO_GRADIENT = ("no gradient reaches value through the attention's output: nothing between the inputs and out_proj may "
               "be detached (no .detach(), .data or torch.no_grad()).")
VALUE_DEFAULT = "value defaults to key, not to query: attn(x, memory) attends to memory's values."
# Advice proven by the check that fails, not by a wrong answer's value (with_hint).
LAYOUT = N_("the result changed with the input's memory layout alone: reshape and transpose by shape (or call "
            ".contiguous() first), never with strides assumed (as_strided).")
IN_PLACE = N_("compute new tensors instead of writing into an argument (mul_, masked_fill_, logical_not_, +=): the "
              "caller's tensors must not change.")
DEVICE = N_("create every tensor your code makes (masks included) on the input's device: device=query.device.")
EVAL_DROPOUT = N_("dropout acts only in training mode: in eval mode (self.training is False) pass dropout_p=0 to the "
                  "attention.")
NO_DROPOUT = N_("in training mode pass dropout_p=self.dropout to unit 2's attention: no weight was dropped.")
AFTER_DROPOUT = N_("the returned weights are the ones after dropout, zeroed and rescaled by 1 / (1 - p): the ones "
                   "multiplied with the values, as nn.MultiheadAttention returns them (API page, units 2 and 3).")
BIAS_FLAG = N_("bias=False means no biases anywhere: pass bias=bias to all four nn.Linear projections.")
KDIM = N_("k_proj takes key's width kdim and v_proj value's width vdim, not embed_dim: nn.Linear(kdim, embed_dim).")
DIVISIBILITY = N_("check that num_heads divides embed_dim (in __init__ and in split_heads) and raise ValueError naming "
                  "both sizes.")
WIDTH = N_("check each input's last dim against embed_dim, kdim and vdim, and raise ValueError naming both widths.")
NEED_WEIGHTS = N_("with need_weights=False return (output, None).")
AVERAGE_FLAG = N_("average_attn_weights=False returns each head's weights, (B, H, L, S), not their mean over the heads.")


def mha_hints(cfg, state, args, *, kpm=None, mask=None, is_causal=False, average=True):
    """Known wrong answers ((output, weights), advice), built by the explicit oracle."""
    wrong = [("no_out_proj", "the merged heads go through out_proj before they are returned.")]
    if cfg.H > 1:
        wrong += [
            ("scale_E", "each head's scores are scaled by 1/sqrt(head_dim) (unit 2's default on the split heads), not 1/sqrt(embed_dim)."),
            ("strided", "head h holds the contiguous features h*Dh:(h+1)*Dh, not every H-th feature."),
        ]
    if cfg.cross and cfg.kdim == cfg.vdim:
        wrong.append(("kv_swapped", "keys come from k_proj(key) and values from v_proj(value): are they swapped?"))
    if kpm is not None:
        wrong.append(("pad_polarity", "key_padding_mask True means 'padding, ignore this key' (the opposite of attn_mask's True)."))
        if cfg.L == cfg.S:
            wrong.append(("pad_queries", "key_padding_mask masks keys (the last dim of the scores), not queries."))
    if mask is not None and mask.dtype == torch.bool:
        wrong.append(("mask_polarity", "a bool attn_mask's True means 'may attend' (unit 2's convention; torch's is the opposite)."))
    if is_causal:
        wrong.append(("no_causal", "is_causal was ignored: pass it on to the attention, where it combines with the masks."))
    if kpm is not None or mask is not None or is_causal:
        wrong.append(("finite", "rows with no key left got uniform weights: mask with booleans or -inf, not a large "
                                "negative number, so that they get zero weights."))
    hints = []
    for name, text in wrong:
        out, w = explicit_mha64(state, cfg.H, *args, key_padding_mask=kpm, attn_mask=mask, is_causal=is_causal, wrong=(name,))
        hints.append(((out, w.mean(1) if average else w), text))
    out, w = explicit_mha64(state, cfg.H, *args, key_padding_mask=kpm, attn_mask=mask, is_causal=is_causal)
    if average and cfg.H > 1:
        hints += [((out, w[:, 0]), "average the weights over the heads (dim 1), not take head 0."),
                  ((out, w.sum(1)), "average the weights over the heads: a mean, not a sum.")]
    return hints


def assert_mha(got, expected, hints=(), *, atol=1e-5, rtol=1e-4, dtype=torch.float32, weights="weights"):
    """``got`` is (output, weights) matching ``expected``; weights first, their errors explain the output's.

    ``hints`` may be a function returning them: it is then called only when the check fails.
    """
    if callable(hints):
        try:
            return assert_mha(got, expected, (), atol=atol, rtol=rtol, dtype=dtype, weights=weights)
        except AssertionError:
            hints = hints()
    pair(got)
    if expected[1] is None:
        if got[1] is not None:
            raise AssertionError(with_hint("with need_weights=False the weights must be None", NEED_WEIGHTS))
    else:
        if got[1] is None:
            raise AssertionError("the weights are None, but need_weights is True")
        averaged = expected[1].mean(1) if expected[1].dim() == 4 else None  # per-head weights were asked for
        if isinstance(got[1], torch.Tensor) and averaged is not None and got[1].shape == averaged.shape:
            try:
                check_tensor(got[1], shape=expected[1].shape, what=weights)
            except AssertionError as error:
                raise AssertionError(with_hint(str(error), AVERAGE_FLAG)) from None
        assert_close(got[1], expected[1], atol=atol, rtol=rtol, what=weights, dtype=dtype,
                     hints=[(wrong[1], text) for wrong, text in hints])
    assert_close(got[0], expected[0], atol=atol, rtol=rtol, what="output", dtype=dtype,
                 hints=[(wrong[0], text) for wrong, text in hints])


def pair(got):
    """``got``, checked to be what MultiHeadAttention returns: a tuple (output, weights)."""
    if not (isinstance(got, tuple) and len(got) == 2):
        raise AssertionError("MultiHeadAttention must return a tuple (output, weights)")
    return got


def forward(subject, cfg, state, args, kwargs=None, **options):
    return subject.run(Call(subject.unit, cfg.recipe(state, **options.pop("init", {})), tuple(args), kwargs or {}, **options))


def split_layout(x: torch.Tensor, H: int) -> torch.Tensor:
    """The API page's layout, built head by head: out[:, h] = x[..., h*Dh:(h+1)*Dh]."""
    Dh = x.shape[-1] // H
    return torch.stack([x[..., h * Dh:(h + 1) * Dh] for h in range(H)], dim=1)


def merge_layout(y: torch.Tensor) -> torch.Tensor:
    return torch.cat([y[:, h] for h in range(y.shape[1])], dim=-1)


distinct_sizes = st.lists(st.integers(2, 7), min_size=4, max_size=4, unique=True)


# -- split_heads / merge_heads -----------------------------------------------

@pytest.mark.points(2)
@given(sizes=distinct_sizes, seed=seeds)
def test_split_heads_exact_layout(subject, sizes, seed):
    """split_heads gives (B, H, L, Dh) where head h holds features h*Dh:(h+1)*Dh"""
    # Checks: M1.
    B, L, H, Dh = sizes  # all distinct, so a swapped dim shows
    x = randn((B, L, H * Dh), seed)
    got = subject.run(Call(subject.unit, "split_heads", (x, H))).output
    hints = [
        (x.reshape(B, H, L, Dh), "a single view/reshape to (B, H, L, Dh) mixes positions and features: "
                                 "reshape to (B, L, H, Dh), then transpose(1, 2)."),
        (x.reshape(B, L, Dh, H).permute(0, 3, 1, 2), "head h holds the contiguous features h*Dh:(h+1)*Dh, not every H-th feature."),
        (x.reshape(L, B * H, Dh).transpose(0, 1).reshape(B, H, L, Dh), SEQ_FIRST),
    ]
    check_tensor(got, shape=(B, H, L, Dh), what=f"split_heads of a {tuple(x.shape)} tensor into {H} heads")
    assert_close(got, split_layout(x, H), atol=0, rtol=0, what="split_heads(x)", hints=hints)


@pytest.mark.points(2)
@given(sizes=distinct_sizes, seed=seeds)
def test_merge_heads_inverts_split_heads(subject, sizes, seed):
    """merge_heads is the exact inverse of split_heads (head h back to features h*Dh:(h+1)*Dh)"""
    # Checks: M2.
    B, L, H, Dh = sizes
    y = randn((B, H, L, Dh), seed)
    merged = subject.run(Call(subject.unit, "merge_heads", (y,))).output
    check_tensor(merged, shape=(B, L, H * Dh), what=f"merge_heads of a {tuple(y.shape)} tensor")
    assert_close(merged, merge_layout(y), atol=0, rtol=0, what="merge_heads(y)",
                 hints=[(y.reshape(B, L, H * Dh), "merge_heads must transpose (B, H, L, Dh) back to (B, L, H, Dh) before "
                                                  "flattening the heads; a plain reshape mixes positions and heads.")])
    x = randn((B, L, H * Dh), seed + 1)
    split = subject.run(Call(subject.unit, "split_heads", (x, H))).output
    back = subject.run(Call(subject.unit, "merge_heads", (split,))).output
    assert_close(back, x, atol=0, rtol=0, what="merge_heads(split_heads(x))")


@pytest.mark.points(1)
@pytest.mark.aspect("layout")
@given(sizes=distinct_sizes, seed=seeds)
def test_split_and_merge_accept_noncontiguous_inputs(subject, sizes, seed):
    """split_heads and merge_heads give your results for contiguous inputs on non-contiguous ones, and leave them unmodified"""
    # Checks: M1, M2, G6.
    B, L, H, Dh = sizes
    x = randn((B, L, H * Dh), seed)
    y = randn((B, H, L, Dh), seed + 1)
    for call in (Call(subject.unit, "split_heads", (x, H)), Call(subject.unit, "merge_heads", (y,))):
        plain = subject.run(call).output
        if call.target == "split_heads":
            assert_roughly(plain, split_layout(x, H), what="split_heads(x)")
        result = subject.run(replace(call, noncontiguous=True))
        assert_unmodified(result)
        check_tensor(result.output, shape=plain.shape, what=f"{call.target} of a non-contiguous input")
        if not torch.equal(result.output, plain):
            raise AssertionError(with_hint(translate_text(LAYOUT_DIFFERS).format(target=call.target), LAYOUT))


# -- against torch.nn.MultiheadAttention --------------------------------------

@pytest.mark.points(1)
@pytest.mark.aspect("shape")
@given(cfg=configs(cross=True, bias=None))
def test_parameter_names_and_shapes(subject, cfg):
    """the parameters are q_proj, k_proj, v_proj, out_proj (weight, and bias unless bias=False) with nn.Linear shapes"""
    # Checks: M3, G5.
    state = subject.run(Call(subject.unit, cfg.recipe(None), method="state_dict")).output
    got = {name: tuple(t.shape) for name, t in state.items()}
    want = expected_keys(cfg.E, cfg.kdim, cfg.vdim, cfg.bias)
    if got != want:
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        wrong = sorted(n for n in set(want) & set(got) if got[n] != want[n])
        message = (f"state_dict of MultiHeadAttention({cfg.E}, {cfg.H}, bias={cfg.bias}, kdim={cfg.kdim}, vdim={cfg.vdim}): "
                   + "; ".join(filter(None, [
                       f"missing {missing}" if missing else "",
                       f"unexpected {extra}" if extra else "",
                       ", ".join(f"{n} has shape {got[n]}, expected {want[n]}" for n in wrong),
                   ])))
        # A bias with bias=False, or a key/value projection fed embed_dim features: each is its own bug.
        stray_bias = not cfg.bias and any(n.endswith(".bias") for n in extra)
        embed_fed = any(n in ("k_proj.weight", "v_proj.weight") and got[n] == (cfg.E, cfg.E) for n in wrong)
        advice = BIAS_FLAG if stray_bias and not embed_fed else KDIM if embed_fed and not stray_bias else None
        raise AssertionError(with_hint(message, advice))


@pytest.mark.points(3)
@given(cfg=configs(bias=None), seed=seeds, need_weights=st.booleans(), average=st.booleans())
def test_self_attention_matches_torch(subject, cfg, seed, need_weights, average):
    """self-attention equals torch.nn.MultiheadAttention(batch_first=True) under the API page's weight mapping"""
    # Checks: M3, M4, M5, M9.
    state = cfg.state(seed)
    (x,) = cfg.inputs(seed + 3)
    kwargs = {"need_weights": need_weights, "average_attn_weights": average}
    got = forward(subject, cfg, state, (x,), kwargs).output
    expected = torch_mha64(state, cfg.H, x, x, x, need_weights=need_weights, average_attn_weights=average)
    assert_mha(got, expected, lambda: mha_hints(cfg, state, (x,), average=average),
               weights="weights" if average else "per-head weights")


@pytest.mark.points(2)
@given(cfg=configs(cross=True, bias=None), seed=seeds, causal=st.booleans(), padding=st.booleans())
def test_cross_attention_with_kdim_vdim_matches_torch(subject, cfg, seed, causal, padding):
    """cross-attention with kdim and vdim equals torch.nn.MultiheadAttention"""
    # Checks: M3, M4, M6, M7.
    if causal and cfg.S < cfg.L:
        cfg = Config(cfg.B, cfg.L, cfg.L, cfg.E, cfg.H, cfg.kdim, cfg.vdim, cfg.bias, cfg.cross)  # every query sees a key
    state = cfg.state(seed)
    args = cfg.inputs(seed + 3)
    kpm, _ = make_masks(cfg, seed, padding=padding, mask_kind=None)
    got = forward(subject, cfg, state, args, {"key_padding_mask": kpm, "is_causal": causal}).output
    expected = torch_mha64(state, cfg.H, *args, key_padding_mask=kpm, is_causal=causal)
    assert_mha(got, expected, lambda: mha_hints(cfg, state, args, kpm=kpm, is_causal=causal))


@pytest.mark.points(1)
@settings(max_examples=10)
@given(cfg=configs(cross=True, bias=None).map(lambda c: replace(c, vdim=c.kdim)), seed=seeds, padding=st.booleans())
def test_value_defaults_to_key(subject, cfg, seed, padding):
    """attn(query, key) with no value attends to key: it equals the reference with value = key, and attn(query, key, key) (vdim = kdim)

    API page, unit 3: "`key` defaults to `query` and `value` to `key` (so `attn(x)` is
    self-attention and `attn(x, memory)` attends to `memory`)".
    """
    # Checks: M5.
    state = cfg.state(seed)
    q, k, _ = cfg.inputs(seed + 3)
    kpm, _ = make_masks(cfg, seed, padding=padding, mask_kind=None)
    kwargs = {"key_padding_mask": kpm, "average_attn_weights": False}
    got = forward(subject, cfg, state, (q, k), kwargs).output
    expected = explicit_mha64(state, cfg.H, q, k, k, key_padding_mask=kpm)
    # value = query is a value of the right width and length only where kdim = vdim = E and L = S.
    hints = [(explicit_mha64(state, cfg.H, q, k, q, key_padding_mask=kpm), VALUE_DEFAULT)] \
        if cfg.kdim == cfg.E and cfg.L == cfg.S else []
    # Per-head weights: each head's answer shows.
    assert_mha(got, expected, hints, weights="per-head weights of attn(query, key)")
    explicit = forward(subject, cfg, state, (q, k, k), kwargs).output
    assert_mha(got, explicit, weights="per-head weights of attn(query, key) against attn(query, key, key)")


@pytest.mark.points(3)
@given(cfg=configs(), seed=seeds, padding=st.booleans(), mask_kind=mask_kinds, causal=st.booleans(), average=st.booleans())
def test_masks_match_torch(subject, cfg, seed, padding, mask_kind, causal, average):
    """key_padding_mask, attn_mask (bool or float, (L, S) or (B, H, L, S)) and is_causal match torch's"""
    # Checks: M6, M7.
    state = cfg.state(seed)
    (x,) = cfg.inputs(seed + 3)
    kpm, mask = make_masks(cfg, seed, padding=padding, mask_kind=mask_kind)
    kwargs = {"key_padding_mask": kpm, "attn_mask": mask, "is_causal": causal, "average_attn_weights": average}
    got = forward(subject, cfg, state, (x,), kwargs).output
    expected = torch_mha64(state, cfg.H, x, x, x, key_padding_mask=kpm, attn_mask=mask, is_causal=causal,
                           average_attn_weights=average)
    assert_mha(got, expected, lambda: mha_hints(cfg, state, (x,), kpm=kpm, mask=mask, is_causal=causal, average=average),
               weights="weights" if average else "per-head weights")


@pytest.mark.points(2)
@settings(max_examples=10)
@given(cfg=configs(min_heads=2), seed=seeds, padding=st.booleans())
def test_weights_per_head_averaged_or_none(subject, cfg, seed, padding):
    """weights are (B, L, S) averaged over heads, (B, H, L, S) per head, or None with need_weights=False, as torch's"""
    # Checks: M9.
    state = cfg.state(seed)
    (x,) = cfg.inputs(seed + 3)
    kpm, _ = make_masks(cfg, seed, padding=padding, mask_kind=None)
    for need, average, what in ((True, True, "averaged weights"), (True, False, "per-head weights"), (False, True, "weights")):
        kwargs = {"key_padding_mask": kpm, "need_weights": need, "average_attn_weights": average}
        got = forward(subject, cfg, state, (x,), kwargs).output
        expected = torch_mha64(state, cfg.H, x, x, x, key_padding_mask=kpm, need_weights=need, average_attn_weights=average)
        if need and isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], torch.Tensor):
            want = (cfg.B, cfg.L, cfg.S) if average else (cfg.B, cfg.H, cfg.L, cfg.S)
            check_tensor(got[1], shape=want, what=f"{what} with average_attn_weights={average}")
        assert_mha(got, expected, lambda: mha_hints(cfg, state, (x,), kpm=kpm, average=average), weights=what)


@pytest.mark.points(2)
@settings(max_examples=10)
@given(cfg=configs(cross=True, bias=None), seed=seeds, padding=st.booleans(), with_weights=st.booleans())
def test_gradients_match_torch_for_every_parameter(subject, cfg, seed, padding, with_weights):
    """the gradients of every parameter and input equal torch.nn.MultiheadAttention's"""
    # Checks: M3, G1.
    state = cfg.state(seed)
    args = cfg.inputs(seed + 3)
    kpm, _ = make_masks(cfg, seed, padding=padding, mask_kind=None)
    g_out = randn((cfg.B, cfg.L, cfg.E), seed + 30)
    g_w = randn((cfg.B, cfg.L, cfg.S), seed + 31) if with_weights else None
    result = forward(subject, cfg, state, args, {"key_padding_mask": kpm}, grad_outputs=(g_out, g_w))
    out, _, want = torch_mha64(state, cfg.H, *args, key_padding_mask=kpm, grad_outputs=(g_out, g_w))
    grads = dict(zip(("query", "key", "value"), result.arg_grads))
    # With the output right, a zero gradient of value is the attention's output cut from the graph (the
    # weights' gradient never reaches value): value is compared first.
    got = result.output[0] if isinstance(result.output, tuple) else None
    right = isinstance(got, torch.Tensor) and got.shape == out.shape and mismatch(got, out, atol=1e-4, rtol=1e-3) is None
    for name in ("value", "query", "key"):
        assert_close(grads.get(name), want[name], atol=1e-4, rtol=1e-3, what=f"gradient of {name}",
                     hints=[(torch.zeros_like(want[name]), NO_GRADIENT)] if name == "value" and right else ())
    for name in expected_keys(cfg.E, cfg.kdim, cfg.vdim, cfg.bias):
        if name not in result.param_grads:
            raise AssertionError(f"no parameter named {name}")
        assert_close(result.param_grads[name], want[name], atol=1e-4, rtol=1e-3, what=f"gradient of {name}")


# -- structure ------------------------------------------------------------------

@pytest.mark.points(1)
@given(cfg=configs(cross=True, min_heads=1, max_heads=1), seed=seeds, padding=st.booleans())
def test_single_head_is_projections_plus_attention(subject, cfg, seed, padding):
    """with one head it is q/k/v projections, then unit-2 attention, then out_proj"""
    # Checks: M3, M8.
    state = cfg.state(seed)
    q, k, v = cfg.inputs(seed + 3)
    kpm, _ = make_masks(cfg, seed, padding=padding, mask_kind=None, allow_empty=True)

    def linear(x, name):
        y = x.double() @ state[f"{name}.weight"].double().T
        return y + state[f"{name}.bias"].double() if cfg.bias else y

    allowed = None if kpm is None else ~kpm[:, None, :]  # (B, 1, S)
    attended, weights = attention64(linear(q, "q_proj"), linear(k, "k_proj"), linear(v, "v_proj"), allowed)
    got = forward(subject, cfg, state, (q, k, v), {"key_padding_mask": kpm}).output
    assert_mha(got, (linear(attended, "out_proj"), weights),
               [((attended, weights), "the attention output goes through out_proj before it is returned.")])


@pytest.mark.points(2)
@given(cfg=configs(cross=True), seed=seeds, padding=st.booleans(), mask_kind=mask_kinds, causal=st.booleans())
def test_matches_explicit_per_head_loop(subject, cfg, seed, padding, mask_kind, causal):
    """it equals an explicit loop over heads, each head one unit-2 attention on its slice of features"""
    # Checks: M1, M8.
    state = cfg.state(seed)
    args = cfg.inputs(seed + 3)
    kpm, mask = make_masks(cfg, seed, padding=padding, mask_kind=mask_kind, allow_empty=True)
    kwargs = {"key_padding_mask": kpm, "attn_mask": mask, "is_causal": causal, "average_attn_weights": False}
    got = forward(subject, cfg, state, args, kwargs).output
    expected = explicit_mha64(state, cfg.H, *args, key_padding_mask=kpm, attn_mask=mask, is_causal=causal)
    assert_mha(got, expected, lambda: mha_hints(cfg, state, args, kpm=kpm, mask=mask, is_causal=causal, average=False),
               weights="per-head weights")


@pytest.mark.points(1)
@given(cfg=configs(min_heads=2), seed=seeds, padding=st.booleans())
def test_head_permutation_invariance(subject, cfg, seed, padding):
    """renumbering the heads consistently in the q, k, v and out weights leaves the output unchanged"""
    # Checks: M8.
    state = cfg.state(seed)
    perm = permutation(cfg.H, seed)
    (x,) = cfg.inputs(seed + 3)
    kpm, _ = make_masks(cfg, seed, padding=padding, mask_kind=None)
    base = forward(subject, cfg, state, (x,), {"key_padding_mask": kpm, "average_attn_weights": False}).output
    renumbered = forward(subject, cfg, permute_heads(state, cfg.H, perm), (x,),
                         {"key_padding_mask": kpm, "average_attn_weights": False}).output
    check_tensor(base[1], shape=(cfg.B, cfg.H, cfg.L, cfg.S), what="per-head weights")
    assert_mha(base, explicit_mha64(state, cfg.H, x, key_padding_mask=kpm), weights="per-head weights")  # not just invariant
    assert_close(renumbered[0], base[0], what=f"output after renumbering the heads by {perm.tolist()}")
    assert_close(renumbered[1], base[1][:, perm], what=f"per-head weights after renumbering the heads by {perm.tolist()}")
    averaged = forward(subject, cfg, state, (x,), {"key_padding_mask": kpm}).output[1]
    averaged2 = forward(subject, cfg, permute_heads(state, cfg.H, perm), (x,), {"key_padding_mask": kpm}).output[1]
    assert_close(averaged2, averaged, what="averaged weights after renumbering the heads",
                 hints=[(base[1][:, perm[0]], "average the weights over all the heads, not take head 0.")])


@pytest.mark.points(1)
@given(cfg=configs(cross=True, max_batch=4), seed=seeds, padding=st.booleans())
def test_batch_elements_are_independent(subject, cfg, seed, padding):
    """each batch element's result depends on that element alone: permuting the batch permutes the results"""
    # Checks: M4, G2.
    if cfg.B == 1:
        cfg = Config(3, cfg.L, cfg.S, cfg.E, cfg.H, cfg.kdim, cfg.vdim, cfg.bias, cfg.cross)
    state = cfg.state(seed)
    q, k, v = cfg.inputs(seed + 3)
    kpm, _ = make_masks(cfg, seed, padding=padding, mask_kind=None, allow_empty=True)
    perm = permutation(cfg.B, seed + 4)
    if torch.equal(perm, torch.arange(cfg.B)):
        perm = perm.roll(1)
    kw = {"average_attn_weights": False}
    a = forward(subject, cfg, state, (q, k, v), {"key_padding_mask": kpm, **kw}).output
    b = forward(subject, cfg, state, (q[perm], k[perm], v[perm]),
                {"key_padding_mask": None if kpm is None else kpm[perm], **kw}).output
    check_tensor(a[0], shape=(cfg.B, cfg.L, cfg.E), what="output")
    # Zeros are independent too: the results must also be right.
    assert_mha(a, explicit_mha64(state, cfg.H, q, k, v, key_padding_mask=kpm), weights="per-head weights")
    assert_close(b[0], a[0][perm], what=f"output after permuting the batch by {perm.tolist()}")
    assert_close(b[1], a[1][perm], what=f"per-head weights after permuting the batch by {perm.tolist()}")


@pytest.mark.points(2)
@given(cfg=configs(max_len=6), seed=seeds)
def test_self_attention_is_permutation_equivariant(subject, cfg, seed):
    """without masks, reordering the positions reorders the outputs: 狗咬人 and 人咬狗 look alike"""
    # Checks: M5, M8.
    # "Dog bites man" and "man bites dog" hold the same words: with no positional
    # information, self-attention gives each word the same output in both sentences.
    state = cfg.state(seed)
    (x,) = cfg.inputs(seed + 3)
    perm = permutation(cfg.L, seed + 4)
    a, wa = forward(subject, cfg, state, (x,)).output
    b, wb = forward(subject, cfg, state, (x[:, perm],)).output
    check_tensor(a, shape=(cfg.B, cfg.L, cfg.E), what="output")
    out, weights = explicit_mha64(state, cfg.H, x)
    assert_mha((a, wa), (out, weights.mean(1)))  # zeros are equivariant too
    assert_close(b, a[:, perm], what=f"output after reordering the positions by {perm.tolist()}")
    assert_close(wb, wa[:, perm][:, :, perm], what=f"weights after reordering the positions by {perm.tolist()}")


# -- padding and dropout ----------------------------------------------------------

@pytest.mark.points(2)
@settings(max_examples=10)
@given(cfg=configs(cross=True, same_len=True), seed=seeds)
def test_padded_keys_have_no_effect(subject, cfg, seed):
    """changing the content of padded keys and values changes nothing"""
    # Checks: M6.
    state = cfg.state(seed)
    q, k, v = cfg.inputs(seed + 3)
    kpm, _ = make_masks(cfg, seed, padding=True, mask_kind=None)
    k2, v2 = k.clone(), v.clone()
    k2[kpm] = randn(k2[kpm].shape, seed + 7, scale=10.0)
    v2[kpm] = randn(v2[kpm].shape, seed + 8, scale=10.0)
    a = forward(subject, cfg, state, (q, k, v), {"key_padding_mask": kpm}).output
    b = forward(subject, cfg, state, (q, k2, v2), {"key_padding_mask": kpm}).output
    out, weights = explicit_mha64(state, cfg.H, q, k, v, key_padding_mask=kpm)
    assert_mha(a, (out, weights.mean(1)))  # a constant answer ignores every key
    what = "output after changing padded keys and values"
    try:
        assert_close(b[0], a[0], what=what)
    except AssertionError:
        hints = [(wrong[0], text) for wrong, text in mha_hints(cfg, state, (q, k2, v2), kpm=kpm) if "key_padding_mask" in text]
        assert_close(b[0], a[0], what=what, hints=hints)


@pytest.mark.points(2)
@settings(max_examples=10)
@given(cfg=configs(cross=True, bias=None), seed=seeds, by_mask=st.booleans())
def test_fully_padded_rows_give_bias_not_nan(subject, cfg, seed, by_mask):
    """a query whose keys are all padded (or all masked) gets zero weights and output row out_proj.bias, not NaN"""
    # Checks: M10.
    if cfg.S == 1:  # two keys at least, so that uniform weights differ from the other bugs' answers
        cfg = Config(cfg.B, cfg.L, 2, cfg.E, cfg.H, cfg.kdim, cfg.vdim, cfg.bias, cfg.cross)
    state = cfg.state(seed)
    args = cfg.inputs(seed + 3)
    kpm, mask = make_masks(cfg, seed, padding=True, mask_kind="bool_2d" if by_mask else None)
    kpm[0] = True  # batch element 0: every key is padding
    if mask is not None:
        mask[-1] = False  # the last query may attend no key
    kwargs = {"key_padding_mask": kpm, "attn_mask": mask}
    got = forward(subject, cfg, state, args, kwargs).output
    expected = explicit_mha64(state, cfg.H, *args, key_padding_mask=kpm, attn_mask=mask)
    expected = (expected[0], expected[1].mean(1))
    bias = state["out_proj.bias"] if cfg.bias else torch.zeros(cfg.E)
    if isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], torch.Tensor) and bool(got[0].isnan().any()):
        raise AssertionError("the output holds NaN: a query with no key left must get zero attention (unit 2's "
                             "attention gives zeros there), so its output row is out_proj.bias")
    assert_mha(got, expected, lambda: mha_hints(cfg, state, args, kpm=kpm, mask=mask))
    assert_close(got[0][0], bias.double().expand(cfg.L, cfg.E), what="output of the fully padded batch element 0")


@pytest.mark.points(2)
@pytest.mark.aspect("mode")
@settings(max_examples=10)
@given(cfg=configs(), seed=seeds, p=st.sampled_from([0.2, 0.5, 0.9]))
def test_eval_mode_is_deterministic(subject, cfg, seed, p):
    """in eval mode dropout is off: any torch seed gives your result without dropout"""
    # Checks: M8, G1.
    state = cfg.state(seed)
    (x,) = cfg.inputs(seed + 3)
    kwargs = {"average_attn_weights": False}
    plain = pair(subject.run(Call(subject.unit, cfg.recipe(state), (x,), kwargs, train=False)).output)
    assert_roughly(plain[0], explicit_mha64(state, cfg.H, x)[0], what="output without dropout")
    recipe = cfg.recipe(state, dropout=p)
    for torch_seed in (1, 2):
        got = pair(subject.run(Call(subject.unit, recipe, (x,), kwargs, train=False, seed=torch_seed)).output)
        for index, what in ((1, "per-head weights"), (0, "output")):
            check_tensor(got[index], shape=plain[index].shape, what=f"{what} in eval mode")
            if not torch.equal(got[index], plain[index]):
                raise AssertionError(with_hint(translate_text(EVAL_CHANGED).format(
                    p=p, seed=torch_seed, what=translate_text(what)), EVAL_DROPOUT))


@pytest.mark.points(1)
@pytest.mark.aspect("mode")
@settings(max_examples=3)
@given(seed=seeds, p=st.sampled_from([0.25, 0.5]))
def test_dropout_acts_on_weights_in_training(subject, seed, p):
    """in training mode each attention weight is dropped with probability dropout and survivors scaled by 1/(1-p), against your weights without dropout; the returned weights are those after dropout"""
    # Checks: M8, A10.
    cfg = Config(2, 16, 16, 8, 2, 8, 8, True, False)
    state = cfg.state(seed)
    (x,) = cfg.inputs(seed + 3)
    kwargs = {"average_attn_weights": False}
    # The straightforward path: the same module without dropout, also in training mode.
    clean_out, clean = pair(subject.run(Call(subject.unit, cfg.recipe(state), (x,), kwargs, train=True, seed=seed)).output)
    assert_roughly(clean_out, explicit_mha64(state, cfg.H, x)[0], what="output without dropout")
    call = Call(subject.unit, cfg.recipe(state, dropout=p), (x,), kwargs, train=True, seed=seed)
    out, dropped = pair(subject.run(call).output)
    again, _ = pair(subject.run(call).output)
    check_tensor(dropped, shape=clean.shape, what="per-head weights in training mode")
    assert torch.equal(out, again), "two runs with the same torch seed differ: use torch's RNG"
    if torch.allclose(dropped, clean, atol=1e-5, rtol=1e-4):
        if torch.allclose(out, clean_out, atol=1e-5, rtol=1e-4):
            raise AssertionError(with_hint(translate_text(TRAINING_NOTHING_DROPPED).format(p=p),
                                           NO_DROPOUT))
        # The output changed with dropout, the returned weights did not.
        raise AssertionError(with_hint(translate_text(TRAINING_WEIGHTS_BEFORE_DROPOUT).format(p=p), AFTER_DROPOUT))
    rate = float((dropped == 0).double().mean())
    assert abs(rate - p) < 0.08, (
        f"with dropout={p} in training mode, {rate:.1%} of the attention weights were zero; expected about {p:.0%}")
    kept = dropped != 0
    assert_close(dropped[kept], clean[kept] / (1 - p), what=f"surviving weights with dropout={p}",
                 hints=[(clean[kept], "scale the surviving weights by 1 / (1 - p).")])


# -- contract and devices -------------------------------------------------------

@pytest.mark.points(2)
@pytest.mark.aspect("errors")
@given(H=st.integers(2, 5), Dh=st.integers(1, 4), extra=st.integers(1, 3), seed=seeds)
def test_indivisible_embed_dim_raises_value_error(subject, H, Dh, extra, seed):
    """embed_dim % num_heads != 0 raises ValueError naming both sizes (MultiHeadAttention and split_heads)"""
    # Checks: G8.
    E = H * Dh + min(extra, H - 1)  # not a multiple of H
    x = randn((2, 3, E), seed)
    assert_value_error(subject, Call(subject.unit, New("MultiHeadAttention", (E, H)), (x,)), (E, H), DIVISIBILITY)
    assert_value_error(subject, Call(subject.unit, "split_heads", (x, H)), (E, H), DIVISIBILITY)


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
@given(cfg=configs(cross=True), seed=seeds, extra=st.integers(1, 3))
def test_mismatched_sizes_raise_value_error(subject, cfg, seed, extra):
    """a query or key of the wrong width raises ValueError naming that width"""
    # Checks: G8.
    state = cfg.state(seed)
    q, k, v = cfg.inputs(seed + 3)
    wide_q = randn((cfg.B, cfg.L, cfg.E + extra), seed)
    wide_k = randn((cfg.B, cfg.S, cfg.kdim + extra), seed)
    right = Call(subject.unit, cfg.recipe(state), (q, k, v))
    assert_value_error(subject, replace(right, args=(wide_q, k, v)), (cfg.E + extra,), WIDTH, works=right)
    assert_value_error(subject, replace(right, args=(q, wide_k, v)), (cfg.kdim + extra,), WIDTH, works=right)


def assert_value_error(subject, call, mentions, advice, *, works=None):
    """``assert_raises(..., "ValueError", mentions=mentions)``, with ``advice`` when the call raised no
    ValueError at all: the check it needs is missing (one that raises names its sizes or not). With
    ``works``, the same call with the right sizes, only if that one runs (else the module itself fails)."""
    try:
        assert_raises(subject.run, call, "ValueError", mentions=mentions)
    except AssertionError as error:
        if works is not None:
            try:
                subject.run(works)
            except StudentError:
                raise error from None
        try:
            subject.run(call)
        except StudentError as raised:
            if raised.kind == "ValueError":
                raise error from None
        raise AssertionError(with_hint(str(error), advice)) from None


@pytest.mark.points(2)
@pytest.mark.aspect("device")
@settings(max_examples=3)
@given(cfg=configs(cross=True), seed=seeds, mask_kind=mask_kinds, causal=st.booleans())
def test_runs_on_meta_device(subject, cfg, seed, mask_kind, causal):
    """the module runs on the meta device with every mask (every tensor is created on the input's device), with the shapes of its CPU results"""
    # Checks: G3, G4.
    state = cfg.state(seed)
    args = cfg.inputs(seed + 3)
    kpm, mask = make_masks(cfg, seed, padding=True, mask_kind=mask_kind)
    kwargs = {"key_padding_mask": kpm, "attn_mask": mask, "is_causal": causal}
    reference = explicit_mha64(state, cfg.H, *args, key_padding_mask=kpm, attn_mask=mask, is_causal=causal)
    for average in (True, False):
        options = {**kwargs, "average_attn_weights": average}
        on_cpu = pair(forward(subject, cfg, state, args, options).output)  # meta tensors hold no values
        if average:
            assert_roughly(on_cpu[0], reference[0], what="output on the CPU")
        try:
            out, weights = pair(forward(subject, cfg, state, args, options, device="meta").output)
        except StudentError as error:
            if "cpu" not in error.message.lower():
                raise
            # Every input is on meta: a CPU tensor in the error is one the code created.
            raise AssertionError(with_hint(error.describe()[:300], DEVICE)) from None
        check_tensor(out, shape=on_cpu[0].shape, device_type="meta", what="output on meta")
        check_tensor(weights, shape=getattr(on_cpu[1], "shape", None), device_type="meta", what="weights on meta")
    split = subject.run(Call(subject.unit, "split_heads", (args[0], cfg.H), device="meta")).output
    check_tensor(split, shape=(cfg.B, cfg.H, cfg.L, cfg.Dh), device_type="meta", what="split_heads on meta")


@pytest.mark.points(2)
@pytest.mark.aspect("dtype")
@settings(max_examples=10)
@given(cfg=configs(cross=True), seed=seeds, dtype=st.sampled_from([torch.float64, torch.bfloat16]), padding=st.booleans(),
       causal=st.booleans())
def test_dtype_is_preserved(subject, cfg, seed, dtype, padding, causal):
    """a float64 or bfloat16 module and inputs give outputs and weights of that dtype, equal to your float32 results within that dtype's tolerance; float64 is computed in float64"""
    # Checks: G3, G4, G7.
    state = {k: v.to(dtype).float() for k, v in cfg.state(seed).items()}  # exactly representable in dtype
    args = cfg.inputs(seed + 3, dtype=dtype)
    kpm, _ = make_masks(cfg, seed, padding=padding, mask_kind=None, allow_empty=True)
    kwargs = {"key_padding_mask": kpm, "is_causal": causal}
    out, weights = explicit_mha64(state, cfg.H, *args, key_padding_mask=kpm, is_causal=causal)
    expected = (out, weights.mean(1))
    plain = pair(forward(subject, cfg, state, [a.float() for a in args], kwargs).output)
    assert_roughly(plain[0], expected[0], what="output of the float32 module")
    got = pair(forward(subject, cfg, state, args, kwargs, dtype=dtype).output)
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float64 else dict(atol=6e-2, rtol=6e-2)  # float32's, bfloat16's
    for index, what in ((1, "weights"), (0, "output")):
        if dtype == torch.float64 and isinstance(got[index], torch.Tensor) and computed_in_float32(got[index], expected[index]):
            # Computed in float32 and cast up: against the float64 answer it fails with the precision hint.
            assert_close(got[index], expected[index], what=what, dtype=dtype, **tolerance(dtype))
        assert_close(got[index], plain[index], what=f"{what} against your float32 {what}", dtype=dtype, **tol)


@pytest.mark.points(0)
@pytest.mark.aspect("device")
@settings(max_examples=5)
@given(cfg=configs(cross=True), seed=seeds, causal=st.booleans(), mask_kind=mask_kinds)
def test_cpu_and_cuda_agree(subject, cfg, seed, causal, mask_kind):
    """CPU and CUDA give the same result (TF32 off); informational, worth no points"""
    # Checks: G4.
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    state = cfg.state(seed)
    args = cfg.inputs(seed + 3)
    kpm, mask = make_masks(cfg, seed, padding=True, mask_kind=mask_kind, allow_empty=True)
    kwargs = {"key_padding_mask": kpm, "attn_mask": mask, "is_causal": causal}
    cpu = pair(forward(subject, cfg, state, args, kwargs).output)
    reference = explicit_mha64(state, cfg.H, *args, key_padding_mask=kpm, attn_mask=mask, is_causal=causal)
    assert_roughly(cpu[0], reference[0], what="output on the CPU")
    cuda = forward(subject, cfg, state, args, kwargs, device="cuda").output
    check_tensor(cuda[0], device_type="cuda", what="output of a CUDA call")
    assert_mha(tuple(t.cpu() for t in cuda), cpu, [])


@pytest.mark.points(2)
@settings(max_examples=6)
@given(cfg=configs(cross=True, max_heads=3, max_len=4, max_batch=2, bias=None), seed=seeds, padding=st.booleans(),
       mask_kind=mask_kinds, causal=st.booleans())
def test_gradients_match_finite_differences(subject, cfg, seed, padding, mask_kind, causal):
    """float64 outputs and weights are right to float64 precision, and the gradients with respect to query, key and value agree with finite differences (float64 gradcheck)"""
    # Checks: G7.
    if causal and cfg.S < cfg.L:
        cfg = Config(cfg.B, cfg.L, cfg.L, cfg.E, cfg.H, cfg.kdim, cfg.vdim, cfg.bias, cfg.cross)
    state = cfg.state(seed)
    args = list(cfg.inputs(seed + 3, dtype=torch.float64))
    kpm, mask = make_masks(cfg, seed, padding=padding, mask_kind=mask_kind)
    if mask is not None and mask.is_floating_point():
        mask = mask.double()
    recipe = cfg.recipe(state)

    def build(tensors, grad_outputs):
        kwargs = {"key_padding_mask": kpm, "attn_mask": mask, "is_causal": causal}
        return Call(subject.unit, recipe, tuple(tensors), kwargs, dtype=torch.float64, grad_outputs=grad_outputs)

    out, weights = explicit_mha64(state, cfg.H, *args, key_padding_mask=kpm, attn_mask=mask, is_causal=causal)
    check_gradients_of(subject, build, args, seed=seed, expect=lambda base: assert_mha(
        base, (out, weights.mean(1)), dtype=torch.float64, **tolerance(torch.float64)))


@pytest.mark.points(1)
@pytest.mark.aspect("layout")
@settings(max_examples=10)
@given(cfg=configs(cross=True), seed=seeds, mask_kind=mask_kinds, causal=st.booleans())
def test_noncontiguous_inputs_left_unmodified(subject, cfg, seed, mask_kind, causal):
    """non-contiguous inputs and masks give your results for contiguous ones, and no input is modified in place"""
    # Checks: G6.
    if causal and cfg.S < cfg.L:
        cfg = Config(cfg.B, cfg.L, cfg.L, cfg.E, cfg.H, cfg.kdim, cfg.vdim, cfg.bias, cfg.cross)
    state = cfg.state(seed)
    args = cfg.inputs(seed + 3)
    kpm, mask = make_masks(cfg, seed, padding=True, mask_kind=mask_kind, allow_empty=True)
    kwargs = {"key_padding_mask": kpm, "attn_mask": mask, "is_causal": causal}
    plain = pair(forward(subject, cfg, state, args, kwargs).output)
    reference = explicit_mha64(state, cfg.H, *args, key_padding_mask=kpm, attn_mask=mask, is_causal=causal)
    assert_roughly(plain[0], reference[0], what="output of contiguous inputs")
    result = forward(subject, cfg, state, args, kwargs, noncontiguous=True)
    try:
        assert_unmodified(result)
    except AssertionError as error:
        raise AssertionError(with_hint(str(error), IN_PLACE)) from None
    got = pair(result.output)
    for index, what in ((1, "weights"), (0, "output")):
        assert_close(got[index], plain[index], what=f"{what} of non-contiguous inputs against contiguous ones")
