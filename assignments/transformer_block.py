# Student stub: fill in every TODO. Generated from solutions/transformer_block.py by the course's `build`;
# instructors edit the solution, never this file.
"""Unit 5: the Transformer block.

A block is two sublayers, each wrapped in a residual connection and a
LayerNorm: multi-head self-attention (positions talk to each other) and a
position-wise feed-forward network (each position thinks on its own).

Conventions (see the course API page):
  * batch-first: ``x`` is (B, L, d_model);
  * ``attn_mask``: bool True = may attend, or float (added to the scores),
    shape (L, L) or (B, H, L, L); ``key_padding_mask``: (B, L) bool, True = padding;
  * ``is_causal``: position i attends to positions <= i;
  * post-norm (``norm_first=False``, the 2017 paper) or pre-norm (``norm_first=True``);
  * with dropout 0 the block equals ``nn.TransformerEncoderLayer(d_model, num_heads,
    d_ff, dropout=0, activation="gelu", batch_first=True, norm_first=...)``.

Where the API page is silent this module follows ``nn.TransformerEncoderLayer``:
  * ``dropout`` is also the attention-weight dropout of ``self_attn`` and the
    dropout inside ``ffn`` (between the GELU and ``linear2``);
  * ``bias=False`` removes the additive bias of every ``nn.Linear`` (in
    ``self_attn`` and ``ffn``) and of both LayerNorms (their ``bias`` is then
    ``None``, like ``nn.LayerNorm(..., bias=False)``).
"""
import math

import torch
from torch import Tensor, nn

from .multi_head import MultiHeadAttention


class LayerNorm(nn.Module):
    """Layer normalization over the last dim (as ``nn.LayerNorm(normalized_shape)``).

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``, where ``mean`` and the
    *biased* variance ``var`` (divide by d, not d - 1) are taken over the last
    dim of each position separately.

    Inputs:
      normalized_shape: d, the size of the last dim (an int).
      eps: added to the variance, inside the square root.
      elementwise_affine: learn ``weight`` (d,) (init ones) and ``bias`` (d,)
        (init zeros); when False there are no parameters (both are ``None``).
      bias: when False there is no ``bias`` (it is ``None``; ``weight`` stays),
        as ``nn.LayerNorm(..., bias=False)``.
    Raises:
      ValueError naming the value if ``normalized_shape`` is not a positive int.
    """

    def __init__(self, normalized_shape: int, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True):
        """Create ``weight`` and ``bias`` (or none), as described in the class docstring."""
        # TODO: implement __init__ (see its docstring).
        raise NotImplementedError("__init__: not implemented yet")

    def forward(self, x: Tensor) -> Tensor:
        """Normalize each position of ``x``.

        Inputs:
          x: (..., d) floating point.
        Returns:
          Tensor (..., d), same dtype and device as ``x``.
        Raises:
          ValueError naming both sizes if the last dim of ``x`` is not d.
        """
        # TODO: implement forward (see its docstring).
        raise NotImplementedError("forward: not implemented yet")


class FeedForward(nn.Module):
    """The position-wise feed-forward sublayer: ``linear2(dropout(gelu(linear1(x))))``.

    Inputs:
      d_model: size of each position's features.
      d_ff: size of the hidden layer (usually 4 * d_model).
      dropout: probability of zeroing each hidden unit in training mode.
      bias: whether linear1 and linear2 have biases.
    Submodules:
      linear1: nn.Linear(d_model, d_ff, bias=bias)
      dropout: nn.Dropout(dropout)
      linear2: nn.Linear(d_ff, d_model, bias=bias)
    Raises:
      ValueError naming both sizes if d_model or d_ff is not positive.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        """Create ``linear1``, ``dropout`` and ``linear2``, as described in the class docstring."""
        # TODO: implement __init__ (see its docstring).
        raise NotImplementedError("__init__: not implemented yet")

    def forward(self, x: Tensor) -> Tensor:
        """Apply the same two-layer MLP to every position.

        Inputs:
          x: (B, L, d_model)
        Returns:
          Tensor (B, L, d_model).

        Hint: the GELU here is the exact one, ``x * Phi(x)`` with ``Phi`` the
        standard normal CDF (``0.5 * (1 + erf(x / sqrt(2)))``); the tanh
        approximation differs by up to about 5e-4.
        """
        # TODO: implement forward (see its docstring).
        raise NotImplementedError("forward: not implemented yet")


class TransformerBlock(nn.Module):
    """One Transformer encoder block (self-attention + feed-forward).

    Post-norm (``norm_first=False``, the 2017 paper)::

        x = norm1(x + dropout1(self_attn(x)))
        x = norm2(x + dropout2(ffn(x)))

    Pre-norm (``norm_first=True``; the residual stream is never normalized)::

        x = x + dropout1(self_attn(norm1(x)))
        x = x + dropout2(ffn(norm2(x)))

    Inputs:
      d_model: features per position; must be divisible by num_heads.
      num_heads: attention heads.
      d_ff: hidden size of the feed-forward sublayer.
      dropout: probability used by dropout1, dropout2, the attention weights
        and the feed-forward hidden layer (as nn.TransformerEncoderLayer).
      norm_first: pre-norm if True, post-norm if False.
      bias: if False, no Linear layer and no LayerNorm has an additive bias
        (as nn.TransformerEncoderLayer(..., bias=False)).
    Submodules:
      self_attn: MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout)
      ffn: FeedForward(d_model, d_ff, dropout, bias=bias)
      norm1, norm2: LayerNorm(d_model, bias=bias)
      dropout1, dropout2: nn.Dropout(dropout)
    Raises:
      ValueError naming both sizes if d_model is not a positive multiple of num_heads.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, *, dropout: float = 0.0,
                 norm_first: bool = False, bias: bool = True):
        """Create the submodules listed in the class docstring (the names are part of the API)."""
        # TODO: implement __init__ (see its docstring).
        raise NotImplementedError("__init__: not implemented yet")

    def forward(self, x: Tensor, *, attn_mask: Tensor | None = None,
                key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """Run the block.

        Inputs:
          x: (B, L, d_model)
          attn_mask: None, (L, L) or (B, H, L, L); bool True = may attend, or float.
          key_padding_mask: None or (B, L) bool, True = padding (ignored as a key).
          is_causal: position i may attend only to positions j <= i.
        Returns:
          Tensor (B, L, d_model).
        Raises:
          ValueError naming the shape if x is not (B, L, d_model).
        """
        # TODO: implement forward (see its docstring).
        raise NotImplementedError("forward: not implemented yet")
