"""Hostile (issue 42, class 2): writes a module at run time and imports it (torch.sys.path + torch.importlib); the unscanned module mutes the recorder and provides layer norm by F.group_norm

The file the grader scanned holds no forbidden name; the one that runs was never scanned.
"""
import math

import torch
from torch import Tensor, nn

from .multi_head import MultiHeadAttention

import os
import tempfile

_SOURCE = """
import sys
import torch.nn.functional as F

sys.modules["autograder.core.forbidden"]._note = lambda name: None


def layer_norm(x, eps):
    return F.group_norm(x.reshape(-1, 1, x.shape[-1]), 1, eps=eps).reshape(x.shape)
"""
_FOLDER = tempfile.mkdtemp(dir=os.environ.get("TMPDIR"))  # the worker's own box
with open(os.path.join(_FOLDER, "ln_helper_42.py"), "w") as _handle:
    _handle.write(_SOURCE)
torch.sys.path.insert(0, _FOLDER)
_HELPER = torch.importlib.import_module("ln_helper_42")



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
        ### BEGIN SOLUTION
        super().__init__()
        if isinstance(normalized_shape, bool) or not isinstance(normalized_shape, int) or normalized_shape <= 0:
            raise ValueError(f"normalized_shape must be a positive int, got {normalized_shape!r}")
        self.normalized_shape = normalized_shape
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(normalized_shape))
        else:
            self.register_parameter("weight", None)
        if elementwise_affine and bias:
            self.bias = nn.Parameter(torch.zeros(normalized_shape))
        else:
            self.register_parameter("bias", None)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:

        if x.dim() == 0 or x.shape[-1] != self.normalized_shape:
            raise ValueError(f"LayerNorm: x's last dim is {x.shape[-1] if x.dim() else 'missing'} "
                             f"but normalized_shape={self.normalized_shape}")
        out = _HELPER.layer_norm(x, self.eps)

        if self.weight is not None:
            out = out * self.weight
        if self.bias is not None:
            out = out + self.bias
        return out
        ### END SOLUTION


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
        ### BEGIN SOLUTION
        super().__init__()
        if d_model <= 0 or d_ff <= 0:
            raise ValueError(f"d_model={d_model} and d_ff={d_ff} must be positive")
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        ### END SOLUTION

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
        ### BEGIN SOLUTION
        h = self.linear1(x)  # (B, L, d_ff)
        h = h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0)))  # exact GELU
        return self.linear2(self.dropout(h))  # (B, L, d_model)
        ### END SOLUTION


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
        ### BEGIN SOLUTION
        super().__init__()
        if d_model <= 0 or num_heads <= 0 or d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} must be a positive multiple of num_heads={num_heads}")
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, bias=bias)
        self.norm1 = LayerNorm(d_model, bias=bias)
        self.norm2 = LayerNorm(d_model, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        ### END SOLUTION

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
        ### BEGIN SOLUTION
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, L, d_model={self.d_model}), got shape {tuple(x.shape)}")
        masks = dict(attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal)
        if self.norm_first:
            # The residual stream carries the raw x; only the sublayer inputs are normalized.
            h = self.norm1(x)  # (B, L, d_model)
            x = x + self.dropout1(self.self_attn(h, h, h, need_weights=False, **masks)[0])
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, need_weights=False, **masks)[0]))
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return x  # (B, L, d_model)
        ### END SOLUTION
