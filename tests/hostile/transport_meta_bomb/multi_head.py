"""Hostile: answer with meta tensors of 2**26 float64 (no data to send, 512 MiB for whoever allocates from them)."""
import torch
from torch import nn


def _bomb():
    return torch.empty(2**26, dtype=torch.float64, device="meta")


def split_heads(x, num_heads):
    return _bomb()


def merge_heads(x):
    return _bomb()


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, *, bias=True, dropout=0.0, kdim=None, vdim=None):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(embed_dim, embed_dim))

    def forward(self, query, key=None, value=None, **kwargs):
        return _bomb(), _bomb()
