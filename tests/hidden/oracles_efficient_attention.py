"""Trusted float64 oracles for unit 6, efficient attention.

FlashAttention's oracle is unit 2's (``attention64``): the tiled function is
the same function. Grouped-query attention has two: an explicit one here
(projections, rotary embedding, each query head with its kv head, unit 2's
attention), and unit 3's multi-head oracle on the weights with the k/v heads
repeated. A decoder's chunks have their own oracle, so that its known bugs
(positions restarting in every chunk, a top-left mask over the cache...) can
be named, as the online softmax's are by ``flash64``. They run only in the
grader, never in student code.
"""
from __future__ import annotations

import math

import torch

from oracles_attention import attention64
from oracles_positional_encoding import rope64
from tensors import randn

from autograder.testing.memo import remembered

PARAMS = ("q_proj", "k_proj", "v_proj", "out_proj")


@remembered
def attention_rows64(q, k, v, *, is_causal=False, rows=128):
    """attention64's output, computed ``rows`` queries at a time, so that a long sequence
    costs the grader (rows, S), not (L, S)."""
    L, S = q.shape[-2], k.shape[-2]
    out = []
    for start in range(0, L, rows):
        block = q[..., start:start + rows, :]
        # Query i of the whole sequence sits at i + S - L: the block's mask keeps absolute positions.
        mask = None
        if is_causal:
            i = torch.arange(start, start + block.shape[-2]).unsqueeze(1)
            mask = torch.arange(S).unsqueeze(0) <= i + (S - L)
        out.append(attention64(block, k, v, mask)[0])
    return torch.cat(out, dim=-2)


# The known bugs of the online softmax that ``flash64`` rebuilds, by name (see its docstring).
FLASH_BUGS = ("acc", "sum", "late_max", "raw", "sentinel", "nan_shift", "divide", "stop_early", "strict", "top_left",
              "local_cols", "last_tile", "inplace", "detach_acc")


@remembered
def flash64(q, k, v, *, is_causal=False, scale=None, block_size=64, wrong=(), work=torch.float64):
    """FlashAttention's forward tile by tile as the API page describes it (queries ``block_size`` at
    a time; for each query tile the keys ``block_size`` at a time, up to the tile's last visible key
    with ``is_causal``), in ``work`` (float64; bfloat16 rebuilds running sums kept in bfloat16), to
    rebuild the known bugs of the online softmax that ``wrong`` names:

      * "acc" / "sum": the running output / the running sum not rescaled when the running maximum
        rises (both: the online softmax without its rescale);
      * "late_max": each tile's exponent taken with the running maximum from before the tile, the
        new maximum only after it;
      * "raw": exp of the raw scores, no maximum subtracted (nor any rescale);
      * "sentinel": the running maximum starts at -5e4, not -inf;
      * "nan_shift": a row with no visible key yet shifted by its -inf maximum (exp gives NaN);
      * "divide": the final acc / l divides 0 by 0 for a row that saw no key;
      * "stop_early": with is_causal, a query tile's key loop stops one key early;
      * "strict": the causal mask hides the diagonal (key j visible only if j < i + S - L);
      * "top_left": the causal mask aligned top-left (query i at position i);
      * "local_cols": a key tile's causal positions counted from the tile's start;
      * "last_tile": only whole key tiles visited (the last, partial one dropped);
      * "inplace": the query tile multiplied by the scale in place at every key tile, so the
        scale compounds (q.mul_(scale) @ k^T);
      * "detach_acc": no gradient through the running output (acc detached after each tile).

    Without ``wrong`` it is attention64's output.
    """
    assert set(wrong) <= set(FLASH_BUGS), wrong
    q, k, v = q.to(work), k.to(work), v.to(work)
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tiles = []
    for q_start in range(0, L, block_size):
        block = q[..., q_start:q_start + block_size, :]
        # The absolute position of the tile's first query.
        first = q_start if "top_left" in wrong else q_start + S - L
        rows = first + torch.arange(block.shape[-2]).unsqueeze(-1)  # (Bq, 1)
        peak = torch.full((*batch, block.shape[-2], 1), -5e4 if "sentinel" in wrong else float("-inf"), dtype=work)
        total = torch.zeros_like(peak)
        acc = torch.zeros((*batch, block.shape[-2], v.shape[-1]), dtype=work)
        stop = min(S, first + block.shape[-2] - ("stop_early" in wrong)) if is_causal else S
        end = stop - block_size + 1 if "last_tile" in wrong else stop
        for start in range(0, end, block_size):
            key, value = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
            if "inplace" in wrong:
                block = block * scale
                scores = block @ key.transpose(-2, -1)
            else:
                scores = block @ key.transpose(-2, -1) * scale
            if is_causal:
                cols = torch.arange(key.shape[-2]) + (0 if "local_cols" in wrong else start)
                scores = scores.masked_fill(cols >= rows if "strict" in wrong else cols > rows, float("-inf"))
            new_peak = torch.maximum(peak, scores.amax(dim=-1, keepdim=True))
            # The maximum each exponent is taken against: the new one (the old one with "late_max").
            against = peak if "late_max" in wrong else new_peak
            shift = against if "nan_shift" in wrong else torch.where(torch.isfinite(against), against,
                                                                     torch.zeros_like(against))
            weights = torch.exp(scores) if "raw" in wrong else torch.exp(scores - shift)
            rescale = torch.ones_like(peak) if "raw" in wrong else torch.exp(peak - shift)
            total = (total if "sum" in wrong else total * rescale) + weights.sum(dim=-1, keepdim=True)
            acc = (acc if "acc" in wrong else acc * rescale) + weights @ value
            acc = acc.detach() if "detach_acc" in wrong else acc
            peak = new_peak
        tiles.append(acc / total if "divide" in wrong else acc / torch.where(total > 0, total, torch.ones_like(total)))
    return torch.cat(tiles, dim=-2)


def flash_gradients64(q, k, v, grad_output, *, is_causal=False, block_size=64, wrong=()):
    """The gradients of ``<flash64(q, k, v, wrong=wrong), grad_output>`` with respect to q, k and v,
    in float64 (what a backward call of that function returns)."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out = flash64(*leaves, is_causal=is_causal, block_size=block_size, wrong=wrong)
    return torch.autograd.grad(out, leaves, grad_output.double(), allow_unused=True)


def flattened64(q, k, v, *, is_causal=False):
    """attention64 with the leading dims flattened to one each (``reshape(-1, len, dim)``, as ``bmm``
    wants) and the output given query's leading dims: a known bug that pairs the wrong rows of
    inputs whose batch shapes differ. None where the flattened batches do not broadcast (the bug
    then raises)."""
    flat = [t.reshape(-1, *t.shape[-2:]) for t in (q, k, v)]
    try:
        torch.broadcast_shapes(*(t.shape[:1] for t in flat))
    except RuntimeError:
        return None
    return attention64(*flat, is_causal=is_causal)[0].reshape(*q.shape[:-1], -1)


def gqa_state(E: int, H: int, Hkv: int, bias: bool, seed: int, *, dtype=torch.float32) -> dict:
    """A seeded state_dict for ``GroupedQueryAttention(E, H, Hkv, bias=bias)``."""
    kv = Hkv * (E // H)
    shapes = {"q_proj": (E, E), "k_proj": (kv, E), "v_proj": (kv, E), "out_proj": (E, E)}
    state = {}
    for i, name in enumerate(PARAMS):
        out_features, in_features = shapes[name]
        state[f"{name}.weight"] = randn(shapes[name], seed + 10 * i, dtype=dtype, scale=1.5 / math.sqrt(in_features))
        if bias:
            state[f"{name}.bias"] = randn((out_features,), seed + 10 * i + 1, dtype=dtype, scale=0.5)
    return state


def gqa_keys(E: int, H: int, Hkv: int, bias: bool) -> dict[str, tuple[int, ...]]:
    """The state_dict keys and shapes the API page fixes."""
    kv = Hkv * (E // H)
    shapes = {"q_proj": (E, E), "k_proj": (kv, E), "v_proj": (kv, E), "out_proj": (E, E)}
    keys = {f"{n}.weight": s for n, s in shapes.items()}
    if bias:
        keys.update({f"{n}.bias": (s[0],) for n, s in shapes.items()})
    return keys


def repeated_state(state: dict, H: int, Hkv: int) -> dict:
    """Unit 3's MultiHeadAttention weights computing the same function: each kv head's rows of
    k_proj and v_proj repeated for the G = H / Hkv query heads of its group."""
    Dh = state["q_proj.weight"].shape[0] // H
    G = H // Hkv
    rows = torch.cat([torch.arange((h // G) * Dh, (h // G + 1) * Dh) for h in range(H)])
    out = dict(state)
    for name in ("k_proj", "v_proj"):
        out[f"{name}.weight"] = state[f"{name}.weight"][rows]
        if f"{name}.bias" in state:
            out[f"{name}.bias"] = state[f"{name}.bias"][rows]
    return out


def _linear(x, state, name):
    y = x.double() @ state[f"{name}.weight"].double().T
    return y + state[f"{name}.bias"].double() if f"{name}.bias" in state else y


def _heads(x, count):
    B, L, F = x.shape
    return x.reshape(B, L, count, F // count).transpose(1, 2)  # (B, count, L, F // count)


def project64(state, H, Hkv, x, positions, rope_base, *, wrong=()):
    """(q (B, H, L, Dh), k, v (B, Hkv, L, Dh)) in float64, q and k rotated at ``positions``
    (``"rope_q_only"`` in ``wrong``: q only)."""
    q, k, v = (_heads(_linear(x, state, n), c) for n, c in (("q_proj", H), ("k_proj", Hkv), ("v_proj", Hkv)))
    if rope_base is not None:
        q = rope64(q, positions, rope_base)
        k = k if "rope_q_only" in wrong else rope64(k, positions, rope_base)
    return q, k, v


def attend64(state, H, Hkv, q, k, v, *, is_causal, wrong=(), scale=None):
    """Each query head h with kv head h // G (``"tile"`` in ``wrong``: h % Hkv; ``"top_left"``: the
    causal mask aligned top-left), scores scaled by ``scale`` (default 1/sqrt(Dh)), then out_proj."""
    G = H // Hkv
    kv_head = [h % Hkv if "tile" in wrong else h // G for h in range(H)]
    heads = [attention64(q[:, h], k[:, kv_head[h]], v[:, kv_head[h]], is_causal=is_causal, scale=scale,
                         causal_top_left="top_left" in wrong)[0] for h in range(H)]
    return _linear(torch.cat(heads, dim=-1), state, "out_proj")  # (B, L, E)


@remembered
def gqa64(state, H, Hkv, x, *, is_causal=True, rope_base=None, positions=None, wrong=(), scale=None):
    """One pass of grouped-query attention over ``x`` (B, L, E) in float64 (``wrong`` and ``scale``
    as ``project64`` and ``attend64`` take them, to rebuild known bugs).

    Returns (output (B, L, E), keys, values (B, Hkv, L, Dh)): the keys and values
    are what a cache holds after this pass (the keys rotated).
    """
    L = x.shape[1]
    positions = torch.arange(L) if positions is None else positions
    q, k, v = project64(state, H, Hkv, x, positions, rope_base, wrong=wrong)
    return attend64(state, H, Hkv, q, k, v, is_causal=is_causal, wrong=wrong, scale=scale), k, v


# The known bugs of a decoder's cache that ``decode64`` rebuilds, by name (see its docstring).
DECODE_BUGS = ("restart", "length_is_batch", "before_append", "top_left", "prepend", "fresh", "not_causal")


@remembered
def decode64(state, H, Hkv, x, chunks, *, rope_base=None, wrong=()):
    """A decoder's chunks with a cache, in float64: (output, keys, values) as ``gqa64``, keys and
    values None where the cache stays empty. ``wrong`` names known bugs:

      * "restart": each chunk's positions start again at 0;
      * "length_is_batch": the cache's length read as its batch size (len(keys)), so a chunk after
        the first sits at B + arange(size);
      * "before_append": a chunk after the first attends (causally, bottom-right) to the cache as it
        was before its own keys and values were appended;
      * "top_left": the causal mask over the cached and new keys aligned top-left (new token i sees
        keys j <= i);
      * "prepend": the new keys and values go before the cached ones;
      * "fresh": a new cache for every chunk, so each chunk attends to itself alone from position 0
        (and the cache handed back stays empty);
      * "not_causal": with a cache the mask is dropped, so a chunk sees its own future.

    Without ``wrong`` the result is ``gqa64``'s causal pass.
    """
    assert set(wrong) <= set(DECODE_BUGS), wrong
    outs, keys, values, start = [], [], [], 0
    B = x.shape[0]
    for size in chunks:
        first = 0 if "restart" in wrong or "fresh" in wrong else (B if start else 0) if "length_is_batch" in wrong \
            else start
        q, k, v = project64(state, H, Hkv, x[:, start:start + size], first + torch.arange(size), rope_base)
        held = (torch.cat(keys, dim=2), torch.cat(values, dim=2)) if keys else None
        if "fresh" in wrong:
            keys, values = [k], [v]
        elif "prepend" in wrong:
            keys, values = [k, *keys], [v, *values]
        else:
            keys, values = [*keys, k], [*values, v]
        attended = held if "before_append" in wrong and held else (torch.cat(keys, dim=2), torch.cat(values, dim=2))
        outs.append(attend64(state, H, Hkv, q, *attended, is_causal="not_causal" not in wrong,
                             wrong=("top_left",) if "top_left" in wrong else ()))
        start += size
    if "fresh" in wrong:
        return torch.cat(outs, dim=1), None, None
    return torch.cat(outs, dim=1), torch.cat(keys, dim=2), torch.cat(values, dim=2)
