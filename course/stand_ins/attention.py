"""Trusted stand-in for unit 2 (``attention.py``), used while another unit is graded.

It follows the course API page exactly (True = may attend, float masks added,
``is_causal`` aligned bottom-right and combined with ``attn_mask``, rows with
no allowed key give zeros, dropout on the weights), written from primitives the
graded units may use themselves: in the worker, softmax's kernels do not exist for
anyone, so its softmax is ``exp(x - max) / sum``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x - max) / sum along ``dim`` (in float32 for narrower floats, as torch.softmax), with
    zeros (not NaN) for a slice that is all -inf."""
    wide = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    dead = torch.isneginf(wide).all(dim=dim, keepdim=True)
    safe = torch.where(dead, torch.zeros((), dtype=wide.dtype, device=x.device), wide)
    e = torch.exp(safe - safe.amax(dim=dim, keepdim=True).detach())
    out = e / e.sum(dim=dim, keepdim=True)
    return torch.where(dead, torch.zeros((), dtype=wide.dtype, device=x.device), out).to(x.dtype)


def causal_mask(query_len: int, key_len: int | None = None, *, device=None) -> Tensor:
    """(L, S) bool, True = may attend; query i may see key j iff j <= i + S - L."""
    key_len = query_len if key_len is None else key_len
    if query_len < 0 or key_len < 0:
        raise ValueError(f"causal_mask: query_len={query_len} and key_len={key_len} must be >= 0")
    ones = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=key_len - query_len)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Returns (output (..., L, Ev), weights (..., L, S)), as the API page says."""
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise ValueError(
            f"query, key and value need at least 2 dims; got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query's last dim {query.shape[-1]} must equal key's last dim {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key has {key.shape[-2]} positions but value has {value.shape[-2]}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p={dropout_p} must be in [0, 1)")
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale  # (..., L, S)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = torch.where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    if is_causal:
        scores = torch.where(causal_mask(L, S, device=query.device), scores, float("-inf"))
    weights = softmax(scores, dim=-1)  # (..., L, S)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    return torch.matmul(weights, value), weights  # (..., L, Ev), (..., L, S)
