"""A correct unit 2 in another style: einsum, float64 accumulation, additive masks.

Written from the API page alone; it must score full marks.
"""
import torch


def softmax(x, dim=-1):
    wide = x.to(torch.float64)
    top = wide.max(dim=dim, keepdim=True).values
    top = top.nan_to_num(neginf=0.0)
    e = (wide - top).exp()
    total = e.sum(dim=dim, keepdim=True)
    return (e / total.clamp_min(torch.finfo(torch.float64).tiny)).to(x.dtype)


def causal_mask(query_len, key_len=None, *, device=None):
    key_len = query_len if key_len is None else key_len
    if query_len < 0 or key_len < 0:
        raise ValueError(f"lengths must be >= 0, got query_len={query_len}, key_len={key_len}")
    ones = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=key_len - query_len)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., length, features), got {list(t.shape)}")
    if query.size(-1) != key.size(-1):
        raise ValueError(f"query has {query.size(-1)} features but key has {key.size(-1)}")
    if key.size(-2) != value.size(-2):
        raise ValueError(f"key has length {key.size(-2)} but value has length {value.size(-2)}")
    if not (0.0 <= dropout_p < 1.0):
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    L, S = query.size(-2), key.size(-2)
    factor = query.size(-1) ** -0.5 if scale is None else scale
    logits = torch.einsum("...le,...se->...ls", query.double(), key.double()) * factor
    blocked = torch.tensor(float("-inf"), dtype=torch.float64, device=query.device)
    bias = torch.zeros((L, S), dtype=torch.float64, device=query.device)
    if is_causal:
        bias = torch.where(causal_mask(L, S, device=query.device), bias, blocked)
    if attn_mask is not None:
        bias = torch.where(attn_mask, bias, blocked) if attn_mask.dtype == torch.bool else bias + attn_mask.double()
    attn = softmax(logits + bias, dim=-1)
    if dropout_p:
        attn = attn * (torch.rand_like(attn) > dropout_p) / (1 - dropout_p)
    out = torch.einsum("...ls,...sv->...lv", attn, value.double())
    return out.to(value.dtype), attn.to(query.dtype)
