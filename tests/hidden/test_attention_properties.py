"""Hidden properties of unit 2, scaled dot-product attention.

Each test's docstring is the property students read; its points are marked.
Tests reach the student's code only through ``subject``.
"""
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings, strategies as st

from autograder.testing.compare import N_, assert_raises, assert_roughly, assert_unmodified, check_tensor, with_hint
from autograder.core.i18n import translate_text
from autograder.core.protocol import Call, StudentError
from anchors import assert_close, check_gradients_of, computed_in_float32, tolerance
from oracles_attention import attention64, causal_allowed, softmax64
from tensors import QKVShapes, batch_dims, permutation, rand_bool, randn, seeds

pytestmark = pytest.mark.unit("attention")
# The checks a constant or shape-only answer may pass, and so the only points it may earn
# (tests/project/test_nothing_for_nothing.py): shapes, structure and argument errors.
SHAPE_CHECKS = (
    "test_attention_public.py::test_attention_shapes",
    "test_attention_public.py::test_wrong_widths_raise_value_error",
    "test_attention_properties.py::test_bad_shapes_raise_value_error",
)


# Failure messages the properties below raise (translated where raised: translate_text).
NOTHING_DROPPED = N_("with dropout_p={p} no weight was dropped")
WEIGHTS_BEFORE_DROPOUT = N_("with dropout_p={p} the returned weights are those before dropout")
SEEDS_DIFFER = N_("with dropout_p=0, two torch seeds gave different {what}")


@st.composite
def qkv_shapes(draw, *, min_len=1, max_len=6, max_dim=8):
    batch = draw(batch_dims)
    L, S = draw(st.integers(min_len, max_len)), draw(st.integers(min_len, max_len))
    E, Ev = draw(st.integers(1, max_dim)), draw(st.integers(1, max_dim))
    return QKVShapes(batch, L, S, E, Ev)


def make_qkv(shapes, seed, dtype=torch.float32):
    batch, L, S, E, Ev = shapes
    return (
        randn((*batch, L, E), seed, dtype=dtype),
        randn((*batch, S, E), seed + 1, dtype=dtype),
        randn((*batch, S, Ev), seed + 2, dtype=dtype),
    )


FINITE = "mask with booleans or -inf: a fully masked row must give zeros (a large negative score gives it uniform weights)."
AFTER_DROPOUT = N_("the returned weights are the ones after dropout, zeroed and rescaled by 1 / (1 - p): the ones "
                   "multiplied with value, as nn.MultiheadAttention returns them (API page, unit 2).")
# The scale takes the width of query and key (E), which value's (Ev) need not equal.
VALUE_WIDTH = "the scale is 1/sqrt(E), E the width of query and key, not Ev, the width of value."
MASK_AFTER = ("mask the scores before the softmax (masked keys to -inf), not the weights after it: each row of weights "
              "must sum to 1 over the keys it may attend.")
NORMALIZE_DIM = "normalize along the `dim` argument, not always the last dim."
NO_EXP = "softmax exponentiates before it normalizes: exp(x - max) / sum(exp(x - max)), not x / sum(x)."
NOT_NORMALIZED = "divide the exponentials by their sum along `dim`, so that each slice sums to 1."
# Advice proven by the check that fails, not by a wrong answer's value (with_hint).
SIZE_CHECK = N_("check the sizes before computing: query's and key's last dims (E) must agree, else raise "
                "ValueError naming both.")
IN_PLACE = N_("compute new tensors instead of writing into an argument (mul_, masked_fill_, logical_not_, +=): the "
              "caller's tensors must not change.")
DEVICE = N_("create every tensor your code makes (masks included) on the input's device: device=query.device.")
RANDOM_WITHOUT_DROPOUT = N_("with dropout_p=0 nothing random may happen: apply dropout only when dropout_p > 0.")
KEEP_PROBABILITY = "dropout_p is the probability of dropping a weight, not of keeping it."
SOFTMAX_DTYPE = N_("softmax returns its input's dtype: compute in a wider dtype if you like, then cast back.")
NO_GRADIENT = ("no gradient reaches query and key: the weights must stay in the graph (no .detach(), .data or "
               "torch.no_grad() on them).")


def attention_hints(q, k, v, mask=None, is_causal=False):
    """Known wrong answers, each with the advice that fixes it."""
    E, Ev = q.shape[-1], v.shape[-1]
    wrong = [
        (dict(scale=1.0), "did you forget to divide the scores by sqrt(d_k)?"),
        (dict(scale=1.0 / E), "the scale is 1/sqrt(E), not 1/E."),
        (dict(scale=1.0 / math.sqrt(Ev)), VALUE_WIDTH),
        (dict(softmax_dim=-2), "softmax must normalize over the keys (the last dim), not over the queries."),
        (dict(finite=True), FINITE),
    ]
    if mask is not None or is_causal:
        wrong.append((dict(mask_after_softmax=True), MASK_AFTER))
    if mask is not None and mask.dtype == torch.bool:
        wrong.append((dict(mask=~mask), "True in a boolean mask means 'may attend', not 'masked out'."))
    if mask is not None:
        wrong.append((dict(mask=None), "attn_mask was ignored."))
    if mask is not None and mask.dtype != torch.bool:
        wrong.append((dict(mask=mask > 0), "a float mask is added to the scores, not used as a boolean."))
    if is_causal:
        wrong.append((dict(causal_top_left=True), "align the causal mask bottom-right: query i sits at position i + S - L."))
        wrong.append((dict(causal_strict=True), "query i may attend its own position: j <= i + S - L, the diagonal included."))
        wrong.append((dict(is_causal=False), "is_causal=True was ignored: apply the causal mask."))
    else:
        wrong.append((dict(is_causal=True), "is_causal=False: apply no causal mask unless it is asked for."))
    hints = []
    for change, text in wrong:
        options = dict(mask=mask, is_causal=is_causal)
        options.update(change)
        out, weights = attention64(q, k, v, options.pop("mask"), **options)
        hints.append(((out, weights), text))
    return hints


def pair(got):
    """``got``, checked to be what scaled_dot_product_attention returns: a tuple (output, weights)."""
    if not (isinstance(got, tuple) and len(got) == 2):
        raise AssertionError("scaled_dot_product_attention must return a tuple (output, weights)")
    return got


def assert_attention(got, expected, hints, *, atol=1e-5, rtol=1e-4, dtype=torch.float32):
    """``got`` is (output, weights) matching ``expected``; ``hints`` a list or a function returning it."""
    pair(got)
    for index, what in ((1, "weights"), (0, "output")):  # weights first: their errors explain the output's
        assert_close(
            got[index], expected[index], atol=atol, rtol=rtol, what=what, dtype=dtype,
            hints=lambda index=index: [(wrong[index], text) for wrong, text in (hints() if callable(hints) else hints)],
        )


# -- softmax ----------------------------------------------------------------

@pytest.mark.points(2)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), seed=seeds, data=st.data())
def test_softmax_matches_reference(subject, shape, seed, data):
    """softmax matches a float64 reference along any dim"""
    # Checks: A1.
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    x = randn(shape, seed, scale=3.0)
    assert_close(subject.call("softmax", x, dim=dim), softmax64(x, dim), what="softmax(x)", hints=lambda: softmax_hints(x, dim))


def softmax_hints(x, dim):
    """Known wrong softmaxes of ``x`` along ``dim``, each with the advice that fixes it."""
    x = x.double()
    shifted = (x - x.amax(dim, keepdim=True)).exp()
    sums = x.sum(dim, keepdim=True)
    return [(softmax64(x, -1), NORMALIZE_DIM),
            (shifted / shifted.sum(-1, keepdim=True), NORMALIZE_DIM),  # the maximum along dim, the sum along the last
            (shifted, NOT_NORMALIZED),
            (x / sums, NO_EXP),
            (x / torch.where(sums > 0, sums, torch.ones_like(sums)), NO_EXP)]  # a sum <= 0 guarded, as for an empty slice


@pytest.mark.points(1)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), seed=seeds, shift=st.floats(-50, 50))
def test_softmax_shift_invariance(subject, shape, seed, shift):
    """softmax(x + c) equals softmax(x)"""
    # Checks: A1.
    x = randn(shape, seed)
    base = subject.call("softmax", x)
    assert_close(base, softmax64(x), what="softmax(x)")  # a constant answer is shift-invariant too
    assert_close(subject.call("softmax", x + shift), base, what="softmax(x + c)")


@pytest.mark.points(1)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), seed=seeds)
def test_softmax_rows_sum_to_one(subject, shape, seed):
    """softmax's rows are non-negative and sum to 1"""
    # Checks: A1.
    x = randn(shape, seed, scale=4.0)
    out = check_tensor(subject.call("softmax", x), shape=shape, what="softmax(x)")
    assert_close(out, softmax64(x), what="softmax(x)")  # a uniform answer sums to 1 too
    assert_close(out.double().sum(-1), torch.ones(shape[:-1], dtype=torch.float64), what="row sums", dtype=torch.float64)
    assert bool((out >= 0).all()), "softmax returned negative entries"


@pytest.mark.points(2)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), seed=seeds, magnitude=st.sampled_from([1e4, 3e4, 1e6]))
def test_softmax_finite_for_large_inputs(subject, shape, seed, magnitude):
    """softmax is finite and correct for inputs of magnitude 1e4 and more"""
    # Checks: A1.
    x = randn(shape, seed, scale=magnitude)
    assert_close(subject.call("softmax", x), softmax64(x), what="softmax(large x)",
                 hints=[(torch.full(shape, float("nan")), "subtract each row's maximum before exp: exp(1e4) overflows.")])


@pytest.mark.points(2)
@given(rows=st.integers(1, 4), cols=st.integers(1, 5), seed=seeds)
def test_softmax_all_neg_inf_row_gives_zeros(subject, rows, cols, seed):
    """softmax of an all -inf row is all zeros, not NaN"""
    # Checks: A2.
    x = randn((rows, cols), seed)
    x[0] = float("-inf")
    if cols > 1:
        x[-1, 0] = float("-inf")  # a partly masked row still normalizes over the rest
    assert_close(subject.call("softmax", x), softmax64(x), what="softmax with -inf rows",
                 hints=[(softmax64(x).masked_fill(torch.isinf(x).all(-1, keepdim=True), float("nan")),
                         "an all -inf row gives NaN (0/0): return zeros there instead.")])


# -- causal_mask ------------------------------------------------------------

@pytest.mark.points(1)
@given(L=st.integers(1, 8))
def test_causal_mask_square_is_lower_triangle(subject, L):
    """causal_mask(L) is the (L, L) lower triangle, True = may attend"""
    # Checks: A3, A4.
    got = subject.call("causal_mask", L)
    check_tensor(got, shape=(L, L), dtype=torch.bool, what=f"causal_mask({L})")
    assert_close(got, causal_allowed(L, L), atol=0, rtol=0, what=f"causal_mask({L}) (1 = True = may attend)",
                 hints=causal_mask_hints(L, L))


def causal_mask_hints(L, S):
    """Known wrong causal masks, each with the advice that fixes it."""
    i, j = torch.arange(L)[:, None], torch.arange(S)[None]
    # (An inverted mask is no proven bug: at L = S = 1, where every counterexample shrinks to, it is the strict one.)
    return [(j < i + S - L, "query i may attend its own position: j <= i + S - L, the diagonal included."),
            (j <= i, "that is top-left alignment (j <= i); a decoder with a cache needs bottom-right.")]


@pytest.mark.points(2)
@given(L=st.integers(1, 6), S=st.integers(1, 8))
def test_causal_mask_aligns_bottom_right(subject, L, S):
    """causal_mask(L, S) aligns bottom-right: query i sees keys j <= i + S - L"""
    # Checks: A3, A4.
    assume(S != L + 1)  # there top-left alignment and a hidden diagonal agree: no hint could tell them apart
    got = check_tensor(subject.call("causal_mask", L, S), shape=(L, S), dtype=torch.bool, what=f"causal_mask({L}, {S})")
    assert_close(got, causal_allowed(L, S), atol=0, rtol=0, what=f"causal_mask({L}, {S}) (1 = True = may attend)",
                 hints=causal_mask_hints(L, S))


# -- scaled_dot_product_attention: values -----------------------------------

@pytest.mark.points(3)
@given(shapes=qkv_shapes(), seed=seeds, masked=st.booleans(), is_causal=st.booleans())
def test_attention_matches_reference(subject, shapes, seed, masked, is_causal):
    """attention matches a float64 reference (any batch dims, bool masks, is_causal)"""
    # Checks: A5, A7, A8, G2.
    q, k, v = make_qkv(shapes, seed)
    batch, L, S, _, _ = shapes
    mask = rand_bool((L, S), seed + 3) if masked else None
    got = subject.run(Call(subject.unit, "scaled_dot_product_attention", (q, k, v, mask), {"is_causal": is_causal})).output
    assert_attention(got, attention64(q, k, v, mask, is_causal=is_causal), attention_hints(q, k, v, mask, is_causal))


@pytest.mark.points(2)
@given(shapes=qkv_shapes(), seed=seeds, use_mask=st.booleans(), causal=st.booleans())
def test_attention_matches_torch(subject, shapes, seed, use_mask, causal):
    """attention's output equals torch's F.scaled_dot_product_attention where their conventions coincide"""
    # Checks: A5, A7, G1.
    batch, L, S, E, Ev = shapes
    if causal:
        S = L  # torch aligns is_causal top-left: the conventions coincide only for L == S
    q, k, v = make_qkv((batch, L, S, E, Ev), seed)
    mask = None
    if use_mask and not causal:
        mask = rand_bool((L, S), seed + 3)
        mask[:, 0] = True  # every query sees a key: torch gives NaN otherwise
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, is_causal=causal)
    got = subject.call("scaled_dot_product_attention", q, k, v, mask, is_causal=causal)
    assert_close(got[0], expected, what="output")


@pytest.mark.points(1)
@given(shapes=qkv_shapes(), seed=seeds)
def test_output_is_weights_times_values(subject, shapes, seed):
    """output equals weights @ value, and each weight row sums to 1"""
    # Checks: A5.
    q, k, v = make_qkv(shapes, seed)
    out, weights = subject.call("scaled_dot_product_attention", q, k, v)
    check_tensor(weights, shape=(*q.shape[:-1], k.shape[-2]), dtype=torch.float32, what="weights")
    assert_close(weights, attention64(q, k, v)[1], what="weights")  # uniform weights pass the rest
    assert_close(out, weights.double() @ v.double(), what="output vs weights @ value")
    assert_close(weights.double().sum(-1), torch.ones(weights.shape[:-1], dtype=torch.float64), what="weight row sums", dtype=torch.float64)


@pytest.mark.points(2)
@given(shapes=qkv_shapes(), seed=seeds)
def test_float_mask_is_added(subject, shapes, seed):
    """a float attn_mask is added to the scores (-inf entries exclude keys)"""
    # Checks: A7.
    q, k, v = make_qkv(shapes, seed)
    _, L, S, _, _ = shapes
    mask = randn((L, S), seed + 4, scale=2.0)
    mask[rand_bool((L, S), seed + 5, p_true=0.3) & (torch.arange(S) > 0)] = float("-inf")
    expected = attention64(q, k, v, mask)
    hints = attention_hints(q, k, v, mask)
    assert_attention(subject.call("scaled_dot_product_attention", q, k, v, mask), expected, hints)


@pytest.mark.points(2)
@given(shapes=qkv_shapes(min_len=2), seed=seeds, float_mask=st.booleans())
def test_fully_masked_rows_give_zeros(subject, shapes, seed, float_mask):
    """a query with no key it may attend gets zero output and zero weights, not NaN"""
    # Checks: A9.
    q, k, v = make_qkv(shapes, seed)
    _, L, S, _, _ = shapes
    allowed = rand_bool((L, S), seed + 3)
    allowed[0] = False
    mask = allowed if not float_mask else torch.zeros(L, S).masked_fill(~allowed, float("-inf"))
    assert_attention(subject.call("scaled_dot_product_attention", q, k, v, mask), attention64(q, k, v, mask),
                     lambda: attention_hints(q, k, v, mask))


# -- masks and causality -----------------------------------------------------

@pytest.mark.points(2)
@given(shapes=qkv_shapes(), seed=seeds)
def test_masked_keys_have_no_effect(subject, shapes, seed):
    """changing the content of masked-out keys and values changes nothing"""
    # Checks: A7.
    q, k, v = make_qkv(shapes, seed)
    _, L, S, _, _ = shapes
    mask = rand_bool((L, S), seed + 3)
    hidden = ~mask.any(0)  # keys no query may see
    k2, v2 = k.clone(), v.clone()
    k2[..., hidden, :] = randn(k2[..., hidden, :].shape, seed + 7, scale=10.0)
    v2[..., hidden, :] = randn(v2[..., hidden, :].shape, seed + 8, scale=10.0)
    a = subject.call("scaled_dot_product_attention", q, k, v, mask)
    b = subject.call("scaled_dot_product_attention", q, k2, v2, mask)
    assert_close(a[0], attention64(q, k, v, mask)[0], what="output")  # a constant answer ignores every key
    assert_close(b[0], a[0], what="output after changing masked keys")


@pytest.mark.points(2)
@given(shapes=qkv_shapes(), seed=seeds, data=st.data())
def test_causal_no_future_leakage_by_perturbation(subject, shapes, seed, data):
    """with is_causal, changing future keys and values leaves earlier outputs unchanged"""
    # Checks: A8.
    batch, L, _, E, Ev = shapes
    q, k, v = make_qkv((batch, L, L, E, Ev), seed)
    t = data.draw(st.integers(0, L - 1), label="t")
    k2, v2 = k.clone(), v.clone()
    k2[..., t + 1:, :] += randn(k2[..., t + 1:, :].shape, seed + 9, scale=5.0)
    v2[..., t + 1:, :] += randn(v2[..., t + 1:, :].shape, seed + 10, scale=5.0)
    a = subject.call("scaled_dot_product_attention", q, k, v, is_causal=True)[0]
    b = subject.call("scaled_dot_product_attention", q, k2, v2, is_causal=True)[0]
    check_tensor(b, shape=(*batch, L, Ev), what="output")
    assert_close(a, attention64(q, k, v, is_causal=True)[0], what="output with is_causal")  # zeros never leak
    assert_close(b[..., : t + 1, :], a[..., : t + 1, :], atol=1e-6, what=f"outputs at positions <= {t} after changing later keys")


@pytest.mark.points(2)
@given(L=st.integers(2, 6), E=st.integers(1, 4), seed=seeds, data=st.data())
def test_causal_jacobian_is_zero_on_the_future(subject, L, E, seed, data):
    """with is_causal, float64 results are right to float64 precision and the gradient of earlier outputs with respect to later inputs is exactly zero"""
    # Checks: A8, G7.
    t = data.draw(st.integers(0, L - 2), label="t")
    q, k, v = make_qkv(((1,), L, L, E, E), seed, dtype=torch.float64)
    upstream = randn((1, L, E), seed + 11, dtype=torch.float64)
    upstream[:, t + 1:] = 0.0  # only outputs at positions <= t send gradient
    result = subject.run(Call(subject.unit, "scaled_dot_product_attention", (q, k, v), {"is_causal": True},
                              grad_outputs=(upstream, None)))
    assert_attention(result.output, attention64(q, k, v, is_causal=True), lambda: attention_hints(q, k, v, None, True),
                     dtype=torch.float64, **tolerance(torch.float64))
    for name, grad in zip("qkv", result.arg_grads):
        check_tensor(grad, shape=(1, L, E), what=f"gradient of {name}")
        future = grad[:, t + 1:]
        if bool((future != 0).any()):
            raise AssertionError(f"outputs at positions <= {t} have a non-zero gradient with respect to {name} at later positions")


@pytest.mark.points(2)
@given(shapes=qkv_shapes(), seed=seeds)
def test_causal_alignment_when_lengths_differ(subject, shapes, seed):
    """is_causal aligns bottom-right when L != S (query i sees keys j <= i + S - L)"""
    # Checks: A8.
    assume(shapes[2] != shapes[1] + 1)  # there top-left alignment and a hidden diagonal agree
    q, k, v = make_qkv(shapes, seed)
    got = subject.call("scaled_dot_product_attention", q, k, v, is_causal=True)
    assert_attention(got, attention64(q, k, v, is_causal=True), attention_hints(q, k, v, None, True))


@pytest.mark.points(2)
@given(shapes=qkv_shapes(), seed=seeds, float_mask=st.booleans())
def test_causal_combines_with_mask(subject, shapes, seed, float_mask):
    """is_causal and attn_mask both apply when given together"""
    # Checks: A8.
    # One key only: no causal mask, a top-left one and a -1e9 fill give one answer, so no hint could name the bug.
    assume(shapes.S > 1)
    q, k, v = make_qkv(shapes, seed)
    _, L, S, _, _ = shapes
    mask = rand_bool((L, S), seed + 3)
    if float_mask:
        mask = randn((L, S), seed + 6).masked_fill(~mask, float("-inf"))
    expected = attention64(q, k, v, mask, is_causal=True)
    hints = [(attention64(q, k, v, mask), "is_causal=True was ignored: apply the causal mask."),
             (attention64(q, k, v, None, is_causal=True), "attn_mask was ignored because is_causal was set: apply both."),
             *[(wrong, text) for wrong, text in attention_hints(q, k, v, mask, True) if "ignored" not in text]]
    assert_attention(subject.call("scaled_dot_product_attention", q, k, v, mask, is_causal=True), expected, hints)


# -- permutations and scaling -----------------------------------------------

@pytest.mark.points(1)
@given(shapes=qkv_shapes(), seed=seeds)
def test_key_value_permutation_invariance(subject, shapes, seed):
    """permuting keys and values together leaves the output unchanged"""
    # Checks: A5.
    q, k, v = make_qkv(shapes, seed)
    perm = permutation(k.shape[-2], seed)
    a, wa = subject.call("scaled_dot_product_attention", q, k, v)
    b, wb = subject.call("scaled_dot_product_attention", q, k[..., perm, :], v[..., perm, :])
    assert_attention((a, wa), attention64(q, k, v), [])  # a constant answer is invariant too
    assert_close(b, a, what="output after permuting keys and values")
    assert_close(wb, wa[..., perm], what="weights after permuting keys and values")


@pytest.mark.points(1)
@given(shapes=qkv_shapes(), seed=seeds)
def test_query_permutation_equivariance(subject, shapes, seed):
    """permuting the queries permutes the output rows the same way"""
    # Checks: A5.
    q, k, v = make_qkv(shapes, seed)
    perm = permutation(q.shape[-2], seed)
    a, _ = subject.call("scaled_dot_product_attention", q, k, v)
    b, _ = subject.call("scaled_dot_product_attention", q[..., perm, :], k, v)
    assert_close(a, attention64(q, k, v)[0], what="output")  # a constant answer is equivariant too
    assert_close(b, a[..., perm, :], what="output after permuting queries")


@pytest.mark.points(2)
@given(shapes=qkv_shapes(), seed=seeds)
def test_scale_is_one_over_sqrt_dim(subject, shapes, seed):
    """the default scale is 1/sqrt(E): duplicating every feature of q and k acts like scale sqrt(2/E)"""
    # Checks: A6.
    q, k, v = make_qkv(shapes, seed)
    E = q.shape[-1]
    q2, k2 = torch.cat([q, q], -1), torch.cat([k, k], -1)  # every dot product doubles
    doubled = subject.call("scaled_dot_product_attention", q2, k2, v)
    rescaled = attention64(q, k, v, scale=math.sqrt(2.0 / E))
    hints = [(attention64(q, k, v, scale=2.0), "did you forget to divide the scores by sqrt(d_k)?"),
             (attention64(q, k, v, scale=1.0 / E), "the scale is 1/sqrt(E), not 1/E."),
             (attention64(q, k, v, scale=2.0 / math.sqrt(v.shape[-1])), VALUE_WIDTH)]
    assert_attention(doubled, rescaled, hints)


@pytest.mark.points(1)
@given(shapes=qkv_shapes(), seed=seeds, scale=st.floats(0.05, 3.0))
def test_custom_scale_is_honoured(subject, shapes, seed, scale):
    """an explicit scale replaces 1/sqrt(E)"""
    # Checks: A6.
    q, k, v = make_qkv(shapes, seed)
    got = subject.call("scaled_dot_product_attention", q, k, v, scale=scale)
    assert_attention(got, attention64(q, k, v, scale=scale),
                     [(attention64(q, k, v), "the `scale` argument was ignored.")])


# -- dropout ------------------------------------------------------------------

@pytest.mark.points(2)
@pytest.mark.aspect("mode")
@settings(max_examples=3)
@given(p=st.sampled_from([0.1, 0.25, 0.5]), seed=seeds)
def test_dropout_rate_and_rescale(subject, p, seed):
    """dropout zeroes each weight with probability p and scales the survivors by 1/(1-p), against your weights without dropout, seeded; the returned weights are those after dropout, the ones multiplied with value"""
    # Checks: A10.
    q, k, v = make_qkv(((4,), 32, 48, 8, 8), seed)
    # Another torch seed than the dropout call's: dropout applied where none was asked for cannot match it.
    _, clean = pair(subject.run(Call(subject.unit, "scaled_dot_product_attention", (q, k, v), seed=seed + 1)).output)
    assert_roughly(clean, attention64(q, k, v)[1], what="weights without dropout")
    call = Call(subject.unit, "scaled_dot_product_attention", (q, k, v), {"dropout_p": p}, seed=seed)
    out, dropped = pair(subject.run(call).output)
    again, _ = pair(subject.run(call).output)
    check_tensor(dropped, shape=clean.shape, what="weights with dropout")
    assert torch.equal(out, again), "two runs with the same torch seed differ: use torch's RNG (e.g. torch.rand_like)"
    if torch.allclose(dropped, clean, atol=1e-5, rtol=1e-4):
        if torch.allclose(out.double(), dropped.double() @ v.double(), atol=1e-5, rtol=1e-4):
            raise AssertionError(translate_text(NOTHING_DROPPED).format(p=p))
        # The output was computed with dropped weights, but the weights returned are those before dropout.
        raise AssertionError(with_hint(translate_text(WEIGHTS_BEFORE_DROPOUT).format(p=p),
                                       AFTER_DROPOUT))
    zero_rate = (dropped == 0).double().mean()
    assert_close(zero_rate, torch.tensor(p, dtype=torch.float64), atol=0.03, rtol=0,
                 what=f"fraction of the weights zeroed with dropout_p={p}",
                 hints=[(torch.tensor(1 - p, dtype=torch.float64), KEEP_PROBABILITY)])
    kept = dropped != 0
    assert_close(dropped[kept], clean[kept] / (1 - p), what=f"surviving weights with dropout_p={p}",
                 hints=[(clean[kept], "scale the surviving weights by 1 / (1 - p)."),
                        (clean[kept] * (1 - p), "scale the surviving weights by 1 / (1 - p), not (1 - p)."),
                        (clean[kept] / p, "scale the surviving weights by 1 / (1 - p), the keep probability, not 1 / p.")])
    assert_close(out, dropped.double() @ v.double(), what=f"output with dropout_p={p} against the returned weights @ value")


@pytest.mark.points(1)
@pytest.mark.aspect("mode")
@given(shapes=qkv_shapes(), seed=seeds)
def test_no_dropout_no_randomness(subject, shapes, seed):
    """with dropout_p=0 nothing random happens: any torch seed gives the same result"""
    # Checks: A11.
    q, k, v = make_qkv(shapes, seed)
    a = pair(subject.run(Call(subject.unit, "scaled_dot_product_attention", (q, k, v), seed=1)).output)
    b = pair(subject.run(Call(subject.unit, "scaled_dot_product_attention", (q, k, v), {"dropout_p": 0.0}, seed=2)).output)
    assert_roughly(a[1], attention64(q, k, v)[1], what="weights")  # a constant answer is deterministic too
    for index, what in ((1, "weights"), (0, "output")):
        check_tensor(b[index], shape=a[index].shape, what=what)
        if not torch.equal(a[index], b[index]):
            raise AssertionError(with_hint(translate_text(SEEDS_DIFFER).format(
                what=translate_text(what)), RANDOM_WITHOUT_DROPOUT))


# -- gradients, dtypes, devices ----------------------------------------------

@pytest.mark.points(2)
@settings(max_examples=8)
@given(shapes=qkv_shapes(max_len=4, max_dim=4), seed=seeds, is_causal=st.booleans())
def test_gradients_match_finite_differences(subject, shapes, seed, is_causal):
    """float64 outputs and weights are right to float64 precision, and the gradients with respect to query, key and value agree with finite differences (float64 gradcheck)"""
    # Checks: A5, G7.
    q, k, v = make_qkv(shapes, seed, dtype=torch.float64)
    mask = rand_bool(shapes[1:3], seed + 3) | (torch.arange(shapes[2]) == shapes[2] - 1)

    def build(tensors, grad_outputs):
        return Call(subject.unit, "scaled_dot_product_attention", (*tensors, mask), {"is_causal": is_causal}, grad_outputs=grad_outputs)

    expected = attention64(q, k, v, mask, is_causal=is_causal)
    right = []  # the output was right, so a failure is the gradients'

    def expect(base):
        assert_attention(base, expected, [], dtype=torch.float64, **tolerance(torch.float64))
        right.append(True)

    try:
        check_gradients_of(subject, build, [q, k, v], seed=seed, expect=expect)
    except AssertionError:
        if right:
            assert_query_and_key_gradients(subject, build, (q, k, v), mask, is_causal, seed)
        raise  # query's and key's gradients were right here: the finite differences' message tells the rest


def assert_query_and_key_gradients(subject, build, tensors, mask, is_causal, seed):
    """The gradients of query and key for one upstream gradient equal the float64 reference's; a zero
    gradient where the reference has none is weights cut from the graph."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    reference, _ = attention64(*leaves, mask, is_causal=is_causal)
    upstream = randn(reference.shape, seed + 12, dtype=torch.float64)
    wanted = torch.autograd.grad(reference, leaves, upstream)
    got = subject.run(build(list(tensors), (upstream, None))).arg_grads
    for name, grad, want in zip(("query", "key"), got, wanted):
        assert_close(grad, want, atol=1e-7, rtol=1e-5, what=f"gradient of {name}", dtype=torch.float64,
                     hints=[(torch.zeros_like(want), NO_GRADIENT)])


@pytest.mark.points(2)
@pytest.mark.aspect("dtype")
@given(shapes=qkv_shapes(), seed=seeds, dtype=st.sampled_from([torch.float64, torch.bfloat16]), is_causal=st.booleans())
def test_dtype_is_preserved(subject, shapes, seed, dtype, is_causal):
    """float64 and bfloat16 inputs give outputs and weights (and softmax results) of the same dtype, equal to your float32 results within that dtype's tolerance; float64 is computed in float64"""
    # Checks: G3, G4, G7.
    q, k, v = make_qkv(shapes, seed, dtype=dtype)
    probabilities = check_tensor(subject.call("softmax", q), what=f"softmax of a {dtype} tensor")
    try:
        check_tensor(probabilities, dtype=dtype, what=f"softmax of a {dtype} tensor")
    except AssertionError as error:
        raise AssertionError(with_hint(str(error), SOFTMAX_DTYPE)) from None
    expected = attention64(q, k, v, is_causal=is_causal)
    plain = pair(subject.call("scaled_dot_product_attention", q.float(), k.float(), v.float(), is_causal=is_causal))
    assert_roughly(plain[1], expected[1], what="weights of the float32 inputs")
    got = pair(subject.call("scaled_dot_product_attention", q, k, v, is_causal=is_causal))
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float64 else dict(atol=3e-2, rtol=3e-2)  # float32's, bfloat16's
    for index, what in ((1, "weights"), (0, "output")):
        if dtype == torch.float64 and isinstance(got[index], torch.Tensor) and computed_in_float32(got[index], expected[index]):
            # Computed in float32 and cast up: against the float64 answer it fails with the precision hint.
            assert_close(got[index], expected[index], what=what, dtype=dtype, **tolerance(dtype))
        assert_close(got[index], plain[index], what=f"{what} against your float32 {what}", dtype=dtype, **tol)


@pytest.mark.points(2)
@pytest.mark.aspect("device")
@settings(max_examples=5)
@given(shapes=qkv_shapes(), seed=seeds)
def test_runs_on_meta_device(subject, shapes, seed):
    """the whole unit runs on the meta device (every tensor is created on the input's device), with the shapes of its CPU results"""
    # Checks: A3, G3, G4.
    q, k, v = make_qkv(shapes, seed)
    _, L, S, _, _ = shapes
    allowed = rand_bool((L, S), seed)
    on_cpu = pair(subject.call("scaled_dot_product_attention", q, k, v, allowed, is_causal=True))  # meta holds no values
    assert_roughly(on_cpu[1], attention64(q, k, v, allowed, is_causal=True)[1], what="weights on the CPU")
    on_meta = dict(device="meta")
    out = subject.run(Call(subject.unit, "softmax", (q,), **on_meta)).output
    check_tensor(out, shape=q.shape, device_type="meta", what="softmax on meta")
    mask = subject.run(Call(subject.unit, "causal_mask", (L, S), {"device": torch.device("meta")})).output
    check_tensor(mask, shape=(L, S), dtype=torch.bool, device_type="meta", what="causal_mask(device='meta')")
    for kwargs in ({"is_causal": True}, {"dropout_p": 0.5}):
        try:
            got, weights = pair(subject.run(Call(subject.unit, "scaled_dot_product_attention", (q, k, v, allowed), kwargs,
                                                 **on_meta)).output)
        except StudentError as error:
            if "cpu" not in error.message.lower():
                raise
            # Every input is on meta: a CPU tensor in the error is one the code created.
            raise AssertionError(with_hint(error.describe()[:300], DEVICE)) from None
        check_tensor(got, shape=on_cpu[0].shape, device_type="meta", what=f"output on meta with {kwargs}")
        check_tensor(weights, shape=on_cpu[1].shape, device_type="meta", what=f"weights on meta with {kwargs}")


@pytest.mark.points(0)
@pytest.mark.aspect("device")
@settings(max_examples=5)
@given(shapes=qkv_shapes(), seed=seeds, is_causal=st.booleans())
def test_cpu_and_cuda_agree(subject, shapes, seed, is_causal):
    """CPU and CUDA give the same result (TF32 off); informational, worth no points"""
    # Checks: G4.
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    q, k, v = make_qkv(shapes, seed)
    mask = rand_bool(shapes[1:3], seed + 3)
    args = (subject.unit, "scaled_dot_product_attention", (q, k, v, mask), {"is_causal": is_causal})
    cpu = pair(subject.run(Call(*args)).output)
    assert_roughly(cpu[1], attention64(q, k, v, mask, is_causal=is_causal)[1], what="weights on the CPU")
    cuda = subject.run(Call(*args, device="cuda")).output
    check_tensor(cuda[0], device_type="cuda", what="output of a CUDA call")
    assert_attention(tuple(t.cpu() for t in cuda), cpu, [])


# -- contract -----------------------------------------------------------------

@pytest.mark.points(2)
@pytest.mark.aspect("errors")
@given(shapes=qkv_shapes(), seed=seeds, extra=st.integers(1, 3))
def test_bad_shapes_raise_value_error(subject, shapes, seed, extra):
    """mismatched sizes (query and key widths, key and value lengths) raise ValueError naming both sizes; a 1-D query raises ValueError"""
    # Checks: G8.
    q, k, v = make_qkv(shapes, seed)
    E, S = q.shape[-1], k.shape[-2]
    k_wide = randn((*k.shape[:-1], E + extra), seed)
    v_long = randn((*v.shape[:-2], S + extra, v.shape[-1]), seed)
    assert_value_error(subject, Call(subject.unit, "scaled_dot_product_attention", (q, k_wide, v)), (E, E + extra), SIZE_CHECK)
    assert_raises(subject.run, Call(subject.unit, "scaled_dot_product_attention", (q, k, v_long)), "ValueError", mentions=(S, S + extra))
    assert_raises(subject.run, Call(subject.unit, "scaled_dot_product_attention", (q[..., 0, 0].reshape(-1), k, v)), "ValueError")


def assert_value_error(subject, call, mentions, advice):
    """``assert_raises(..., "ValueError", mentions=mentions)``, with ``advice`` when the call raised no
    ValueError at all: the check it needs is missing (one that raises names its sizes or not)."""
    try:
        assert_raises(subject.run, call, "ValueError", mentions=mentions)
    except AssertionError as error:
        try:
            subject.run(call)
        except StudentError as raised:
            if raised.kind == "ValueError":
                raise error from None
        raise AssertionError(with_hint(str(error), advice)) from None


@pytest.mark.points(1)
@pytest.mark.aspect("layout")
@given(shapes=qkv_shapes(), seed=seeds, is_causal=st.booleans())
def test_noncontiguous_inputs_left_unmodified(subject, shapes, seed, is_causal):
    """non-contiguous inputs give your results for contiguous ones, and no input is modified in place"""
    # Checks: G6.
    q, k, v = make_qkv(shapes, seed)
    mask = rand_bool(shapes[1:3], seed + 3)
    call = Call(subject.unit, "scaled_dot_product_attention", (q, k, v, mask), {"is_causal": is_causal})
    plain = pair(subject.run(call).output)
    assert_roughly(plain[1], attention64(q, k, v, mask, is_causal=is_causal)[1], what="weights of contiguous inputs")
    result = subject.run(replace(call, noncontiguous=True))
    try:
        assert_unmodified(result)
    except AssertionError as error:
        raise AssertionError(with_hint(str(error), IN_PLACE)) from None
    got = pair(result.output)
    for index, what in ((1, "weights"), (0, "output")):
        assert_close(got[index], plain[index], what=f"{what} of non-contiguous inputs against contiguous ones")
