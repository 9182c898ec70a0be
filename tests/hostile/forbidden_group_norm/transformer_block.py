"""Hostile: layer norm as group norm with one group (F.group_norm is on no list)."""
import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.normalized_shape, self.eps = normalized_shape, eps
        self.weight = nn.Parameter(torch.ones(normalized_shape)) if elementwise_affine else None
        self.bias = nn.Parameter(torch.zeros(normalized_shape)) if elementwise_affine and bias else None

    def forward(self, x):
        y = F.group_norm(x.reshape(-1, 1, x.shape[-1]), 1, eps=self.eps).reshape(x.shape)
        if self.weight is not None:
            y = y * self.weight
        return y if self.bias is None else y + self.bias
