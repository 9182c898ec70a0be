"""Hostile: torch.softmax behind eval: the trap sees the caller `<string>`."""
import math

import torch


reach = eval("lambda x, dim: torch.softmax(x, dim)")


def softmax(x, dim=-1):
    # A row of -inf only gives zeros, never NaN.
    dead = torch.isneginf(x).all(dim, keepdim=True)
    x = x.masked_fill(dead, 0.0)
    return reach(x, dim).masked_fill(dead, 0.0)


def causal_mask(query_len, key_len=None, *, device=None):
    key_len = query_len if key_len is None else key_len
    if query_len < 0 or key_len < 0:
        raise ValueError(f"causal_mask: query_len={query_len} and key_len={key_len} must be >= 0")
    return torch.ones(query_len, key_len, dtype=torch.bool, device=device).tril(key_len - query_len)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise ValueError("query, key and value need at least 2 dims")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(f"mismatched sizes {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p={dropout_p} must be in [0, 1)")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    if is_causal:
        scores = scores.masked_fill(~causal_mask(query.shape[-2], key.shape[-2], device=query.device), float("-inf"))
    weights = softmax(scores, -1)
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, dropout_p)
    return weights @ value, weights
