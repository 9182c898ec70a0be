"""A correct unit 4 in another style: pow-based frequencies filled by slice
assignment, a (1, max_len, dim) table buffer under another name, and
complex-number RoPE (each pair a + ib multiplied by e^(i theta), as in LLaMA).

Written from the API page alone; it must score full marks.
"""
import torch
from torch import nn


def _inverse_frequencies(dim, base, device, dtype):
    # 1 / base**(2i/dim), computed with pow rather than exp(log).
    two_i = torch.arange(0, dim, 2, device=device).to(dtype)
    return 1.0 / torch.pow(torch.tensor(float(base), device=device, dtype=dtype), two_i / dim)


def sinusoidal_encoding(num_positions, dim, *, base=10000.0, device=None, dtype=torch.float32):
    if dim % 2 != 0 or dim < 1:
        raise ValueError(f"dim must be a positive even number, got dim={dim}")
    if num_positions < 0:
        raise ValueError(f"num_positions must be non-negative, got {num_positions}")
    work = torch.float64 if dtype == torch.float64 else torch.float32
    pos = torch.arange(num_positions, device=device).to(work)[:, None]
    angle = pos * _inverse_frequencies(dim, base, device, work)[None, :]
    pe = torch.empty(num_positions, dim, device=device, dtype=work)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    def __init__(self, dim, max_len=4096, *, base=10000.0):
        super().__init__()
        self.max_len = max_len
        self.d = dim
        self.register_buffer("table", sinusoidal_encoding(max_len, dim, base=base).unsqueeze(0), persistent=False)

    def forward(self, x, offset=0):
        if x.size(-1) != self.d:
            raise ValueError(f"expected x with last dim {self.d}, got last dim {x.size(-1)}")
        n = x.size(-2)
        end = offset + n
        if offset < 0 or end > self.max_len:
            raise ValueError(f"positions up to {end} requested but max_len is {self.max_len} (offset={offset})")
        return x + self.table[0, offset:end].type_as(x)


def apply_rope(x, positions=None, *, base=10000.0):
    if x.ndim < 2:
        raise ValueError(f"x needs shape (..., L, D), got {list(x.shape)}")
    D = x.size(-1)
    if D % 2:
        raise ValueError(f"apply_rope needs an even D, got D={D}")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    if positions is None:
        positions = torch.arange(x.size(-2), device=x.device)
    theta = positions.to(work)[..., None] * _inverse_frequencies(D, base, x.device, work)
    rotor = torch.polar(torch.ones_like(theta), theta)  # e^(i theta), (..., L, D/2)
    z = torch.view_as_complex(x.to(work).contiguous().reshape(*x.shape[:-1], D // 2, 2))
    out = torch.view_as_real(z * rotor)  # (..., L, D/2, 2)
    return out.reshape(*out.shape[:-2], D).to(x.dtype)
