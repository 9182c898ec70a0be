# Student stub: fill in every TODO. Generated from solutions/positional_encoding.py by the course's `build`;
# instructors edit the solution, never this file.
"""Unit 4: positional encodings, putting order back.

Attention alone is permutation-equivariant: shuffle the tokens and the outputs
shuffle the same way, so "dog bites man" and "man bites dog" look alike. An RNN
knew the order because it read one token at a time; attention must be told.
Two ways to tell it:

  * sinusoidal encoding ("Attention Is All You Need"): add a fixed table
    ``PE[p]`` to the token at position ``p``. Each pair of features is a point
    on a circle turning at its own frequency, so moving ``k`` positions is a
    fixed rotation of every pair, whatever ``p`` is;
  * rotary encoding, RoPE (RoFormer, LLaMA): rotate each pair of query and key
    features by an angle proportional to the position. A dot product of two
    rotated vectors then depends only on how far apart they are.

Conventions (see the course API page):
  * pairs are interleaved: features ``(2i, 2i + 1)`` form pair ``i``;
  * pair ``i`` turns at frequency ``base ** (-2i / dim)``;
  * every tensor created here lives on the input's device.

Decisions where the API page is silent:
  * angles are computed in float32, or float64 when float64 is asked for, and
    only then cast (bfloat16 cannot even hold position 257 exactly);
  * ``dim`` (or ``D``) must be even and positive, ``num_positions`` >= 0;
  * ``SinusoidalPositionalEncoding.forward`` accepts any leading dims
    ``(..., L, dim)``, needs ``0 <= offset`` and ``offset + L <= max_len``, and
    returns the input's dtype.
"""
import math

import torch
from torch import Tensor, nn


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
    # TODO: implement sinusoidal_encoding (see its docstring).
    raise NotImplementedError("sinusoidal_encoding: not implemented yet")


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
        # TODO: implement __init__ (see its docstring).
        raise NotImplementedError("__init__: not implemented yet")

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
        # TODO: implement forward (see its docstring).
        raise NotImplementedError("forward: not implemented yet")


def apply_rope(x: Tensor, positions: Tensor | None = None, *, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (RoFormer / Meta LLaMA pairing).

    Pair ``i`` of token ``l``, ``(x[..., l, 2i], x[..., l, 2i+1])``, is rotated
    counter-clockwise by the angle ``theta = positions[..., l] * base**(-2i/D)``:
    ``(a, b) -> (a cos theta - b sin theta, a sin theta + b cos theta)``, i.e.
    ``a + ib`` times ``e^(i theta)``. Not the rotate-half layout, which pairs
    ``i`` with ``i + D/2``.

    Inputs:
      x: (..., L, D), D even.
      positions: None (means arange(L)), or a long tensor broadcastable to
        (..., L).
      base: pair i turns at frequency base**(-2i/D).
    Returns:
      (..., L, D), x's dtype.

    Raises:
      ValueError naming the shape if x has fewer than 2 dims or D is odd.
    """
    # TODO: implement apply_rope (see its docstring).
    raise NotImplementedError("apply_rope: not implemented yet")
