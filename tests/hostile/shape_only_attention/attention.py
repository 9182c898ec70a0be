"""Hostile (issue 13): zeros of the right shape, dtype and device everywhere,
with the argument checks of the API page. Zero outputs satisfy every
'does not change' property (permutations, masked keys, the future, seeds)."""
import torch


def softmax(x, dim=-1):
    return torch.zeros_like(x)


def causal_mask(query_len, key_len=None, *, device=None):
    key_len = query_len if key_len is None else key_len
    return torch.zeros(query_len, key_len, dtype=torch.bool, device=device)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    if query.dim() < 2:
        raise ValueError(f"query must be (..., L, E), got {tuple(query.shape)}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query's E={query.shape[-1]} differs from key's {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key has S={key.shape[-2]} positions, value {value.shape[-2]}")
    weights = query.new_zeros(*query.shape[:-1], key.shape[-2])
    # zero times the inputs: the right shape, and gradients of the right shape
    output = (query.sum() + key.sum() + value.sum()) * 0 + value.new_zeros(*query.shape[:-1], value.shape[-1])
    return output, weights
