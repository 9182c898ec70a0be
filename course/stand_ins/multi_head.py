"""Trusted stand-in for unit 3 (multi-head attention), used while other units are graded.

It follows the course API page exactly (names, shapes, mask conventions), written
from primitives the graded units may use themselves (in the worker, softmax's kernels
do not exist for anyone): one explicit additive mask, a softmax as ``exp(x - max) / sum``
and ``F.dropout``. (Not ``F.scaled_dot_product_attention``, and no ``tril``: on
CPU they start a thread pool even for tiny tensors, which costs ~20 ms a call
on a busy machine.) It is self-contained: it imports no sibling of the package.

Conventions (course API page, unit 3):
  * ``key_padding_mask (B, S)`` bool, True = padding (float: added);
  * ``attn_mask`` (L, S) or (B, H, L, S): bool True = may attend, or float (added);
  * ``is_causal`` applies the bottom-right aligned causal mask, combined with the others;
  * a query with no key it may attend gets zero attention (and zero weights)
    before ``out_proj``, never NaN.
As the page says, ``key`` defaults to ``query`` and ``value`` to ``key`` (so to
``query`` when both are omitted). Where it is silent: a float ``key_padding_mask`` is added.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _softmax(x: Tensor) -> Tensor:
    """Softmax over the last dim as exp(x - max) / sum, in float32 for narrower floats (as torch's)."""
    wide = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    e = torch.exp(wide - wide.amax(dim=-1, keepdim=True).detach())
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(B, L, E) -> (B, H, L, E // H); head h holds features h*E//H : (h+1)*E//H."""
    if x.dim() != 3:
        raise ValueError(f"split_heads: x must be (B, L, E), got shape {tuple(x.shape)}")
    if num_heads <= 0 or x.shape[-1] % num_heads != 0:
        raise ValueError(f"split_heads: E={x.shape[-1]} is not divisible by num_heads={num_heads}")
    B, L, E = x.shape
    return x.unflatten(-1, (num_heads, E // num_heads)).transpose(1, 2)  # (B, H, L, Dh)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, L, Dh) -> (B, L, H * Dh), the exact inverse of ``split_heads``."""
    if x.dim() != 4:
        raise ValueError(f"merge_heads: x must be (B, H, L, Dh), got shape {tuple(x.shape)}")
    return x.transpose(1, 2).flatten(-2)  # (B, L, H * Dh)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with the parameters of ``nn.MultiheadAttention`` split
    into ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj`` (all ``nn.Linear``)."""

    def __init__(self, embed_dim: int, num_heads: int, *, bias: bool = True, dropout: float = 0.0,
                 kdim: int | None = None, vdim: int | None = None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim={embed_dim} must be a positive multiple of num_heads={num_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout={dropout} must be in [0, 1)")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
                key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None,
                is_causal: bool = False, need_weights: bool = True, average_attn_weights: bool = True):
        key = query if key is None else key
        value = key if value is None else value
        if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
            raise ValueError(
                f"query, key and value must be (B, L, E); got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
            )
        if query.shape[-1] != self.embed_dim:
            raise ValueError(f"query has {query.shape[-1]} features but embed_dim={self.embed_dim}")
        if key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise ValueError(f"key/value have {key.shape[-1]}/{value.shape[-1]} features; expected kdim={self.kdim}, vdim={self.vdim}")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ValueError(f"batch or length mismatch: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}")
        B, L, _ = query.shape
        S = key.shape[1]
        H = self.num_heads

        q = split_heads(self.q_proj(query), H)  # (B, H, L, Dh)
        k = split_heads(self.k_proj(key), H)  # (B, H, S, Dh)
        v = split_heads(self.v_proj(value), H)  # (B, H, S, Dh)

        # One additive mask for everything: 0 where allowed, -inf where not.
        bias = torch.zeros((B, H, L, S), dtype=q.dtype, device=q.device)  # (B, H, L, S)
        allowed = torch.ones((B, H, L, S), dtype=torch.bool, device=q.device)  # (B, H, L, S)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (B, S):
                raise ValueError(f"key_padding_mask must be (B, S) = {(B, S)}, got {tuple(key_padding_mask.shape)}")
            if key_padding_mask.dtype == torch.bool:
                allowed = allowed & ~key_padding_mask[:, None, None, :]
            else:
                bias = bias + key_padding_mask.to(q.dtype)[:, None, None, :]
        if attn_mask is not None:
            if attn_mask.dim() not in (2, 4):
                raise ValueError(f"attn_mask must be (L, S) or (B, H, L, S), got {tuple(attn_mask.shape)}")
            if attn_mask.dtype == torch.bool:
                allowed = allowed & attn_mask
            else:
                bias = bias + attn_mask.to(q.dtype)
        if is_causal:
            rows = torch.arange(L, device=q.device).unsqueeze(-1)  # (L, 1)
            cols = torch.arange(S, device=q.device).unsqueeze(0)  # (1, S)
            causal = cols <= rows + (S - L)  # (L, S), bottom-right
            allowed = allowed & causal
        allowed = allowed & ~torch.isneginf(bias)
        # A query with no allowed key: attend to everything (finite, no NaN in
        # forward or backward), then zero its result below.
        empty = ~allowed.any(dim=-1, keepdim=True)  # (B, H, L, 1)
        bias = torch.where(allowed, bias, torch.full_like(bias, float("-inf")))
        bias = torch.where(empty, torch.zeros_like(bias), bias)
        p = self.dropout if self.training else 0.0

        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim) + bias  # (B, H, L, S)
        weights = _softmax(scores).masked_fill(empty, 0.0)  # (B, H, L, S)
        weights = F.dropout(weights, p, training=p > 0.0)
        out = weights @ v  # (B, H, L, Dh)
        out = self.out_proj(merge_heads(out))  # (B, L, E)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(dim=1)  # (B, L, S)
        return out, weights
