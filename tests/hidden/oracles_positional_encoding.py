"""Trusted float64 oracles of unit 4, positional encodings.

Written for clarity rather than speed; they run only in the grader. The
keyword options build the known-wrong answers that hints name; the right
answer uses their defaults.
"""
from __future__ import annotations

import math

import torch

from autograder.testing.memo import remembered


def phase64(positions: torch.Tensor, dim: int, base: float, phase_dtype=None) -> torch.Tensor:
    """(..., dim/2) float64 angles ``positions * base**(-2i/dim)``.

    ``phase_dtype`` rebuilds a known bug: the angles computed in that dtype (the
    activation's, bfloat16) by the API page's formula ``exp(-log(base) * 2i/dim)``.
    """
    if phase_dtype is None:
        return positions.double().unsqueeze(-1) * frequencies64(dim, base)
    exponents = torch.arange(0, dim, 2, dtype=phase_dtype) / dim
    frequencies = torch.exp(-math.log(base) * exponents)
    return (positions.double().to(phase_dtype).unsqueeze(-1) * frequencies).double()


def frequencies64(dim: int, base: float = 10000.0, *, exponent: str = "2i/dim") -> torch.Tensor:
    """(dim/2,) float64: pair i turns at base**(-2i/dim) (or base**(-i/dim), a known bug)."""
    i = torch.arange(dim // 2, dtype=torch.float64)
    power = 2 * i / dim if exponent == "2i/dim" else i / dim
    return torch.tensor(float(base), dtype=torch.float64) ** (-power)


@remembered
def sinusoidal64(num_positions: int, dim: int, base: float = 10000.0, *, start: int = 0,
                 layout: str = "interleaved", swap: bool = False, exponent: str = "2i/dim",
                 phase_dtype=None) -> torch.Tensor:
    """(P, dim) float64: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), p = start, start + 1, ...

    ``layout="concatenated"`` puts every sin first, then every cos; ``swap``
    exchanges sin and cos; ``exponent="j/dim"`` gives every feature j its own
    exponent j/dim (the cos of pair i then turns at base**(-(2i+1)/dim), not at
    its sin's frequency); ``phase_dtype`` as in ``phase64``.
    """
    p = torch.arange(start, start + num_positions, dtype=torch.float64)  # (P,)
    if phase_dtype is not None:
        angles = phase64(p, dim, base, phase_dtype)  # (P, dim/2)
    elif exponent == "j/dim":
        angles = p.unsqueeze(-1) * frequencies64(dim, base)  # (P, dim/2), the sines' angles
        cos_angles = p.unsqueeze(-1) * torch.tensor(float(base), dtype=torch.float64) ** (
            -torch.arange(1, dim, 2, dtype=torch.float64) / dim)  # (P, dim/2): feature 2i+1 at (2i+1)/dim
        return torch.stack([angles.sin(), cos_angles.cos()], dim=-1).reshape(num_positions, dim)
    else:
        angles = p.unsqueeze(-1) * frequencies64(dim, base, exponent=exponent)  # (P, dim/2)
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if layout == "concatenated":
        return torch.cat([first, second], dim=-1)
    return torch.stack([first, second], dim=-1).reshape(num_positions, dim)


@remembered
def rope64(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0, *,
           layout: str = "interleaved", direction: float = 1.0, exponent: str = "2i/dim",
           phase_dtype=None, minus: bool = True) -> torch.Tensor:
    """RoPE in float64 with the interleaved pairing: pair (2i, 2i+1) turns by +pos * base**(-2i/D).

    ``layout="half"`` pairs feature i with i + D/2 (the rotate-half layout of
    GPT-NeoX and Hugging Face LLaMA); ``direction=-1`` turns clockwise;
    ``minus=False`` drops the rotation's minus sign, (a cos + b sin, a sin + b cos),
    which is no rotation; ``phase_dtype`` as in ``phase64``.
    """
    x = x.double()
    L, D = x.shape[-2], x.shape[-1]
    pos = torch.arange(L) if positions is None else positions
    if phase_dtype is None:
        angles = direction * pos.double().unsqueeze(-1) * frequencies64(D, base, exponent=exponent)  # (..., L, D/2)
    else:
        angles = phase64(pos, D, base, phase_dtype)  # (..., L, D/2)
    cos, sin = angles.cos(), angles.sin()
    sin_b = -sin if minus else sin  # what b contributes to the first feature: - b sin t in a rotation
    if layout == "half":
        a, b = x[..., : D // 2], x[..., D // 2 :]
        return torch.cat([a * cos + b * sin_b, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos + b * sin_b, a * sin + b * cos], dim=-1).flatten(-2)


def table_atol(max_position: int) -> float:
    """Absolute tolerance for a sin/cos of angle up to ``max_position`` radians.

    A float32 angle ``p * w`` is off by about 1e-7 * p (rounding of w and of
    the product, whatever the formula); this admits five times that.
    """
    return 1e-5 + 5e-7 * max_position
