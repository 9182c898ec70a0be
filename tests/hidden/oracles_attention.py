"""Trusted float64 oracles, written for clarity rather than speed.

They may use the very torch functions that students must not: they run only
in the grader, never in student code.
"""
from __future__ import annotations

import math

import torch

from autograder.testing.memo import remembered


def causal_allowed(L: int, S: int) -> torch.Tensor:
    """(L, S) bool: query i at absolute position i + S - L may see key j <= i + S - L."""
    i = torch.arange(L).unsqueeze(1)
    j = torch.arange(S).unsqueeze(0)
    return j <= i + (S - L)


def softmax64(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax in float64; an all -inf slice gives zeros."""
    return torch.softmax(x.double(), dim=dim).nan_to_num(0.0)


@remembered
def attention64(q, k, v, mask=None, *, is_causal=False, scale=None, softmax_dim=-1, causal_top_left=False,
                causal_strict=False, finite=False, mask_after_softmax=False):
    """Scaled dot-product attention in float64: returns (output, weights).

    ``softmax_dim``, ``causal_top_left``, ``causal_strict`` (the diagonal hidden),
    ``finite`` (masked scores set to -1e9, so a fully masked row gets uniform
    weights) and ``mask_after_softmax`` (the softmax over every key, the masked
    weights zeroed after it, so a row no longer sums to 1) exist to build
    known-wrong answers for hints; the right answer uses their defaults.
    """
    q, k, v = q.double(), k.double(), v.double()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    allowed = torch.ones(scores.shape, dtype=torch.bool)
    if mask is not None and mask.dtype == torch.bool:
        allowed = allowed & mask
    elif mask is not None:
        scores = scores + mask.double()
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        top_left = torch.arange(S).unsqueeze(0) <= torch.arange(L).unsqueeze(1)
        strict = torch.arange(S).unsqueeze(0) < torch.arange(L).unsqueeze(1) + (S - L)
        allowed = allowed & (top_left if causal_top_left else strict if causal_strict else causal_allowed(L, S))
    if finite:
        weights = softmax64(scores.masked_fill(~allowed, -1e9), dim=softmax_dim)
    elif mask_after_softmax:
        weights = softmax64(scores, dim=softmax_dim).masked_fill(~allowed, 0.0)
    else:
        weights = softmax64(scores.masked_fill(~allowed, float("-inf")), dim=softmax_dim).masked_fill(~allowed, 0.0)
    return weights @ v, weights
