# Student stub: fill in every TODO. Generated from solutions/attention.py by the course's `build`;
# instructors edit the solution, never this file.
"""Unit 2: scaled dot-product attention.

Attention lets every query look at every key in one matrix product: the path
between any two positions has length 1, where an RNN's has length ``|i - j|``.

Conventions (see the course API page):
  * batch-first, any number of leading batch dims ``...``;
  * boolean masks: ``True`` means *may attend*;
  * float masks are added to the scores;
  * a query row with no key it may attend gives zeros, never NaN;
  * every tensor created here lives on the input's device.
"""
import math

import torch
from torch import Tensor


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax along ``dim``.

    Inputs:
      x: (...) any shape, floating point.
      dim: the dimension that sums to 1.
    Returns:
      Tensor of the same shape and dtype as ``x``. A slice along ``dim`` that
      is all ``-inf`` gives all zeros (not NaN).

    Hint: ``exp`` overflows for inputs of 1e4. Subtracting the maximum of each
    slice changes nothing mathematically; what should it be for an all ``-inf``
    slice?
    """
    # TODO: implement softmax (see its docstring).
    raise NotImplementedError("softmax: not implemented yet")


def causal_mask(query_len: int, key_len: int | None = None, *, device=None) -> Tensor:
    """Boolean causal mask, aligned bottom-right.

    Query ``i`` sits at absolute position ``i + S - L`` and may attend key ``j``
    iff ``j <= i + S - L``. For ``L == S`` this is the lower triangle.

    Inputs:
      query_len: L, the number of queries.
      key_len: S, the number of keys (defaults to L).
      device: where to create the mask.
    Returns:
      mask: (L, S) bool, True = may attend.

    Raises:
      ValueError naming both lengths if query_len or key_len is negative.
    """
    # TODO: implement causal_mask (see its docstring).
    raise NotImplementedError("causal_mask: not implemented yet")


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(query key^T * scale + mask) value.

    Inputs:
      query: (..., L, E)
      key: (..., S, E)
      value: (..., S, Ev)
      attn_mask: None, or broadcastable to (..., L, S); bool (True = may
        attend) or float (added to the scores).
      is_causal: also apply ``causal_mask(L, S)``; combines with attn_mask.
      scale: multiplies the scores; defaults to 1 / sqrt(E).
      dropout_p: probability of zeroing each weight; survivors are scaled by
        1 / (1 - dropout_p).
    Returns:
      output: (..., L, Ev)
      weights: (..., L, S), after masking and dropout. A query with no key it
        may attend has zero weights and a zero output.

    Raises:
      ValueError, with a message naming the argument and both sizes, if a
      tensor has fewer than 2 dims, query's E differs from key's, key's S
      differs from value's, or dropout_p is not in [0, 1).
    """
    # TODO: implement scaled_dot_product_attention (see its docstring).
    raise NotImplementedError("scaled_dot_product_attention: not implemented yet")
