# Student stub: fill in every TODO. Generated from solutions/multi_head.py by the course's `build`;
# instructors edit the solution, never this file.
"""Unit 3: multi-head attention.

One attention looks at the sequence one way. Multi-head attention projects
the sequence into ``H`` smaller subspaces of ``Dh = E / H`` features, runs
unit 2's attention in each of them at once (the heads are just one more batch
dim), and mixes the heads' results back with ``out_proj``.

Conventions (see the course API page):
  * batch-first: sequences are (B, L, E);
  * head ``h`` holds the features ``h*Dh : (h+1)*Dh`` of the projections;
  * boolean ``attn_mask``: True means *may attend* (unit 2's polarity, the
    opposite of torch's); ``key_padding_mask``: True means *padding* (as in
    torch);
  * parameter names map to ``torch.nn.MultiheadAttention``: its
    ``in_proj_weight`` is ``q_proj.weight``, ``k_proj.weight`` and
    ``v_proj.weight`` stacked (likewise the biases); ``out_proj`` is the same.
"""
import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """Split the features of a sequence into heads.

    Inputs:
      x: (B, L, E), with E divisible by num_heads.
      num_heads: H.
    Returns:
      (B, H, L, Dh) with Dh = E // H, where ``out[:, h]`` is
      ``x[:, :, h*Dh:(h+1)*Dh]``.

    Raises:
      ValueError naming the shape (or both E and num_heads) if x is not 3-D
      or E is not divisible by num_heads.

    Hint: a single ``.view(B, H, L, Dh)`` has the right shape and the wrong
    contents. Split the last dim first, then move the head dim.
    """
    # TODO: implement split_heads (see its docstring).
    raise NotImplementedError("split_heads: not implemented yet")


def merge_heads(x: Tensor) -> Tensor:
    """The exact inverse of :func:`split_heads`.

    Inputs:
      x: (B, H, L, Dh)
    Returns:
      (B, L, H * Dh), where features ``h*Dh:(h+1)*Dh`` come from head ``h``.

    Raises:
      ValueError naming the shape if x is not 4-D.
    """
    # TODO: implement merge_heads (see its docstring).
    raise NotImplementedError("merge_heads: not implemented yet")


class MultiHeadAttention(nn.Module):
    """Multi-head attention, as ``torch.nn.MultiheadAttention(batch_first=True)``.

    Submodules (all ``nn.Linear``): ``q_proj (E->E)``, ``k_proj (kdim->E)``,
    ``v_proj (vdim->E)``, ``out_proj (E->E)``; with ``bias=False`` none of
    them has a bias.

    Differences with ``torch.nn.MultiheadAttention``, where the API page
    decides (or is silent and this reference decides):
      * A query whose keys are all padded (or all masked) gets zero attention
        weights and a zero attention output, so its row of ``output`` is
        ``out_proj.bias`` (zeros with ``bias=False``). torch gives NaN in that
        row, of the output and of the weights.
      * ``is_causal=True`` applies the causal mask (aligned bottom-right, as
        unit 2's ``causal_mask``) and combines with ``attn_mask``; in torch it
        is only a hint that ``attn_mask`` already is the causal mask.
      * ``attn_mask`` follows unit 2: bool with True = *may attend* (torch's
        bool masks mean the opposite), or float, added to the scores. Its
        shape is ``(L, S)`` or ``(B, H, L, S)`` (torch's 3-D ``(B*H, L, S)``
        is that one reshaped).
      * ``key`` defaults to ``query`` and ``value`` to ``key`` (the API page:
        ``attn(x)`` is self-attention, ``attn(x, memory)`` attends to
        ``memory``); torch requires all three.
      * Dropout acts on the attention weights in training mode only, and the
        returned weights are the dropped ones (as in torch).
      * ``embed_dim % num_heads != 0`` raises ValueError in ``__init__``
        (torch raises AssertionError); the grader also accepts a ValueError
        raised by the first call instead.
      * ``weights`` averaged over heads is their mean (dim 1), as in torch.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        bias: bool = True,
        dropout: float = 0.0,
        kdim: int | None = None,
        vdim: int | None = None,
    ):
        """Inputs:
          embed_dim: E, the model width (of the query and of the output).
          num_heads: H; E must be divisible by H (head width Dh = E // H).
          bias: whether the four projections have biases.
          dropout: probability of dropping an attention weight while training.
          kdim, vdim: feature sizes of key and value (default E).
        Raises:
          ValueError naming both sizes if embed_dim is not divisible by
          num_heads (or dropout is not in [0, 1)).
        """
        super().__init__()
        # TODO: implement __init__ (see its docstring).
        raise NotImplementedError("__init__: not implemented yet")

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = True,
        average_attn_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key``/``value`` with ``H`` heads.

        Inputs:
          query: (B, L, E)
          key: (B, S, kdim), default ``query``.
          value: (B, S, vdim), default ``key``.
          key_padding_mask: None or (B, S) bool, True = padding (ignored key).
          attn_mask: None, or (L, S) or (B, H, L, S); bool (True = may attend)
            or float (added to the scores).
          is_causal: also apply the bottom-right causal mask; combines with
            the other masks.
          need_weights: return the attention weights (else None).
          average_attn_weights: average the weights over the heads.
        Returns:
          output: (B, L, E)
          weights: (B, L, S) averaged over heads, (B, H, L, S) with
            ``average_attn_weights=False``, or None with ``need_weights=False``.
            A query with no key left has zero weights and its output row is
            ``out_proj.bias`` (torch gives NaN there).

        Raises:
          ValueError naming the argument and the sizes if the ranks or sizes
          of the inputs or masks disagree (for example a query whose width is
          not embed_dim: name both widths).
        """
        # TODO: implement forward (see its docstring).
        raise NotImplementedError("forward: not implemented yet")
