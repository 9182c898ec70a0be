"""Hostile (issue 42, class 4): the entry point softmax is torch's C builtin (a functools.partial of _VariableFunctions.softmax): no Python frame of the student's is on the stack when the kernel runs

A per-frame check that looks for the nearest student frame finds the grader's own frame.
"""
import math

import torch
from torch import Tensor

import functools



softmax = functools.partial(torch.sys.modules["torch"]._C._VariableFunctions.softmax, dim=-1)
### END SOLUTION


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
    ### BEGIN SOLUTION
    if key_len is None:
        key_len = query_len
    if query_len < 0 or key_len < 0:
        raise ValueError(f"causal_mask: query_len={query_len} and key_len={key_len} must be >= 0")
    rows = torch.arange(query_len, device=device).unsqueeze(-1)  # (L, 1)
    cols = torch.arange(key_len, device=device).unsqueeze(0)  # (1, S)
    return cols <= rows + (key_len - query_len)  # (L, S)
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise ValueError(
            f"query, key and value need at least 2 dims (..., L, E); got query {tuple(query.shape)}, "
            f"key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query's last dim E={query.shape[-1]} must equal key's last dim {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key has S={key.shape[-2]} positions but value has {value.shape[-2]}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p={dropout_p} must be in [0, 1)")
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    scores = (query @ key.transpose(-2, -1)) * scale  # (..., L, S)
    allowed = torch.ones_like(scores, dtype=torch.bool)  # (..., L, S)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            allowed = allowed & attn_mask
        else:
            scores = scores + attn_mask
    if is_causal:
        allowed = allowed & causal_mask(query.shape[-2], key.shape[-2], device=query.device)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = softmax(scores, dim=-1)  # (..., L, S)
    if dropout_p > 0.0:
        keep = torch.rand_like(weights) >= dropout_p
        weights = weights * keep / (1.0 - dropout_p)
    return weights @ value, weights  # (..., L, Ev), (..., L, S)
    ### END SOLUTION
