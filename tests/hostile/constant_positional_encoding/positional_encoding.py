"""Hostile (issue 13): every position gets position 0's row [0, 1, 0, 1, ...]
and RoPE is the identity, with the argument checks of the API page. Pairs lie
on the unit circle, norms are kept, rotations 'compose', nothing depends on
position."""
import torch
from torch import nn


def sinusoidal_encoding(num_positions, dim, *, base=10000.0, device=None, dtype=torch.float32):
    if dim <= 0 or dim % 2:
        raise ValueError(f"sinusoidal_encoding: dim={dim} must be even")
    table = torch.zeros(num_positions, dim, device=device, dtype=dtype)
    table[:, 1::2] = 1
    return table


class SinusoidalPositionalEncoding(nn.Module):
    def __init__(self, dim, max_len=4096, *, base=10000.0):
        super().__init__()
        self.dim, self.max_len = dim, max_len
        self.register_buffer("pe", sinusoidal_encoding(max_len, dim), persistent=False)

    def forward(self, x, offset=0):
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be (B, L, dim={self.dim}); got {tuple(x.shape)}")
        if offset + x.shape[1] > self.max_len:
            raise ValueError(f"positions up to {offset + x.shape[1]} exceed max_len={self.max_len}")
        return x + self.pe[offset: offset + x.shape[1]].to(x.dtype)


def apply_rope(x, positions=None, *, base=10000.0):
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"apply_rope: the last dim D={x.shape[-1]} must be even")
    return x.clone()
