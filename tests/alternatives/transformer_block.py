"""A correct unit 5 in another style: float64 statistics, E[x^2] - E[x]^2 variance,
F.gelu, functional dropout, a sublayer helper, and bias=False by building the
layers without biases.

Written from the API page alone; it must score full marks.
"""
import torch
import torch.nn.functional as F
from torch import nn

from .multi_head import MultiHeadAttention


class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.d, self.eps = int(normalized_shape), float(eps)
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.d))
            self.bias = nn.Parameter(torch.zeros(self.d)) if bias else None
        else:
            self.weight = self.bias = None

    def forward(self, x):
        if x.size(-1) != self.d:
            raise ValueError(f"expected last dimension {self.d}, got input of shape {list(x.shape)}")
        wide = x.double()
        mu = wide.mean(-1, keepdim=True)
        second = (wide * wide).mean(-1, keepdim=True)
        var = (second - mu * mu).clamp_min(0.0)
        out = ((wide - mu) / torch.sqrt(var + self.eps)).to(x.dtype)
        if self.weight is not None:
            out = torch.addcmul(self.bias if self.bias is not None else torch.zeros_like(out), out, self.weight)
        return out


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, bias=True):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.p = dropout

    def forward(self, x):
        hidden = F.gelu(self.linear1(x), approximate="none")
        return self.linear2(F.dropout(hidden, self.p, self.training))


class TransformerBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, *, dropout=0.0, norm_first=False, bias=True):
        super().__init__()
        if num_heads < 1 or d_model % num_heads:
            raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
        self.width = d_model
        self.pre = bool(norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, bias)
        self.norm1 = LayerNorm(d_model, bias=bias)
        self.norm2 = LayerNorm(d_model, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _attend(self, h, masks):
        out, _ = self.self_attn(h, h, h, need_weights=False, **masks)
        return self.dropout1(out)

    def _think(self, h):
        return self.dropout2(self.ffn(h))

    def forward(self, x, *, attn_mask=None, key_padding_mask=None, is_causal=False):
        if x.ndim != 3 or x.shape[2] != self.width:
            raise ValueError(f"x should be (batch, length, {self.width}), got {list(x.shape)}")
        masks = {"attn_mask": attn_mask, "key_padding_mask": key_padding_mask, "is_causal": is_causal}
        if self.pre:
            y = x + self._attend(self.norm1(x), masks)
            return y + self._think(self.norm2(y))
        y = self.norm1(x + self._attend(x, masks))
        return self.norm2(y + self._think(y))
