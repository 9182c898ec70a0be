"""A correct unit 3 in another style: packed in_proj for self-attention, einsum
per-head projections otherwise, one additive float mask.

Written from the API page alone; it must score full marks.
"""
import torch
import torch.nn.functional as F
from torch import nn

from .attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    if x.ndim != 3:
        raise ValueError(f"split_heads expects x of shape (B, L, E), got {list(x.shape)}")
    if num_heads < 1 or x.size(-1) % num_heads:
        raise ValueError(f"split_heads: E = {x.size(-1)} is not a multiple of num_heads = {num_heads}")
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


def merge_heads(x):
    if x.ndim != 4:
        raise ValueError(f"merge_heads expects x of shape (B, H, L, Dh), got {list(x.shape)}")
    return x.permute(0, 2, 1, 3).flatten(-2)


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, *, bias=True, dropout=0.0, kdim=None, vdim=None):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"num_heads = {num_heads} does not divide embed_dim = {embed_dim}")
        self.h = num_heads
        self.p = dropout
        self.dims = (embed_dim, kdim or embed_dim, vdim or embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.dims[1], embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.dims[2], embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _heads(self, x, proj):
        # (B, T, D) x (H, Dh, D) -> (B, H, T, Dh), the head split done by the weight's view.
        w = proj.weight.unflatten(0, (self.h, -1))
        y = torch.einsum("btd,hkd->bhtk", x, w)
        if proj.bias is not None:
            y = y + proj.bias.view(self.h, 1, -1)
        return y

    def forward(self, query, key=None, value=None, *, key_padding_mask=None, attn_mask=None, is_causal=False,
                need_weights=True, average_attn_weights=True):
        self_attn = key is None and value is None
        key = query if key is None else key
        value = key if value is None else value
        for name, t, d in zip(("query", "key", "value"), (query, key, value), self.dims):
            if t.ndim != 3 or t.size(-1) != d:
                raise ValueError(f"{name} should be (batch, length, {d}); got {list(t.shape)}")
        B, S = query.size(0), key.size(1)
        if self_attn and self.dims[1] == self.dims[2] == self.dims[0]:
            packed_w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
            packed_b = None if self.q_proj.bias is None else torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
            q, k, v = (split_heads(t, self.h) for t in F.linear(query, packed_w, packed_b).chunk(3, dim=-1))
        else:
            q, k, v = self._heads(query, self.q_proj), self._heads(key, self.k_proj), self._heads(value, self.v_proj)

        bias = query.new_zeros(B, 1, 1, S)
        if key_padding_mask is not None:
            bias = bias.masked_fill(key_padding_mask.view(B, 1, 1, S), float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                bias = torch.where(attn_mask, bias, float("-inf"))
            else:
                bias = bias + attn_mask
        p = self.p if self.training else 0.0
        ctx, attn = scaled_dot_product_attention(q, k, v, bias, is_causal=is_causal, dropout_p=p)
        out = self.out_proj(merge_heads(ctx))
        if not need_weights:
            return out, None
        return out, attn.mean(1) if average_attn_weights else attn
