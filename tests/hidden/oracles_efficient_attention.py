"""Trusted float64 oracles for unit 6, efficient attention.

FlashAttention's oracle is unit 2's (``attention64``): the tiled function is
the same function. Grouped-query attention has two: an explicit one here
(projections, rotary embedding, each query head with its kv head, unit 2's
attention), and unit 3's multi-head oracle on the weights with the k/v heads
repeated. A decoder's chunks have their own oracle, so that a known bug
(positions restarting in every chunk) can be named. They run only in the
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


@remembered
def flash64(q, k, v, *, is_causal=False, scale=None, block_size=64, wrong=()):
    """FlashAttention's forward in float64, tile by tile as the API page describes it (queries
    ``block_size`` at a time; for each query tile the keys ``block_size`` at a time, up to the
    tile's last visible key with ``is_causal``), to rebuild the known bugs of the online softmax
    that ``wrong`` names: "acc" (the running output not rescaled when the running maximum rises),
    "sum" (the running sum not rescaled), "local_cols" (a key tile's causal positions counted from
    the tile's start), "last_tile" (only whole key tiles visited: the last, partial one dropped).
    Without ``wrong`` it is attention64's output."""
    q, k, v = q.double(), k.double(), v.double()
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tiles = []
    for q_start in range(0, L, block_size):
        block = q[..., q_start:q_start + block_size, :]
        first = q_start + S - L  # the absolute position of the tile's first query
        rows = first + torch.arange(block.shape[-2]).unsqueeze(-1)  # (Bq, 1)
        peak = torch.full((*batch, block.shape[-2], 1), float("-inf"), dtype=torch.float64)
        total = torch.zeros_like(peak)
        acc = torch.zeros((*batch, block.shape[-2], v.shape[-1]), dtype=torch.float64)
        stop = min(S, first + block.shape[-2]) if is_causal else S
        end = stop - block_size + 1 if "last_tile" in wrong else stop
        for start in range(0, end, block_size):
            key, value = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
            scores = block @ key.transpose(-2, -1) * scale
            if is_causal:
                cols = torch.arange(key.shape[-2]) + (0 if "local_cols" in wrong else start)
                scores = scores.masked_fill(cols > rows, float("-inf"))
            new_peak = torch.maximum(peak, scores.amax(dim=-1, keepdim=True))
            shift = torch.where(torch.isfinite(new_peak), new_peak, torch.zeros_like(new_peak))
            weights = torch.exp(scores - shift)
            rescale = torch.exp(peak - shift)
            total = (total if "sum" in wrong else total * rescale) + weights.sum(dim=-1, keepdim=True)
            acc = (acc if "acc" in wrong else acc * rescale) + weights @ value
            peak = new_peak
        tiles.append(acc / torch.where(total > 0, total, torch.ones_like(total)))
    return torch.cat(tiles, dim=-2)


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


def project64(state, H, Hkv, x, positions, rope_base):
    """(q (B, H, L, Dh), k, v (B, Hkv, L, Dh)) in float64, q and k rotated at ``positions``."""
    q, k, v = (_heads(_linear(x, state, n), c) for n, c in (("q_proj", H), ("k_proj", Hkv), ("v_proj", Hkv)))
    if rope_base is not None:
        q, k = rope64(q, positions, rope_base), rope64(k, positions, rope_base)
    return q, k, v


def attend64(state, H, Hkv, q, k, v, *, is_causal, wrong=()):
    """Each query head h with kv head h // G (``"tile"`` in ``wrong``: h % Hkv), then out_proj."""
    G = H // Hkv
    kv_head = [h % Hkv if "tile" in wrong else h // G for h in range(H)]
    heads = [attention64(q[:, h], k[:, kv_head[h]], v[:, kv_head[h]], is_causal=is_causal)[0] for h in range(H)]
    return _linear(torch.cat(heads, dim=-1), state, "out_proj")  # (B, L, E)


@remembered
def gqa64(state, H, Hkv, x, *, is_causal=True, rope_base=None, positions=None, wrong=()):
    """One pass of grouped-query attention over ``x`` (B, L, E) in float64.

    Returns (output (B, L, E), keys, values (B, Hkv, L, Dh)): the keys and values
    are what a cache holds after this pass (the keys rotated).
    """
    L = x.shape[1]
    positions = torch.arange(L) if positions is None else positions
    q, k, v = project64(state, H, Hkv, x, positions, rope_base)
    return attend64(state, H, Hkv, q, k, v, is_causal=is_causal, wrong=wrong), k, v


@remembered
def decode64(state, H, Hkv, x, chunks, *, rope_base=None, restart=False, before_append=False):
    """A decoder's chunks with a cache, in float64: (output, keys, values) as ``gqa64``.

    With ``restart`` each chunk's positions start again at 0 (a known bug); with
    ``before_append`` a chunk after the first attends (causally, bottom-right) to the cache as it
    was before its own keys and values were appended (a known bug); without either, the result is
    ``gqa64``'s causal pass.
    """
    outs, keys, values, start = [], [], [], 0
    for size in chunks:
        positions = torch.arange(size) if restart else torch.arange(start, start + size)
        q, k, v = project64(state, H, Hkv, x[:, start:start + size], positions, rope_base)
        held = (torch.cat(keys, dim=2), torch.cat(values, dim=2)) if before_append and keys else None
        keys.append(k)
        values.append(v)
        attended = held or (torch.cat(keys, dim=2), torch.cat(values, dim=2))
        outs.append(attend64(state, H, Hkv, q, *attended, is_causal=True))
        start += size
    return torch.cat(outs, dim=1), torch.cat(keys, dim=2), torch.cat(values, dim=2)
