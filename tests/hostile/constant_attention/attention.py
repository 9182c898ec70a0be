"""Hostile (issue 13): uniform attention. Softmax is uniform, the causal mask
all True, every weight 1/S and the output the mean of the values, with the
argument checks of the API page, so shapes, dtypes, devices and relative
properties look right while nothing real is computed."""
import torch


def softmax(x, dim=-1):
    return torch.ones_like(x) / x.shape[dim]


def causal_mask(query_len, key_len=None, *, device=None):
    key_len = query_len if key_len is None else key_len
    return torch.ones(query_len, key_len, dtype=torch.bool, device=device)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    if query.dim() < 2:
        raise ValueError(f"query must be (..., L, E), got {tuple(query.shape)}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query's E={query.shape[-1]} differs from key's {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key has S={key.shape[-2]} positions, value {value.shape[-2]}")
    L, S = query.shape[-2], key.shape[-2]
    weights = torch.ones(*query.shape[:-1], S, dtype=query.dtype, device=query.device) / S
    return weights @ value, weights
