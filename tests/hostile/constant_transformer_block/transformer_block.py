"""Hostile (issue 13): modules with the right parameters whose forward passes
return zeros (LayerNorm, FeedForward) or the input itself (the block), with
the argument checks of the API page. Identity is causal, position-wise,
permutation-equivariant and deterministic; nothing is computed."""
import torch
from torch import nn

from .multi_head import MultiHeadAttention


class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.d = normalized_shape
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(normalized_shape))
            self.bias = nn.Parameter(torch.zeros(normalized_shape)) if bias else None
        else:
            self.weight = self.bias = None

    def forward(self, x):
        if x.shape[-1] != self.d:
            raise ValueError(f"x's last dim {x.shape[-1]} is not normalized_shape={self.d}")
        return x * 0


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, bias=True):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return x * 0


class TransformerBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, *, dropout=0.0, norm_first=False, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} must be a multiple of num_heads={num_heads}")
        self.d_model = d_model
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, bias=bias)
        self.norm1 = LayerNorm(d_model, bias=bias)
        self.norm2 = LayerNorm(d_model, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, *, attn_mask=None, key_padding_mask=None, is_causal=False):
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, L, d_model={self.d_model}), got {tuple(x.shape)}")
        return x.clone()
