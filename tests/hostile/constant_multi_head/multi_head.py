"""Hostile (issue 13): the right parameters, zero outputs and uniform weights,
with the argument checks of the API page. Nothing is projected or attended."""
import torch
from torch import nn


def split_heads(x, num_heads):
    if x.dim() != 3 or x.shape[-1] % num_heads:
        raise ValueError(f"split_heads: E={x.shape[-1]} is not divisible by num_heads={num_heads}")
    B, L, E = x.shape
    return x.new_zeros(B, num_heads, L, E // num_heads)


def merge_heads(x):
    if x.dim() != 4:
        raise ValueError(f"merge_heads: x must be (B, H, L, Dh), got {tuple(x.shape)}")
    B, H, L, Dh = x.shape
    return x.new_zeros(B, L, H * Dh)


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, *, bias=True, dropout=0.0, kdim=None, vdim=None):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        self.num_heads, self.kdim, self.vdim = num_heads, kdim or embed_dim, vdim or embed_dim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, query, key=None, value=None, *, key_padding_mask=None, attn_mask=None, is_causal=False,
                need_weights=True, average_attn_weights=True):
        key = query if key is None else key
        value = key if value is None else value
        E = self.q_proj.in_features
        for name, t, width in (("query", query, E), ("key", key, self.kdim), ("value", value, self.vdim)):
            if t.dim() != 3 or t.shape[-1] != width:
                raise ValueError(f"{name} must be (B, length, {width}), got {tuple(t.shape)}")
        B, L, _ = query.shape
        S = key.shape[1]
        # zero times the inputs: outputs of the right shape that still reach autograd
        output = (query.sum() + key.sum() + value.sum()) * 0 + query.new_zeros(B, L, E)
        if not need_weights:
            return output, None
        shape = (B, L, S) if average_attn_weights else (B, self.num_heads, L, S)
        return output, query.new_ones(shape) / S
