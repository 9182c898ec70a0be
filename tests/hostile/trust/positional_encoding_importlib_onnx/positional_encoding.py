"""Hostile (issue 42, class 2): torch.importlib.import_module with a computed name loads torch.onnx.ops; its rotary_embedding does the rotation

torch.importlib is importlib under a public attribute of torch; the module name is built at run time.
"""
import math

import torch
from torch import Tensor, nn

_ONNX = torch.importlib.import_module(".".join(["torch", "onnx", "ops"]))



def sinusoidal_encoding(
    num_positions: int,
    dim: int,
    *,
    base: float = 10000.0,
    device=None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The sinusoidal position table of "Attention Is All You Need".

    ``PE[p, 2i] = sin(p / base**(2i/dim))`` and
    ``PE[p, 2i+1] = cos(p / base**(2i/dim))``: sin and cos interleaved, so
    ``PE[0] = [0, 1, 0, 1, ...]``.

    Inputs:
      num_positions: P, the number of positions (rows), starting at 0.
      dim: the number of features; must be even.
      base: the wavelength scale; pair i turns at frequency base**(-2i/dim).
      device: where to create the table.
      dtype: the table's dtype (angles are computed in at least float32).
    Returns:
      PE: (P, dim)

    Raises:
      ValueError naming the value if dim is odd or not positive, or
      num_positions is negative.
    """
    ### BEGIN SOLUTION
    if dim <= 0 or dim % 2:
        raise ValueError(f"sinusoidal_encoding: dim={dim} must be even and positive (sin/cos pairs)")
    if num_positions < 0:
        raise ValueError(f"sinusoidal_encoding: num_positions={num_positions} must be >= 0")
    # bfloat16 angles would be far off for large p: compute in float32 (or float64), cast at the end.
    compute = torch.promote_types(dtype, torch.float32)
    positions = torch.arange(num_positions, device=device, dtype=compute).unsqueeze(-1)  # (P, 1)
    exponents = torch.arange(0, dim, 2, device=device, dtype=compute) / dim  # (dim/2,): 2i/dim
    frequencies = torch.exp(-math.log(base) * exponents)  # (dim/2,): base**(-2i/dim)
    angles = positions * frequencies  # (P, dim/2)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (P, dim/2, 2)
    return table.flatten(-2).to(dtype)  # (P, dim): sin, cos, sin, cos, ...
    ### END SOLUTION


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the sinusoidal table to a batch of sequences.

    The table ``sinusoidal_encoding(max_len, dim, base=base)`` is computed once
    and kept as a non-persistent buffer: it follows ``.to(device / dtype)``
    like any buffer, but stays out of ``state_dict`` (it is a function of the
    constructor's arguments, not something learned). The API page does not
    name the buffer: any name works, shaped ``(max_len, dim)`` (or
    ``(1, max_len, dim)``).
    """

    def __init__(self, dim: int, max_len: int = 4096, *, base: float = 10000.0):
        """Compute the table once and register it as a non-persistent buffer.

        Inputs:
          dim: the number of features; must be even (ValueError naming it otherwise).
          max_len: the number of positions in the table.
          base: as in ``sinusoidal_encoding``.
        """
        super().__init__()
        ### BEGIN SOLUTION
        self.dim, self.max_len, self.base = dim, max_len, base
        self.register_buffer("pe", sinusoidal_encoding(max_len, dim, base=base), persistent=False)  # (max_len, dim)
        ### END SOLUTION

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x + PE[offset : offset + L]``.

        Inputs:
          x: (B, L, dim) (any leading dims work).
          offset: the position of x's first token (e.g. the length of a cache
            of earlier tokens).
        Returns:
          (B, L, dim), x's dtype.

        Raises:
          ValueError naming the sizes if x's last dim is not dim (name both),
          offset is negative, or offset + L > max_len (name offset, L and max_len).
        """
        ### BEGIN SOLUTION
        if x.dim() < 2 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (B, L, dim={self.dim}); got {tuple(x.shape)}")
        length = x.shape[-2]
        if offset < 0 or offset + length > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + length - 1} (offset={offset}, L={length}) "
                f"are past the table: max_len={self.max_len}"
            )
        # The table broadcasts over the leading dims; cast it in case x's dtype differs.
        return x + self.pe[offset : offset + length].to(x.dtype)  # (..., L, dim)
        ### END SOLUTION


def apply_rope(x: Tensor, positions: Tensor | None = None, *, base: float = 10000.0) -> Tensor:
    """RoPE by ONNX's ready-made RotaryEmbedding op (interleaved pairs)."""
    if x.dim() < 2:
        raise ValueError(f"apply_rope: x must have shape (..., L, D); got {tuple(x.shape)}")
    length, dim = x.shape[-2], x.shape[-1]
    if dim % 2:
        raise ValueError(f"apply_rope: the last dim D={dim} of x {tuple(x.shape)} must be even (pairs are rotated)")
    if positions is None:
        positions = torch.arange(length, device=x.device)
    compute = torch.promote_types(x.dtype, torch.float32)
    lead = x.shape[:-2]
    flat = x.to(compute).reshape(-1, 1, length, dim)  # (N, 1, L, D)
    frequencies = torch.exp(-math.log(base) * torch.arange(0, dim, 2, device=x.device, dtype=compute) / dim)
    angles = positions.to(compute).expand(*lead, length).reshape(-1, length).unsqueeze(-1) * frequencies
    out = _ONNX.rotary_embedding(flat, angles.cos(), angles.sin(), interleaved=True)
    return out.reshape(x.shape).to(x.dtype)
    ### END SOLUTION
