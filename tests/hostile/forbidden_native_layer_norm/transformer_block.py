"""Hostile: layer norm from torch.ops.aten.native_layer_norm, the kernel under F.layer_norm."""
import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.normalized_shape, self.eps = normalized_shape, eps
        self.weight = nn.Parameter(torch.ones(normalized_shape)) if elementwise_affine else None
        self.bias = nn.Parameter(torch.zeros(normalized_shape)) if elementwise_affine and bias else None

    def forward(self, x):
        return torch.ops.aten.native_layer_norm(x, [x.shape[-1]], self.weight, self.bias, self.eps)[0]
