"""Hidden properties of unit 6, efficient attention.

Each test's docstring is the property students read; its points are marked.
Tests reach the student's code only through ``subject``. While this unit is
graded, its ``from .attention import ...`` and ``from .multi_head import ...``
get the course's trusted stand-ins, so a unit-2 or unit-3 bug never costs
unit-6 points.

What the memory property proves, and what it does not: a call returns only
plain data, so no test can see the tensors a submission builds inside it. The
memory property runs flash_attention on CPU with ``Call.measure``: the engine
records the elements of every storage an operator makes during the call (a
dispatch mode in the worker, which a unit file cannot reach past the allow-list
and its restricted builtins), and the same call's output is checked against the
reference, so one path cannot give the values while another is measured. The long-sequence property
runs L = S = 4096 with block_size 128 under the per-call time limit. The tiling itself is checked by values:
every block size, including 1, must give unit 2's output, which the bugs of
the online softmax (an unrescaled sum, a max taken after the exponent, an
off-by-one causal tile, NaN from an empty tile) do not.

Side properties (marked ``aspect``: a device, a dtype, a layout, the cache's bookkeeping, the argument
checks, shapes) compare the code with itself on the plain path: the meta device's shapes with the CPU
call's, a non-contiguous input's output with the contiguous one's, bfloat16 and float64 with float32, a
decoder's chunks with one full pass, a broadcast batch with the batch spelled out. Each keeps one anchor
(``assert_roughly``: the plain answer roughly right), so that an answer computing nothing earns nothing,
while a numerical bug fails only the value properties, which name it.

Hints are proven (``anchors.proven_hint``): a known bug's answer, rebuilt by an oracle's ``wrong`` option,
is named only when the answer is that bug's and no other's. What no tensor shows (an exception's kind, the
size of a tensor made inside a call, the buffers an object holds) is proven the same way by ``told``.
Some properties carry explicit examples that tell two bugs apart which hypothesis's smallest
counterexample would confuse (a hidden diagonal and a causal loop that stops one key early agree when
the tiles hold one query).

Decisions (the API page, unit 6, says the same):
  * GroupedQueryAttention is graded on the values it computes, never on which
    functions it calls: it may use the siblings' stand-ins or compute its own
    attention (with flash_attention, say); only the memory property looks inside
    a call, and only at flash_attention.
  * bfloat16 must accumulate in float32: a bfloat16 running sum over 4096 keys
    drifts by percents, past bfloat16's tolerance.
  * A call builds its objects afresh and calls one method of them, so a KVCache
    is seen new (its buffers), after one append (its output and state_dict), or
    through GroupedQueryAttention and decode_in_chunks (its length sets the
    rotary positions). The other half of append's ValueError, a second append
    that disagrees with what the cache holds, cannot be reached from a suite.

A property that quotes the API page below its first line checks that sentence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import NamedTuple

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

from autograder.testing.compare import assert_raises, assert_roughly, assert_unmodified, check_tensor, with_hint
from autograder.core.protocol import Call, New, StudentError
from anchors import assert_close, check_gradients_of, computed_in_float32, differ, proven_hint, told, tolerance
# Under the name its properties' bodies call it by: a body's source seeds its derandomized examples.
from anchors import hinted as with_advice
from oracles_attention import attention64
from oracles_efficient_attention import (
    attention_rows64, decode64, flash64, flash_gradients64, flattened64, gqa64, gqa_keys, gqa_state, repeated_state,
)
from oracles_multi_head import explicit_mha64
from oracles_positional_encoding import rope64, table_atol
from tensors import QKVShapes, batch_dims, randn, seeds

pytestmark = pytest.mark.unit("efficient_attention")
# The checks a constant or shape-only answer may pass, and so the only points it may earn
# (tests/project/test_nothing_for_nothing.py): shapes, structure and argument errors.
SHAPE_CHECKS = (
    "test_efficient_attention_public.py::test_shapes",
    "test_efficient_attention_public.py::test_bad_sizes_raise_value_error",
    "test_efficient_attention_properties.py::test_flash_bad_shapes_raise_value_error",
    "test_efficient_attention_properties.py::test_gqa_parameter_names_and_shapes",
    "test_efficient_attention_properties.py::test_gqa_bad_sizes_raise_value_error",
)

# -- advice: the online softmax (flash64's ``wrong``) ----------------------------------------
ACC_RESCALE = ("when a tile raises a row's running maximum from m_old to m_new, the running output acc must be rescaled "
               "by exp(m_old - m_new) before the tile's weights @ v are added to it: acc was not rescaled.")
SUM_RESCALE = ("when a tile raises a row's running maximum from m_old to m_new, the running sum l must be rescaled "
               "by exp(m_old - m_new) before the tile's exp(score - m_new) are added to it: l was not rescaled.")
NO_RESCALE = ("when a tile raises a row's running maximum from m_old to m_new, the running sum l and the running output "
              "acc must both be rescaled by exp(m_old - m_new) before the tile's terms are added: neither l nor acc was "
              "rescaled.")
LATE_MAX = ("take the tile's new running maximum first, m_new = max(m_old, the tile's largest score), then its weights "
            "exp(score - m_new) and the rescale exp(m_old - m_new): the exponent was taken against m_old.")
RAW_EXP = ("subtract the running maximum before exp, exp(score - m_new), and rescale l and acc when it rises: exp of "
           "the raw scores underflows to 0 below about -745 and overflows past 709.")
SENTINEL = ("start the running maximum at -inf, not at a finite sentinel such as -5e4: a row whose scores all lie far "
            "below the sentinel gets exp(score - sentinel) = 0 everywhere, and zeros.")
EMPTY_TILE = ("a row with no visible key yet has running maximum -inf, and exp(-inf - (-inf)) is NaN: shift such a row "
              "by 0 instead (torch.where(torch.isfinite(m), m, 0)).")
EMPTY_ROW = ("a row that saw no key ends with l = 0 and acc = 0: divide acc by l only where l > 0 (by 1 elsewhere), so "
             "that the row gives zeros, not 0 / 0 = NaN.")
STOP_EARLY = ("with is_causal, a query tile's keys run up to its last query's own key, included: visit "
              "range(0, min(S, first + Bq), block_size); the loop stopped one key early.")
STRICT = ("with is_causal, query i sees key j <= i + S - L, its own position included: the mask hid the diagonal "
          "(j < i + S - L).")
TOP_LEFT_TILES = ("with is_causal, the mask is aligned bottom-right, as unit 2's: query i sits at position i + S - L, "
                  "not at i (top-left alignment is right only when L == S).")
LOCAL_COLUMNS = ("with is_causal, a key tile's positions are absolute (its start + arange(Bk)), not counted from the "
                 "tile's start: query i sees key j <= i + S - L in every tile.")
LAST_TILE = ("the last key tile may be partial: visit range(0, S, block_size) (with is_causal, up to the tile's last "
             "visible key), the last tile holding the keys left over; only whole tiles were visited.")
INPLACE_SCALE = ("scale the scores, (q @ k^T) * scale, not the query in place: q.mul_(scale) changes the caller's tensor "
                 "and scales it again at every key tile.")
SCALE_DIM = "the default scale is 1/sqrt(E), E the last dim of query and key: the scores were scaled by 1/E."
SCALE_IGNORED = ("an explicit scale= replaces 1/sqrt(E), which only scale=None means: the scale given was not used.")
BF16_SUMS = ("accumulate bfloat16 inputs in float32: keep the scores, m, l and acc in "
             "torch.promote_types(dtype, torch.float32) and cast only the output back; bfloat16 running sums over "
             "thousands of keys drift by percents.")
WHOLE_TABLE = ("no tensor may hold the whole (L, S) score table: take the queries and the keys block_size at a time, so "
               "that only (block_size, block_size) scores exist at once.")
DETACHED = ("let the gradient flow through the running output: no .detach(), .data or torch.no_grad() on acc between "
            "tiles; autograd differentiates through the tiles.")
FLATTENED = ("leading dims broadcast as in matmul (query (b1, 1) with key (1, b2) gives (b1, b2)): do not flatten them "
             "to one batch dim each (reshape(-1, L, E), as bmm wants), which fails or pairs the wrong rows.")
WIDTH_CHECK = ("check that query's last dim E equals key's before any product, and raise ValueError naming both "
               "sizes.")
RANK_CHECK = ("check the rank of key and value too, not only query's: each needs at least 2 dims (..., length, "
              "features), else ValueError.")
ON_DEVICE = ("create every tensor on the input's device (torch.arange(n, device=x.device)): a tensor made without "
             "device= lives on the CPU, where inputs on another device cannot meet it.")

# -- advice: grouped-query attention and the cache ----------------------------------------------
TILE = ("query head h shares kv head h // (num_heads // num_kv_heads): consecutive query heads form a group "
        "(repeat_interleave), not every num_kv_heads-th head (repeat).")
GQA_SCALE = ("each head's scores are scaled by 1/sqrt(head_dim), head_dim = embed_dim // num_heads, not by "
             "1/sqrt(embed_dim).")
ROPE_KEYS = ("rotate the keys as well as the queries: the rotary embedding turns every query and key head at its "
             "position, so that the scores depend on the positions' differences.")
POSITIONS_GIVEN = ("positions= gives the new tokens' absolute positions: use it when it is given; only positions=None "
                   "defaults to cache.length + arange(L).")
KV_WIDTH = ("k_proj and v_proj project to num_kv_heads * head_dim features, the kv heads only, not to embed_dim (the "
            "num_heads heads of multi-head attention).")
GROUP_CHECK = "check in __init__ that num_heads is divisible by num_kv_heads, and raise ValueError naming both sizes."
ODD_HEAD_CHECK = ("with rope_base, check in __init__ that the head dim embed_dim // num_heads is even (rotary pairs need "
                  "it), and raise ValueError naming embed_dim and num_heads.")
RESTART = "positions continue after the cache: the new tokens sit at cache.length + arange(L), not at arange(L)."
LENGTH_IS_BATCH = "KVCache.length is the number of tokens held, keys.shape[-2], not len(keys) (the batch size)."
BEFORE_APPEND = ("append the new tokens' keys and values to the cache before attending: each new token attends to the "
                 "cached tokens and to the new ones up to itself, its own key included, not to the cache as it was.")
TOP_LEFT_CACHE = ("with a cache the causal mask is aligned bottom-right: new token i sits at position P + i (P = "
                  "cache.length) and sees keys j <= P + i; a top-left mask (j <= i, as torch's is_causal) hides most of "
                  "the cache.")
PREPEND = ("append the new keys and values after the cached ones, torch.cat([held, new], dim=-2): the cache keeps the "
           "tokens in order, the new ones last.")
FRESH_CACHE = ("decode_in_chunks keeps one KVCache for all the chunks: each chunk attends to every earlier token, and "
               "the cache it returns holds them all.")
NOT_CAUSAL_CACHE = ("with a cache the attention stays causal: new token i sees keys j <= P + i, so that a chunk of "
                    "several tokens does not see its own future.")
CACHE_REPEATS = ("the cache holds the num_kv_heads heads, (B, num_kv_heads, L, Dh): append the keys and values before "
                 "repeat_kv, which repeats them for attention only (a cache of num_heads heads is num_heads / "
                 "num_kv_heads times bigger).")
PERSISTENT = ("register keys and values with persistent=False (register_buffer(name, None, persistent=False)): a "
              "persistent buffer puts the cache into every model's state_dict.")
EMPTY_BUFFERS = ("a new KVCache holds keys = values = None (register_buffer(name, None, persistent=False)), not empty "
                 "tensors, and its length is 0 while keys is None.")
KV_AGREEMENT = ("KVCache.append checks that key and value agree on (B, num_kv_heads, T), and raises ValueError naming "
                "both shapes.")
CHUNK_POSITIVE = ("each chunk size must be at least 1: raise ValueError for a 0 or a negative size, even when the sizes "
                  "sum to L.")
CHUNK_SUM = "the chunk sizes must sum to L, the length of x: raise ValueError when they fall short of it or overrun it."


# -- proven advice for what no tensor shows (anchors.told) -------------------------------------

def not_a_value_error(error: StudentError | None) -> bool:
    """The call raised nothing, or something other than ValueError: its check is missing."""
    return error is None or error.kind != "ValueError"


def made_on_the_cpu(error: StudentError | None) -> bool:
    """The call, all of whose inputs are on another device, failed on a tensor it made on the CPU."""
    return error is not None and "cpu" in error.message.lower() and error.kind == "RuntimeError"


def raises(subject, call, kind, *, mentions=(), known=()):
    """``assert_raises``, with the advice of the one catalogued wrong outcome (``known``, tests of the
    StudentError raised, or of None when nothing was) that the call's is, when it fails."""
    seen = []

    def run(c):
        try:
            return subject.run(c)
        except StudentError as error:
            seen.append(error)
            raise

    try:
        return assert_raises(run, call, kind, mentions=mentions)
    except AssertionError as error:
        raise with_advice(error, told(seen[-1] if seen else None, known)) from None


def run_told(subject, call, known):
    """``subject.run(call)``; when the code raises, the failure with the advice of the one catalogued
    wrong outcome (``known``) that its error is."""
    try:
        return subject.run(call)
    except StudentError as error:
        advice = told(error, known)
        if advice is None:
            raise
        raise AssertionError(with_hint(error.describe()[:300], advice)) from None


@st.composite
def qkv_shapes(draw, *, max_len=9, max_dim=6):
    batch = draw(batch_dims)
    L, S = draw(st.integers(1, max_len), label="L"), draw(st.integers(1, max_len), label="S")
    E, Ev = draw(st.integers(1, max_dim), label="E"), draw(st.integers(1, max_dim), label="Ev")
    return QKVShapes(batch, L, S, E, Ev)


def make_qkv(shapes, seed, dtype=torch.float32, scale=1.0):
    batch, L, S, E, Ev = shapes
    return (randn((*batch, L, E), seed, dtype=dtype, scale=scale), randn((*batch, S, E), seed + 1, dtype=dtype, scale=scale),
            randn((*batch, S, Ev), seed + 2, dtype=dtype))


blocks = st.integers(1, 5)
# The online softmax's known bugs that a finite answer shows, each with its advice.
FLASH_WRONG = [(("acc",), ACC_RESCALE), (("sum",), SUM_RESCALE), (("acc", "sum"), NO_RESCALE), (("late_max",), LATE_MAX),
               (("raw",), RAW_EXP), (("sentinel",), SENTINEL), (("last_tile",), LAST_TILE), (("inplace",), INPLACE_SCALE)]
CAUSAL_WRONG = [(("local_cols",), LOCAL_COLUMNS), (("stop_early",), STOP_EARLY), (("strict",), STRICT),
                (("top_left",), TOP_LEFT_TILES)]


def flash_hints(q, k, v, *, is_causal, block_size, scale=None):
    """Known wrong outputs of flash_attention (``flash64`` with one bug each, a wrong scale), each with the
    advice that fixes it. An answer that is not finite everywhere is left out: it would match any other such
    answer (the NaN of an empty row has its own hints, in the property about those rows)."""
    options = dict(is_causal=is_causal, block_size=block_size)
    hints = [(flash64(q, k, v, scale=scale, wrong=bug, **options), text)
             for bug, text in FLASH_WRONG + (CAUSAL_WRONG if is_causal else [])]
    if scale is None:
        hints.append((flash64(q, k, v, scale=1.0 / q.shape[-1], **options), SCALE_DIM))
    else:
        hints.append((flash64(q, k, v, **options), SCALE_IGNORED))
    return [(answer, text) for answer, text in hints if bool(answer.isfinite().all())]


# -- flash_attention: values ---------------------------------------------------

@pytest.mark.points(3)
@given(shapes=qkv_shapes(), seed=seeds, block=blocks, is_causal=st.booleans())
def test_flash_matches_reference(subject, shapes, seed, block, is_causal):
    """flash_attention equals a float64 reference of softmax(q k^T / sqrt(E)) v (any batch dims, any block size, is_causal)"""
    # Checks: E1, E2.
    q, k, v = make_qkv(shapes, seed)
    got = subject.call("flash_attention", q, k, v, is_causal=is_causal, block_size=block)
    assert_close(got, attention64(q, k, v, is_causal=is_causal)[0], what=f"flash_attention(block_size={block})",
                 hints=lambda: flash_hints(q, k, v, is_causal=is_causal, block_size=block))


@pytest.mark.points(2)
@given(shapes=qkv_shapes(), seed=seeds, data=st.data())
def test_flash_every_block_size_gives_the_same_output(subject, shapes, seed, data):
    """tiling changes nothing: block sizes 1, b and at least max(L, S) give the same output as unit 2's attention"""
    # Checks: E2.
    q, k, v = make_qkv(shapes, seed)
    _, L, S, _, _ = shapes
    is_causal = data.draw(st.booleans(), label="is_causal")
    expected = attention64(q, k, v, is_causal=is_causal)[0]
    for block in (1, data.draw(st.integers(2, 4), label="b"), max(L, S)):
        assert_close(subject.call("flash_attention", q, k, v, is_causal=is_causal, block_size=block), expected,
                     what=f"flash_attention(block_size={block}, is_causal={is_causal})",
                     hints=lambda block=block: flash_hints(q, k, v, is_causal=is_causal, block_size=block))


@pytest.mark.points(2)
# An explicit example first, where each causal bug of the tiles gives its own answer: tiles of one query make
# a hidden diagonal and a loop that stops one key early the same bug, S = L + 1 a hidden diagonal and a top-left
# mask, L = S a loop that stops early and one that drops the partial tile.
@example(shapes=QKVShapes((), 5, 4, 2, 2), seed=0, block=3)
@given(shapes=qkv_shapes(), seed=seeds, block=blocks)
def test_flash_causal_tiles_align_bottom_right(subject, shapes, seed, block):
    """with is_causal, query i sees keys j <= i + S - L in every tile, the diagonal included, whether or not L == S and the tiles divide the lengths"""
    # Checks: E2.
    q, k, v = make_qkv(shapes, seed)
    assert_close(subject.call("flash_attention", q, k, v, is_causal=True, block_size=block), attention64(q, k, v, is_causal=True)[0],
                 what=f"flash_attention(is_causal=True, block_size={block})",
                 hints=lambda: flash_hints(q, k, v, is_causal=True, block_size=block))


@pytest.mark.points(2)
# First, four queries over one key in tiles of two: the first tile sees no key at all, the second one row
# that sees none beside one that does, so the NaN of an empty tile's -inf shift and that of a final 0 / 0
# fall on different rows.
@example(batch=(), S=1, extra=3, E=1, seed=0, block=2)
@given(batch=batch_dims, S=st.integers(1, 5), extra=st.integers(1, 5), E=st.integers(1, 4), seed=seeds, block=blocks)
def test_flash_fully_masked_rows_give_zeros(subject, batch, S, extra, E, seed, block):
    """with is_causal and more queries than keys, the first L - S queries see no key: their output is zeros, not NaN, and the rest match the reference"""
    # Checks: E3.
    L = S + extra
    q, k, v = make_qkv((batch, L, S, E, E), seed)
    got = check_tensor(subject.call("flash_attention", q, k, v, is_causal=True, block_size=block), shape=(*batch, L, E), what="output")
    expected = attention64(q, k, v, is_causal=True)[0]
    if bool(got.isnan().any()):
        nan = [(flash64(q, k, v, is_causal=True, block_size=block, wrong=(bug,)), text)
               for bug, text in (("nan_shift", EMPTY_TILE), ("divide", EMPTY_ROW))]
        raise AssertionError(with_hint(f"flash_attention gave NaN (rows with no visible key, or tiles with none, must "
                                       f"give zeros; L={L}, S={S}, block_size={block})",
                                       proven_hint(got, expected, nan, atol=1e-5, rtol=1e-4)))
    assert_close(got, expected, what=f"flash_attention(is_causal=True, block_size={block})",
                 hints=lambda: flash_hints(q, k, v, is_causal=True, block_size=block))


def far_below(scores: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 (query, key, value) of one batch with the given (L, S) scores at scale 1: query i is the
    one-hot e_i, key j holds the scores of every query with it; the values are 10, 20, 30, ..."""
    table = torch.tensor(scores, dtype=torch.float64)  # (L, S)
    L, S = table.shape
    return torch.eye(L, dtype=torch.float64), table.T.contiguous(), 10.0 * torch.arange(1, S + 1, dtype=torch.float64)[:, None]


@pytest.mark.points(2)
@given(shapes=qkv_shapes(), seed=seeds, block=blocks, magnitude=st.sampled_from([30.0, 100.0]), is_causal=st.booleans())
def test_flash_large_scores_stay_finite(subject, shapes, seed, block, magnitude, is_causal):
    """float64 scores of magnitude 1e3 to 1e4, far past exp's overflow and underflow, give a finite output equal to the reference (each tile's exponent is taken after its maximum is subtracted)"""
    # Checks: E2, E6.
    # First one row of scores -1000 and -1001 (scale 1, tiles of one key): exp of the raw scores is 0 there.
    q, k, v = far_below([[-1000.0, -1001.0]])
    assert_close(subject.call("flash_attention", q, k, v, scale=1.0, block_size=1),
                 attention64(q, k, v, scale=1.0)[0], what="flash_attention of the scores -1000 and -1001 (scale 1)",
                 dtype=torch.float64, **tolerance(torch.float64),
                 hints=lambda: flash_hints(q, k, v, is_causal=False, block_size=1, scale=1.0))
    # float64: in float32 a score of 1e4 is only known to about 1e-3, and the softmax with it.
    q, k, v = make_qkv(shapes, seed, dtype=torch.float64, scale=magnitude)
    assert_close(subject.call("flash_attention", q, k, v, is_causal=is_causal, block_size=block), attention64(q, k, v, is_causal=is_causal)[0],
                 what=f"flash_attention of large scores (block_size={block})", dtype=torch.float64, **tolerance(torch.float64),
                 hints=lambda: flash_hints(q, k, v, is_causal=is_causal, block_size=block))


@pytest.mark.points(1)
@given(shapes=qkv_shapes(), seed=seeds, block=blocks, scale=st.floats(0.05, 3.0))
def test_flash_custom_scale_is_honoured(subject, shapes, seed, block, scale):
    """an explicit scale replaces 1/sqrt(E)"""
    # Checks: E2.
    q, k, v = make_qkv(shapes, seed)
    assert_close(subject.call("flash_attention", q, k, v, scale=scale, block_size=block), attention64(q, k, v, scale=scale)[0],
                 what=f"flash_attention(scale={scale:.3g})",
                 hints=lambda: flash_hints(q, k, v, is_causal=False, block_size=block, scale=scale))


@pytest.mark.points(2)
@settings(max_examples=1)
@given(seed=seeds)
def test_flash_long_sequence_within_the_time_limit(subject, seed):
    """a causal L = S = 4096 sequence with block_size 128 runs within the call's time limit and matches the reference (values only: a call cannot show the memory it used)"""
    # Checks: E2.
    shapes = ((1,), 4096, 4096, 8, 8)
    q, k, v = make_qkv(shapes, seed)
    got = subject.call("flash_attention", q, k, v, is_causal=True, block_size=128)
    assert_close(got, attention_rows64(q, k, v, is_causal=True), what="flash_attention over 4096 tokens")


@pytest.mark.points(2)
@given(is_causal=st.booleans())
def test_flash_never_materializes_the_score_matrix(subject, is_causal):
    """with L = S = 512 and block_size 64, flash_attention gives the right values and no tensor it makes holds a quarter of the L x S scores (the grader counts the elements of every storage an operator returns, in the very call whose values it checks)"""
    # Checks: E2, E4.
    L = 512  # 64 tiles of (64, 64) scores; the whole table would be 262144 elements
    q, k, v = make_qkv(((1,), L, L, 8, 8), 0)
    result = subject.run(Call(subject.unit, "flash_attention", (q, k, v), {"is_causal": is_causal, "block_size": 64},
                              measure=True))
    # Values and size from one call: a submission cannot show one path to the values and another to the counter.
    assert_close(result.output, attention_rows64(q, k, v, is_causal=is_causal), what="flash_attention(block_size=64)")
    if result.largest >= L * L // 4:
        # A tensor of L x S elements or more is the whole table (a quarter of it and more, some other tiling).
        raise AssertionError(with_hint(
            f"flash_attention made a tensor of {result.largest} elements for L = S = {L} (L x S = {L * L}): "
            "tile the keys and the queries, so that only (block, block) scores exist at a time",
            told(result.largest, [(lambda largest: largest >= L * L, WHOLE_TABLE)])))


# -- flash_attention: gradients, dtypes, devices, contract ---------------------------

@pytest.mark.points(2)
@settings(max_examples=6)
@given(shapes=qkv_shapes(max_len=5, max_dim=3), seed=seeds, block=st.integers(1, 3), is_causal=st.booleans())
def test_flash_gradients_match_finite_differences(subject, shapes, seed, block, is_causal):
    """float64 outputs are right to float64 precision, and the gradients with respect to query, key and value, through the tiles, agree with finite differences (float64 gradcheck)"""
    # Checks: E5, G7.
    q, k, v = make_qkv(shapes, seed, dtype=torch.float64)
    sent = []  # the output gradient check_gradients sent and the gradients the code gave for it

    def build(tensors, grad_outputs):
        return Call(subject.unit, "flash_attention", tuple(tensors), {"is_causal": is_causal, "block_size": block},
                    grad_outputs=grad_outputs)

    def run(call):
        result = subject.run(call)
        if call.grad_outputs is not None and not sent:
            sent.append((call.grad_outputs, result.arg_grads[:3]))
        return result

    expected = attention64(q, k, v, is_causal=is_causal)[0]
    try:
        check_gradients_of(SimpleNamespace(run=run), build, [q, k, v], seed=seed, expect=lambda out: assert_close(
            out, expected, what="float64 output", dtype=torch.float64, **tolerance(torch.float64)))
    except AssertionError as error:
        if not sent:
            raise
        upstream, grads = sent[0]
        options = dict(is_causal=is_causal, block_size=block)

        def gives(wrong) -> bool:
            """The code's gradients are those of flash64 with ``wrong`` (no gradient: zeros)."""
            want = flash_gradients64(q, k, v, upstream, wrong=wrong, **options)
            return all(isinstance(g, torch.Tensor) and g.shape == x.shape
                       and not differ(g, torch.zeros_like(x) if w is None else w, 1e-7, 1e-5)
                       for g, w, x in zip(grads, want, (q, k, v)))

        # Proven as a wrong answer is: the code's gradients are the detached running output's, not the right ones.
        raise with_advice(error, told(grads, [(lambda _: gives(("detach_acc",)) and not gives(()), DETACHED)])) from None


@pytest.mark.points(1)
@pytest.mark.aspect("dtype")
@given(shapes=qkv_shapes(), seed=seeds, dtype=st.sampled_from([torch.float64, torch.bfloat16]), block=blocks,
       is_causal=st.booleans())
def test_flash_dtype_is_preserved(subject, shapes, seed, dtype, block, is_causal):
    """float64 and bfloat16 inputs give an output of the same dtype, equal to your float32 output within that dtype's tolerance; float64 is computed in float64"""
    # Checks: E1, G4, G7.
    q, k, v = make_qkv(shapes, seed, dtype=dtype)
    options = dict(is_causal=is_causal, block_size=block)
    expected = attention64(q, k, v, is_causal=is_causal)[0]
    plain = subject.call("flash_attention", q.float(), k.float(), v.float(), **options)
    got = subject.call("flash_attention", q, k, v, **options)
    if dtype == torch.float64 and isinstance(got, torch.Tensor) and computed_in_float32(got, expected):
        # Computed in float32 and cast up: against the float64 answer it fails with the precision hint.
        assert_close(got, expected, what=f"{dtype} output", dtype=dtype, **tolerance(dtype))
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float64 else dict(atol=3e-2, rtol=3e-2)
    assert_close(got, plain.to(dtype) if isinstance(plain, torch.Tensor) else plain,
                 what=f"{dtype} output against your float32 output", dtype=dtype, **tol)
    assert_roughly(plain, expected, what="output of the float32 inputs")


@pytest.mark.points(1)
@pytest.mark.aspect("device")
@settings(max_examples=3)
@given(seed=seeds, is_causal=st.booleans())
def test_flash_runs_on_meta_device(subject, seed, is_causal):
    """flash_attention runs on the meta device (every tensor it creates is on the input's device), here with L = S = 16384 and block_size 2048, with the shape of its CPU output"""
    # Checks: G3, G4.
    small = make_qkv(((2,), 5, 7, 3, 2), seed)  # meta tensors hold no values: the values on the CPU
    on_cpu = subject.call("flash_attention", *small, is_causal=is_causal, block_size=2)
    known = [(made_on_the_cpu, ON_DEVICE)]
    out = run_told(subject, Call(subject.unit, "flash_attention", small, {"is_causal": is_causal, "block_size": 2},
                                 device="meta"), known).output
    check_tensor(out, shape=check_tensor(on_cpu, what="output on the CPU").shape, device_type="meta",
                 what="output on meta")
    q, k, v = make_qkv(((1,), 16384, 16384, 4, 4), seed)
    out = run_told(subject, Call(subject.unit, "flash_attention", (q, k, v), {"is_causal": is_causal, "block_size": 2048},
                                 device="meta"), known).output
    check_tensor(out, shape=(1, 16384, 4), device_type="meta", what="output on meta")
    assert_roughly(on_cpu, attention64(*small, is_causal=is_causal)[0], what="output on the CPU")


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
@given(shapes=qkv_shapes(), seed=seeds, extra=st.integers(1, 3))
def test_flash_bad_shapes_raise_value_error(subject, shapes, seed, extra):
    """mismatched sizes (query and key widths, key and value lengths) raise ValueError naming both sizes, and so do a query, key or value of rank < 2 and block_size < 1

    API page, unit 6: "Bad sizes (rank < 2, query's E != key's, key's S != value's) and `block_size < 1`
    raise `ValueError` naming the sizes."
    """
    # Checks: E8.
    q, k, v = make_qkv(shapes, seed)
    E, S = q.shape[-1], k.shape[-2]
    k_wide = randn((*k.shape[:-1], E + extra), seed)
    v_long = randn((*v.shape[:-2], S + extra, v.shape[-1]), seed)
    raises(subject, Call(subject.unit, "flash_attention", (q, k_wide, v)), "ValueError", mentions=(E, E + extra),
           known=[(not_a_value_error, WIDTH_CHECK)])
    raises(subject, Call(subject.unit, "flash_attention", (q, k, v_long)), "ValueError", mentions=(S, S + extra))
    raises(subject, Call(subject.unit, "flash_attention", (q, k, v), {"block_size": 0}), "ValueError")
    for i in range(3):  # query, key, value in turn a single vector (its last dim only)
        args = [q, k, v]
        args[i] = randn(args[i].shape[-1:], seed + 5)
        raises(subject, Call(subject.unit, "flash_attention", tuple(args)), "ValueError",
               known=[(not_a_value_error, RANK_CHECK)] if i else [])


@pytest.mark.points(1)
@pytest.mark.aspect("layout")
@given(shapes=qkv_shapes(), seed=seeds, block=blocks, is_causal=st.booleans())
def test_flash_noncontiguous_inputs_left_unmodified(subject, shapes, seed, block, is_causal):
    """non-contiguous inputs give your output for contiguous ones, and no input is modified in place"""
    # Checks: G6.
    q, k, v = make_qkv(shapes, seed)
    call = Call(subject.unit, "flash_attention", (q, k, v), {"is_causal": is_causal, "block_size": block})
    plain = subject.run(call).output
    result = subject.run(replace(call, noncontiguous=True))
    assert_unmodified(result)
    assert_close(result.output, plain, what="output of non-contiguous inputs against contiguous ones")
    assert_roughly(plain, attention64(q, k, v, is_causal=is_causal)[0], what="output of contiguous inputs")


class Batches(NamedTuple):
    """A counterexample's leading dims, labelled (its repr is what a student reads)."""
    query: tuple
    key: tuple
    value: tuple


@st.composite
def broadcast_batches(draw):
    """Batch shapes of query, key and value that differ but broadcast together (as in ``matmul``):
    each is one of (b1, b2), (b1, 1), (1, b2), (b2,) or (), not all three the same."""
    b1, b2 = draw(st.integers(2, 3), label="b1"), draw(st.integers(2, 3), label="b2")
    kinds = {"full": (b1, b2), "rows": (b1, 1), "cols": (1, b2), "tail": (b2,), "none": ()}
    names = st.sampled_from(sorted(kinds))
    picked = draw(st.tuples(names, names, names).filter(lambda t: len(set(t)) > 1), label="batches (query, key, value)")
    return Batches(*(kinds[name] for name in picked))


@pytest.mark.points(1)
@pytest.mark.aspect("shape")
@settings(max_examples=10)
@given(batches=broadcast_batches(), L=st.integers(1, 5), S=st.integers(1, 5), E=st.integers(1, 4), Ev=st.integers(1, 3),
       seed=seeds, block=blocks, is_causal=st.booleans())
def test_flash_leading_dims_broadcast(subject, batches, L, S, E, Ev, seed, block, is_causal):
    """query, key and value with different leading dims that broadcast (as in matmul) give the broadcast output, equal to your output for the inputs expanded to the broadcast shape

    API page, unit 6: "`query (..., L, E)`, `key (..., S, E)`, `value (..., S, Ev)` (leading dims broadcast
    as in `matmul`); `output (..., L, Ev)`".
    """
    # Checks: E1.
    qb, kb, vb = batches
    q, k, v = randn((*qb, L, E), seed), randn((*kb, S, E), seed + 1), randn((*vb, S, Ev), seed + 2)
    batch = torch.broadcast_shapes(qb, kb, vb)
    options = dict(is_causal=is_causal, block_size=block)
    spelled = subject.call("flash_attention", *(t.expand(*batch, *t.shape[-2:]).contiguous() for t in (q, k, v)), **options)
    flat = flattened64(q, k, v, is_causal=is_causal)
    # The known bug, batches flattened one by one: it fails where they do not broadcast, else it pairs wrong rows.
    got = run_told(subject, Call(subject.unit, "flash_attention", (q, k, v), options),
                   [(lambda error: flat is None, FLATTENED)]).output
    what = f"output for query {tuple(q.shape)}, key {tuple(k.shape)}, value {tuple(v.shape)}"
    try:
        check_tensor(got, shape=(*batch, L, Ev), what=what)
    except AssertionError as error:
        flattened = [(lambda out: isinstance(out, torch.Tensor) and flat is not None and out.shape == flat.shape
                      and not differ(out, flat, 1e-5, 1e-4), FLATTENED)]
        raise with_advice(error, told(got, flattened)) from None
    assert_close(got, spelled, what=f"{what} against your output for the expanded inputs",
                 hints=[(flat, FLATTENED)] if flat is not None else [])
    assert_roughly(spelled, attention64(q, k, v, is_causal=is_causal)[0], what="output for the expanded inputs")


@pytest.mark.points(2)
@settings(max_examples=10)
@given(batch=batch_dims, L=st.integers(1, 6), S=st.integers(1, 9), seed=seeds, block=blocks, is_causal=st.booleans(),
       offset=st.sampled_from([384.0, 512.0]), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_flash_rows_of_very_negative_scores_match_reference(subject, batch, L, S, seed, block, is_causal, offset, dtype):
    """rows whose scores all lie below -5e4 (about -7e4 to -1.3e5) are normalised like any others: the output equals the reference, in float32 and float64

    API page, unit 6: "It equals unit 2's `scaled_dot_product_attention(...)[0]` for every input and every
    `block_size >= 1`, [...] scores of any magnitude included (a row whose scores all lie below `-5e4` is
    normalised like any other: start the running maximum at `-inf`, not at a finite sentinel the scores can
    lie under)".
    """
    # Checks: E2.
    # First a row of scores near -7e4 beside one near -1e3 (float64, scale 1, tiles of one key): a finite
    # sentinel loses the first row only, exp of the raw scores both.
    q0, k0, v0 = far_below([[-70000.0, -70001.0], [-1000.0, -1001.0]])
    assert_close(subject.call("flash_attention", q0, k0, v0, scale=1.0, block_size=1), attention64(q0, k0, v0, scale=1.0)[0],
                 what="flash_attention of rows of scores near -7e4 and -1e3 (scale 1)", dtype=torch.float64,
                 **tolerance(torch.float64), hints=lambda: flash_hints(q0, k0, v0, is_causal=False, block_size=1, scale=1.0))
    # E = 4, so the default scale is 1/2. Feature 0 is +offset in every query and -offset in every key, so each
    # score is -offset**2 / 2 plus half of a small part made of the other features, multiples of 1/2 in [-2, 2]:
    # every score is exact in float32 in whatever order its sum is taken, and differs from its row's others by
    # a few units (the softmax is far from one-hot).
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(-4, 5, (*batch, L, 4), generator=gen).to(dtype) / 2
    k = torch.randint(-4, 5, (*batch, S, 4), generator=gen).to(dtype) / 2
    q[..., 0], k[..., 0] = offset, -offset
    v = randn((*batch, S, 3), seed + 2, dtype=dtype)
    # In float32 a log-sum-exp near -1e5 is itself known only to about 1e-2 (its ulp is 2^-6), so a correct
    # formulation that normalises by it (exp(score - lse)) is off by up to about 1%: float32 admits that.
    tol = tolerance(dtype, atol=2e-2, rtol=2e-2)
    got = subject.call("flash_attention", q, k, v, is_causal=is_causal, block_size=block)
    assert_close(got, attention64(q, k, v, is_causal=is_causal)[0], what=f"{dtype} output for scores near {-offset ** 2 / 2:g}",
                 dtype=dtype, **tol)


@pytest.mark.points(2)
@pytest.mark.aspect("dtype")
@settings(max_examples=2)
@given(seed=seeds, is_causal=st.booleans())
def test_flash_bfloat16_accumulates_in_float32_over_4096_keys(subject, seed, is_causal):
    """bfloat16 queries, keys and values over S = 4096 keys, block_size 16, give your float32 output for the same values within bfloat16 tolerance (running sums kept in float32; bfloat16 ones drift by percents)

    API page, unit 6: "bfloat16 inputs must accumulate in float32 (the running `m`, `l` and `acc`, or whatever
    running sums another formulation keeps: a bfloat16 running sum over thousands of keys drifts by percents);
    the output is bfloat16."
    """
    # Checks: E7.
    # Diffuse attention (queries of scale 1/2) over values of mean 3: each of the 256 key tiles adds a little
    # to sums of hundreds, which bfloat16's 8 bits round away (the error reaches 10% of the output and more), while
    # float32 sums stay within bfloat16's rounding of the output.
    L, S, E = 32, 4096, 8
    q = randn((1, L, E), seed, dtype=torch.bfloat16, scale=0.5)
    k = randn((1, S, E), seed + 1, dtype=torch.bfloat16)
    v = (randn((1, S, E), seed + 2, dtype=torch.float64) + 3.0).to(torch.bfloat16)
    options = dict(is_causal=is_causal, block_size=16)
    plain = subject.call("flash_attention", q.float(), k.float(), v.float(), **options)
    got = subject.call("flash_attention", q, k, v, **options)
    tol = tolerance(torch.bfloat16, atol=3e-2, rtol=3e-2)
    assert_close(got, plain.to(torch.bfloat16) if isinstance(plain, torch.Tensor) else plain,
                 what="bfloat16 output over 4096 keys against your float32 output", dtype=torch.bfloat16, **tol,
                 hints=lambda: [(flash64(q, k, v, work=torch.bfloat16, **options), BF16_SUMS)])
    assert_roughly(plain, attention_rows64(q, k, v, is_causal=is_causal), what="float32 output over 4096 keys")


# -- repeat_kv ----------------------------------------------------------------------

@pytest.mark.points(1)
@given(B=st.integers(1, 2), Hkv=st.integers(1, 3), G=st.integers(1, 3), S=st.integers(1, 4), Dh=st.integers(1, 3), seed=seeds)
def test_repeat_kv_shares_consecutive_heads(subject, B, Hkv, G, S, Dh, seed):
    """repeat_kv(x, G) has Hkv * G heads, head h being x's head h // G"""
    # Checks: E9.
    x = randn((B, Hkv, S, Dh), seed)
    got = subject.call("repeat_kv", x, G)
    expected = x[:, torch.arange(Hkv * G) // G]
    assert_close(got, expected, atol=0, rtol=0, what=f"repeat_kv(x, {G})",
                 hints=[(x[:, torch.arange(Hkv * G) % Hkv], TILE)])


# -- rotate_pairs -------------------------------------------------------------------

HALF = ("pairs are interleaved, (x[2i], x[2i+1]) as in RoFormer and LLaMA (unit 4's apply_rope); "
        "not (x[i], x[i + D/2]) (the rotate-half layout).")


@pytest.mark.points(2)
@settings(max_examples=10)
@given(batch=batch_dims, L=st.integers(1, 6), D=st.integers(1, 6).map(lambda n: 2 * n), seed=seeds,
       base=st.sampled_from([10000.0, 500.0]), max_position=st.sampled_from([10, 1000]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_rotate_pairs_matches_apply_rope(subject, batch, L, D, seed, base, max_position, dtype):
    """rotate_pairs(x, positions, base=base) is unit 4's apply_rope: pair (x[..., l, 2i], x[..., l, 2i+1]) turns by positions[l] * base^(-2i/D)

    API page, unit 6: "`rotate_pairs(x, positions, *, base=10000.0) -> Tensor`: unit 4's
    `apply_rope(x, positions, base=base)` with `x (..., L, D)`, D even, and `positions (L,)` long";
    unit 4: "rotates each interleaved pair `(x[..., 2i], x[..., 2i+1])` by the angle `pos * base**(-2i/D)`".
    """
    # Checks: E10.
    x = randn((*batch, L, D), seed, dtype=dtype)
    positions = torch.randint(0, max_position, (L,), generator=torch.Generator().manual_seed(seed))
    got = subject.call("rotate_pairs", x, positions, base=base)
    tol = tolerance(dtype, atol=table_atol(max_position) * max(1.0, float(x.abs().max())), rtol=0.0)
    assert_close(got, rope64(x, positions, base), what=f"rotate_pairs(x, positions, base={base:g})", dtype=dtype,
                 hints=[(rope64(x, positions, base, layout="half"), HALF)], **tol)


# -- GroupedQueryAttention ------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    B: int
    L: int
    H: int
    Hkv: int
    Dh: int
    bias: bool
    rope_base: float | None

    @property
    def E(self) -> int:
        return self.H * self.Dh

    def state(self, seed: int, dtype=torch.float32) -> dict:
        return gqa_state(self.E, self.H, self.Hkv, self.bias, seed, dtype=dtype)

    def recipe(self, state: dict | None) -> New:
        return New("GroupedQueryAttention", (self.E, self.H, self.Hkv), {"bias": self.bias, "rope_base": self.rope_base},
                   state=state)

    def x(self, seed: int, dtype=torch.float32) -> torch.Tensor:
        return randn((self.B, self.L, self.E), seed, dtype=dtype)

    def oracle(self, state, x, **kwargs):
        return gqa64(state, self.H, self.Hkv, x, rope_base=self.rope_base, **kwargs)


@st.composite
def configs(draw, *, rope=None, max_len=7, min_len=1):
    """Sizes for one module; ``rope`` True/False forces a rotary embedding or none, None draws it."""
    Hkv, G = draw(st.integers(1, 3), label="Hkv"), draw(st.integers(1, 3), label="G")
    Dh = draw(st.sampled_from([2, 4]), label="Dh")
    rope = draw(st.booleans(), label="rope") if rope is None else rope
    return Config(B=draw(st.integers(1, 2), label="B"), L=draw(st.integers(min_len, max_len), label="L"), H=Hkv * G,
                  Hkv=Hkv, Dh=Dh, bias=draw(st.booleans(), label="bias"),
                  rope_base=draw(st.sampled_from([10000.0, 100.0]), label="rope_base") if rope else None)


@st.composite
def chunkings(draw, L: int):
    """How a decoder splits L tokens: a prompt of P, then steps of 1 or chunks of any size."""
    prompt = draw(st.integers(1, L), label="prompt")
    sizes, left = [prompt], L - prompt
    token_by_token = draw(st.booleans(), label="token_by_token")
    while left:
        size = 1 if token_by_token else draw(st.integers(1, left), label="chunk")
        sizes.append(size)
        left -= size
    return sizes


def gqa_hints(cfg, state, x, **kwargs):
    """Known wrong outputs of one pass of GroupedQueryAttention (``gqa64`` with one bug each), with their advice."""
    hints = [(cfg.oracle(state, x, wrong=("tile",), **kwargs)[0], TILE),
             (cfg.oracle(state, x, scale=1.0 / math.sqrt(cfg.E), **kwargs)[0], GQA_SCALE)]
    if cfg.rope_base is not None:
        hints.append((cfg.oracle(state, x, wrong=("rope_q_only",), **kwargs)[0], ROPE_KEYS))
    return hints


DECODE_WRONG = [("restart", RESTART), ("length_is_batch", LENGTH_IS_BATCH), ("before_append", BEFORE_APPEND),
                ("top_left", TOP_LEFT_CACHE), ("prepend", PREPEND), ("fresh", FRESH_CACHE),
                ("not_causal", NOT_CAUSAL_CACHE)]


def decode_hints(cfg, state, x, chunks, part=0):
    """Known wrong results of a decoder's chunks (``decode64`` with one bug each: ``part`` 0 the output, 1
    the keys, 2 the values), with their advice."""
    found = [(decode64(state, cfg.H, cfg.Hkv, x, chunks, rope_base=cfg.rope_base, wrong=(bug,))[part], text)
             for bug, text in DECODE_WRONG]
    return [(answer, text) for answer, text in found if answer is not None]


def full_pass(subject, cfg, state, x):
    """The code's own one full causal pass over ``x``, the plain path a decoder's chunks are compared
    with, anchored to the oracle (roughly right, or an answer computing nothing would pass)."""
    full = subject.call(cfg.recipe(state), x)
    assert_roughly(full, cfg.oracle(state, x)[0], what="output of one full pass")
    return full


@pytest.mark.points(1)
@pytest.mark.aspect("shape")
@given(cfg=configs())
def test_gqa_parameter_names_and_shapes(subject, cfg):
    """the parameters are q_proj (E->E), k_proj and v_proj (E->num_kv_heads*Dh), out_proj (E->E), with biases unless bias=False"""
    # Checks: E16.
    state = subject.run(Call(subject.unit, cfg.recipe(None), method="state_dict")).output
    got = {name: tuple(t.shape) for name, t in state.items()}
    want = gqa_keys(cfg.E, cfg.H, cfg.Hkv, cfg.bias)
    if got != want:
        advice = told(got, [(lambda shapes: shapes == gqa_keys(cfg.E, cfg.H, cfg.H, cfg.bias), KV_WIDTH)])
        raise AssertionError(with_hint(f"state_dict of GroupedQueryAttention({cfg.E}, {cfg.H}, {cfg.Hkv}, bias={cfg.bias}) "
                                       f"has {got}, expected {want}", advice))


@pytest.mark.points(3)
@given(cfg=configs(rope=False), seed=seeds, is_causal=st.booleans())
def test_gqa_equals_mha_with_repeated_kv_heads(subject, cfg, seed, is_causal):
    """grouped-query attention equals unit 3's multi-head attention whose k_proj and v_proj rows are each kv head repeated for its group (num_kv_heads=1: multi-query)"""
    # Checks: E18, E19, E22, E23, E24.
    state, x = cfg.state(seed), cfg.x(seed + 3)
    got = subject.call(cfg.recipe(state), x, is_causal=is_causal)
    expected, _ = explicit_mha64(repeated_state(state, cfg.H, cfg.Hkv), cfg.H, x, is_causal=is_causal)
    assert_close(got, expected, what=f"output (num_heads={cfg.H}, num_kv_heads={cfg.Hkv})",
                 hints=lambda: gqa_hints(cfg, state, x, is_causal=is_causal))


@pytest.mark.points(2)
@given(cfg=configs(rope=True), seed=seeds)
def test_gqa_rotary_matches_reference(subject, cfg, seed):
    """with rope_base, queries and keys of every head are rotated (unit 4's interleaved pairs) at positions 0..L-1 before attention"""
    # Checks: E18, E20.
    state, x = cfg.state(seed), cfg.x(seed + 3)
    got = subject.call(cfg.recipe(state), x)
    assert_close(got, cfg.oracle(state, x)[0], what=f"output with rope_base={cfg.rope_base}",
                 hints=lambda: gqa_hints(cfg, state, x))


@pytest.mark.points(1)
@given(cfg=configs(rope=True, min_len=2), seed=seeds, data=st.data())
def test_gqa_explicit_positions_are_used(subject, cfg, seed, data):
    """positions= gives the new tokens' absolute positions for the rotary embedding (here with gaps between them)"""
    # Checks: E20.
    # Rotary attention sees only differences of positions: a shift of all of them changes nothing, gaps do.
    gaps = data.draw(st.lists(st.integers(1, 5), min_size=cfg.L, max_size=cfg.L), label="gaps")
    positions = torch.tensor(gaps).cumsum(0)
    state, x = cfg.state(seed), cfg.x(seed + 3)
    got = subject.call(cfg.recipe(state), x, positions=positions)
    assert_close(got, cfg.oracle(state, x, positions=positions)[0], what=f"output with positions {positions.tolist()}",
                 hints=lambda: [*gqa_hints(cfg, state, x, positions=positions), (cfg.oracle(state, x)[0], POSITIONS_GIVEN)])


@pytest.mark.points(3)
@pytest.mark.aspect("cache")
@given(cfg=configs(max_len=8, min_len=3), seed=seeds, data=st.data())
def test_decode_in_chunks_equals_full_causal_pass(subject, cfg, seed, data):
    """a prompt, then steps of one token or chunks of any size, with one cache: the outputs equal your one full causal pass"""
    # Checks: E21, E26, E27.
    # Three tokens at least: on a prompt of one and one step, attending to the cache as it was and a top-left
    # mask give the same output.
    chunks = data.draw(chunkings(cfg.L), label="chunk_sizes")
    state, x = cfg.state(seed), cfg.x(seed + 3)
    got = subject.call("decode_in_chunks", cfg.recipe(state), x, chunks)
    if not (isinstance(got, tuple) and len(got) == 3):
        raise AssertionError("decode_in_chunks must return a tuple (output, keys, values)")
    assert_close(got[0], full_pass(subject, cfg, state, x), what=f"output decoded in chunks {chunks} against your full pass",
                 hints=lambda: decode_hints(cfg, state, x, chunks))


@pytest.mark.points(2)
@pytest.mark.aspect("cache")
@given(cfg=configs(rope=True, min_len=3), seed=seeds, data=st.data())
def test_decode_positions_continue_after_the_prompt(subject, cfg, seed, data):
    """with a rotary embedding, token-by-token decoding after a prompt equals your full pass: each new token's position continues from the cache's length"""
    # Checks: E20, E27.
    prompt = data.draw(st.integers(1, cfg.L - 1), label="prompt")
    chunks = [prompt] + [1] * (cfg.L - prompt)
    state, x = cfg.state(seed), cfg.x(seed + 3)
    got = subject.call("decode_in_chunks", cfg.recipe(state), x, chunks)
    assert_close(got[0], full_pass(subject, cfg, state, x),
                 what=f"output decoded as a prompt of {prompt} then single tokens against your full pass",
                 hints=lambda: decode_hints(cfg, state, x, chunks))


@pytest.mark.points(2)
@pytest.mark.aspect("cache")
@given(cfg=configs(max_len=6), seed=seeds, data=st.data())
def test_decode_cache_holds_num_kv_heads(subject, cfg, seed, data):
    """after decoding in chunks, the cache holds every token's keys (rotated, with rope_base) and values for num_kv_heads heads, (B, num_kv_heads, L, Dh), in order: those your decoding of all L tokens in one chunk leaves"""
    # Checks: E25, E28.
    chunks = data.draw(chunkings(cfg.L), label="chunk_sizes")
    state, x = cfg.state(seed), cfg.x(seed + 3)
    _, keys, values = subject.call("decode_in_chunks", cfg.recipe(state), x, chunks)
    _, one_keys, one_values = subject.call("decode_in_chunks", cfg.recipe(state), x, [cfg.L])
    _, k, v = cfg.oracle(state, x)
    for part, name, got, plain, want in ((1, "keys", keys, one_keys, k), (2, "values", values, one_values, v)):
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            # A known wrong cache of another shape: proven when the answer equals it.
            repeated = want.repeat_interleave(cfg.H // cfg.Hkv, dim=1)
            known = [(lambda out: isinstance(out, torch.Tensor) and out.shape == repeated.shape
                      and not differ(out, repeated, 1e-5, 1e-4), CACHE_REPEATS)]
            raise AssertionError(with_hint(f"the cache's {name} after decoding {chunks}: got {shape}, expected (B, "
                                           f"num_kv_heads, L, Dh) = {tuple(want.shape)}; the cache stores the "
                                           "num_kv_heads heads, repeated only for attention", told(got, known)))
        assert_close(got, plain, what=f"the cache's {name} after decoding {chunks} against those of one chunk",
                     hints=lambda part=part: decode_hints(cfg, state, x, chunks, part))
        assert_roughly(plain, want, what=f"the cache's {name} after one chunk")


@pytest.mark.points(1)
@settings(max_examples=4)
@given(cfg=configs(max_len=4), seed=seeds, is_causal=st.booleans())
def test_gqa_gradients_match_finite_differences(subject, cfg, seed, is_causal):
    """float64 outputs are right to float64 precision, and the gradient with respect to the input agrees with finite differences (float64 gradcheck)"""
    # Checks: G7.
    # float32 values in float64: the module's float32 parameters load them exactly, then become float64.
    state = {name: t.double() for name, t in cfg.state(seed).items()}
    x = cfg.x(seed + 3, dtype=torch.float64)

    def build(tensors, grad_outputs):
        return Call(subject.unit, cfg.recipe(state), tuple(tensors), {"is_causal": is_causal}, dtype=torch.float64,
                    grad_outputs=grad_outputs)

    expected = cfg.oracle(state, x, is_causal=is_causal)[0]
    check_gradients_of(subject, build, [x], seed=seed, expect=lambda out: assert_close(
        out, expected, what="float64 output", dtype=torch.float64, **tolerance(torch.float64),
        hints=lambda: gqa_hints(cfg, state, x, is_causal=is_causal)))


@pytest.mark.points(1)
@pytest.mark.aspect("device")
@settings(max_examples=5)
@given(cfg=configs(min_len=2), seed=seeds)
def test_gqa_decodes_on_meta_device(subject, cfg, seed):
    """decoding with a cache runs on the meta device (positions and every other tensor are created on the input's device), with the shapes of its CPU results"""
    # Checks: G3, G4.
    state, x = cfg.state(seed), cfg.x(seed + 3)
    chunks = [1] * cfg.L
    on_cpu = subject.call("decode_in_chunks", cfg.recipe(state), x, chunks)  # meta tensors hold no values
    result = run_told(subject, Call(subject.unit, "decode_in_chunks", (cfg.recipe(state), x, chunks), device="meta"),
                      [(made_on_the_cpu, ON_DEVICE)])
    for name, got, plain in zip(("output", "the cache's keys", "the cache's values"), result.output, on_cpu):
        if not isinstance(plain, torch.Tensor):
            continue  # no tensor on the CPU either: the cache's properties say what is wrong
        check_tensor(got, shape=plain.shape, device_type="meta", what=f"{name} on meta")
    assert_roughly(on_cpu[0], cfg.oracle(state, x)[0], what="output on the CPU")


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
@given(Hkv=st.integers(2, 4), extra=st.integers(0, 2), Dh=st.integers(1, 3))
def test_gqa_bad_sizes_raise_value_error(subject, Hkv, extra, Dh):
    """num_heads not divisible by num_kv_heads raises ValueError naming both, as do embed_dim not divisible by num_heads and, with rope_base, an odd head dim (naming embed_dim and num_heads)

    API page, unit 6: "`embed_dim % num_heads`, `num_heads % num_kv_heads` (and, with `rope_base`, an odd
    `Dh`) raise `ValueError` naming both sizes."
    """
    # Checks: E17.
    H = Hkv + 1 + extra % (Hkv - 1)  # H % Hkv is 1 .. Hkv - 1
    x = randn((1, 2, H * Dh), 0)
    raises(subject, Call(subject.unit, New("GroupedQueryAttention", (H * Dh, H, Hkv)), (x,)), "ValueError",
           mentions=(H, Hkv), known=[(not_a_value_error, GROUP_CHECK)])
    raises(subject, Call(subject.unit, New("GroupedQueryAttention", (H * Dh + 1, H, 1)), (x,)), "ValueError",
           mentions=(H * Dh + 1, H))
    odd = H * (2 * Dh + 1)  # head dim 2 * Dh + 1, odd: no interleaved pairs to rotate
    recipe = New("GroupedQueryAttention", (odd, H, 1), {"rope_base": 10000.0})
    raises(subject, Call(subject.unit, recipe, (randn((1, 2, odd), 0),)), "ValueError", mentions=(odd, H),
           known=[(not_a_value_error, ODD_HEAD_CHECK)])


# -- KVCache and decode_in_chunks: the contract ----------------------------------------

@pytest.mark.points(1)
@pytest.mark.aspect("cache")
@settings(max_examples=5)
@given(cfg=configs(rope=True), seed=seeds)
def test_kv_cache_is_empty_until_the_first_append(subject, cfg, seed):
    """a new KVCache holds no tensor (keys and values are None, not empty tensors) and has length 0: attention with a new cache gives your output without one (positions from 0)

    API page, unit 6: "`KVCache()` is empty; `keys` and `values` are `None`, then `(B, Hkv, S, Dh)` and
    `(B, Hkv, S, Dv)`"; "`length` (property) is S, 0 while empty"; GroupedQueryAttention's positions
    default to "`P + arange(L)` where `P = cache.length`".
    """
    # Checks: E11, E13, E20.
    result = subject.run(Call(subject.unit, New("KVCache"), method="state_dict", return_state=True))
    held = {name: tuple(t.shape) for name, t in (result.buffers or {}).items() if name in ("keys", "values")}
    if held:
        empty = [(lambda shapes: all(math.prod(shape) == 0 for shape in shapes.values()), EMPTY_BUFFERS)]
        raise AssertionError(with_hint(f"a new KVCache holds the buffers {held}: keys and values are None until the "
                                       "first append (register_buffer(name, None, persistent=False)), not empty tensors",
                                       told(held, empty)))
    state, x = cfg.state(seed), cfg.x(seed + 3)
    plain = subject.call(cfg.recipe(state), x)
    got = subject.call(cfg.recipe(state), x, cache=New("KVCache"))
    assert_close(got, plain, what="output with a new cache against your output without one",
                 hints=lambda: [(cfg.oracle(state, x, is_causal=False)[0], NOT_CAUSAL_CACHE)])
    assert_roughly(plain, cfg.oracle(state, x)[0], what="output without a cache")


@pytest.mark.points(1)
@pytest.mark.aspect("cache")
@settings(max_examples=5)
@given(B=st.integers(1, 2), Hkv=st.integers(1, 3), T=st.integers(1, 4), Dh=st.integers(1, 4), Dv=st.integers(1, 4),
       seed=seeds)
def test_kv_cache_is_not_in_state_dict(subject, B, Hkv, T, Dh, Dv, seed):
    """after an append, KVCache returns the keys and values it holds, and its state_dict is still empty (non-persistent buffers)

    API page, unit 6: "(non-persistent buffers, so `.to(device)` moves them and no `state_dict` holds them)".
    """
    # Checks: E12, E14.
    k, v = randn((B, Hkv, T, Dh), seed), randn((B, Hkv, T, Dv), seed + 1)
    result = subject.run(Call(subject.unit, New("KVCache"), (k, v), method="append", return_state=True))
    keys, values = result.output
    assert_close(keys, k, atol=0, rtol=0, what="keys returned by the first append")
    assert_close(values, v, atol=0, rtol=0, what="values returned by the first append")
    if result.state:
        stored = {name: tuple(t.shape) for name, t in result.state.items()}
        persistent = [(lambda names: {"keys", "values"} <= set(names), PERSISTENT)]
        raise AssertionError(with_hint(f"after append, KVCache's state_dict holds {stored}; it must hold nothing: keys "
                                       "and values are non-persistent buffers, so that .to(device) moves them and no "
                                       "model's state_dict carries the cache", told(stored, persistent)))


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
@settings(max_examples=6)
@given(B=st.integers(1, 2), Hkv=st.integers(1, 3), T=st.integers(1, 4), Dh=st.integers(1, 4), Dv=st.integers(1, 4),
       which=st.sampled_from(["B", "Hkv", "T"]), extra=st.integers(1, 2), seed=seeds)
def test_kv_cache_append_rejects_disagreeing_shapes(subject, B, Hkv, T, Dh, Dv, which, extra, seed):
    """KVCache.append raises ValueError naming both sizes when key and value disagree on B, num_kv_heads or T, and when they are not 4-D; agreeing shapes are appended

    API page, unit 6: "`append(key, value) -> (keys, values)`: `key (B, Hkv, T, Dh)`, `value (B, Hkv, T, Dv)`
    [...] shapes that disagree with each other or with the cache raise `ValueError`."
    """
    # Checks: E14, E15.
    k, v = randn((B, Hkv, T, Dh), seed), randn((B, Hkv, T, Dv), seed + 1)
    keys, values = subject.run(Call(subject.unit, New("KVCache"), (k, v), method="append")).output
    assert_close(keys, k, atol=0, rtol=0, what="keys returned by the first append")  # a constant cache fails here
    assert_close(values, v, atol=0, rtol=0, what="values returned by the first append")
    dim = ("B", "Hkv", "T").index(which)
    shape = list(v.shape)
    shape[dim] += extra
    bad = randn(shape, seed + 2)
    raises(subject, Call(subject.unit, New("KVCache"), (k, bad), method="append"), "ValueError",
           mentions=(k.shape[dim], bad.shape[dim]), known=[(not_a_value_error, KV_AGREEMENT)])
    raises(subject, Call(subject.unit, New("KVCache"), (k[0], v[0]), method="append"), "ValueError")


@pytest.mark.points(1)
@pytest.mark.aspect("cache")
@settings(max_examples=6)
@given(cfg=configs(rope=True, min_len=3), seed=seeds, data=st.data())
def test_kv_cache_length_counts_tokens(subject, cfg, seed, data):
    """KVCache.length is the number of tokens held (S, dim -2 of keys), not the batch size, kv heads or head width: each decoding step after a prompt rotates its token at cache.length, as your full pass does

    API page, unit 6: "`length` (property) is S, 0 while empty"; GroupedQueryAttention's positions default
    to "`P + arange(L)` where `P = cache.length`".
    """
    # Checks: E13, E20.
    prompt = data.draw(st.integers(1, cfg.L - 2), label="prompt")  # two steps at least: length must grow
    chunks = [prompt] + [1] * (cfg.L - prompt)
    state, x = cfg.state(seed), cfg.x(seed + 3)
    got = subject.call("decode_in_chunks", cfg.recipe(state), x, chunks)
    assert_close(got[0], full_pass(subject, cfg, state, x), what=f"output decoded in chunks {chunks} against your full pass",
                 hints=lambda: decode_hints(cfg, state, x, chunks))


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
@settings(max_examples=6)
@given(cfg=configs(max_len=6, min_len=2), seed=seeds, data=st.data())
def test_decode_in_chunks_rejects_bad_chunk_sizes(subject, cfg, seed, data):
    """decode_in_chunks raises ValueError for chunk sizes that are not positive (a 0, or a negative one, though they sum to L) or do not sum to L; right sizes decode

    API page, unit 6: "Sizes that are not positive or do not sum to L raise `ValueError`."
    """
    # Checks: E29.
    chunks = data.draw(chunkings(cfg.L), label="chunk_sizes")
    state, x = cfg.state(seed), cfg.x(seed + 3)
    got = subject.call("decode_in_chunks", cfg.recipe(state), x, chunks)
    assert_roughly(got[0], cfg.oracle(state, x)[0], what=f"output decoded in chunks {chunks}")  # a constant fails here
    at = data.draw(st.integers(0, len(chunks)), label="where")
    wrong = [
        (chunks[:at] + [0] + chunks[at:], CHUNK_POSITIVE),  # a zero
        ([cfg.L + 1, -1], CHUNK_POSITIVE),  # a negative one; the sum is L
        (chunks[:-1] + [chunks[-1] + 1], CHUNK_SUM),  # one token too many
        (chunks[:-1] + ([chunks[-1] - 1] if chunks[-1] > 1 else []), CHUNK_SUM),  # one too few
    ]
    for sizes, advice in wrong:  # the module's own weights: the check comes before any of them is used
        raises(subject, Call(subject.unit, "decode_in_chunks", (cfg.recipe(None), x, sizes)), "ValueError",
               known=[(not_a_value_error, advice)])
