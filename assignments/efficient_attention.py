# Student stub: fill in every TODO. Generated from solutions/efficient_attention.py by the course's `build`;
# instructors edit the solution, never this file.
"""Unit 6: attention at inference and at length.

Units 2 and 3 compute attention as one (L, S) table. This unit keeps the
function and changes how it is computed:

  * a decoder generating token by token keeps every earlier token's keys and
    values in a ``KVCache``, so each step projects only the new tokens;
  * ``GroupedQueryAttention`` shares each key/value head among a group of
    query heads, so that cache is ``num_heads / num_kv_heads`` times smaller
    (``num_kv_heads = 1`` is multi-query attention);
  * ``flash_attention`` computes softmax(q k^T * scale) v tile by tile with an
    online softmax (a running max and a running sum), so no (L, S) tensor is
    ever built: O(L + S) extra memory for the same O(L S) arithmetic.

Decisions (the API page, section 6, says the same):
  * unit 3's ``MultiHeadAttention`` is unchanged; the cache lives in this
    unit's ``GroupedQueryAttention`` (with ``num_kv_heads == num_heads`` it is
    multi-head attention with a cache);
  * query head ``h`` uses key/value head ``h // (num_heads // num_kv_heads)``:
    consecutive query heads share one (``repeat_kv``, as in Meta LLaMA);
  * a cached step's queries sit at the end of the sequence: the causal mask
    is unit 2's, aligned bottom-right, and the new tokens' positions continue
    from ``cache.length``;
  * ``GroupedQueryAttention`` may call unit 2's ``scaled_dot_product_attention``
    and unit 3's ``split_heads``/``merge_heads`` (the reference does) or
    compute the same itself (with ``flash_attention``, say): its values are
    graded, not which functions it calls;
  * bfloat16 inputs accumulate in float32: a bfloat16 running sum over
    thousands of keys drifts by percents.

Conventions (see the course API page):
  * batch-first; heads are (B, H, L, Dh);
  * every tensor created here lives on the input's device;
  * a query row with no key it may attend gives zeros, never NaN.
"""
import math

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .multi_head import merge_heads, split_heads


def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_size: int = 64,
) -> Tensor:
    """softmax(query key^T * scale) value, tile by tile (FlashAttention's forward).

    Queries are taken ``block_size`` at a time; for each query tile the keys
    are visited ``block_size`` at a time, keeping per query a running maximum
    ``m`` of the scores seen so far, a running sum ``l`` of ``exp(score - m)``
    and a running output ``acc``. When a new tile raises the maximum, the old
    ``l`` and ``acc`` are rescaled by ``exp(m_old - m_new)``; at the end the
    output is ``acc / l``. Here no tensor larger than (..., block_size,
    block_size) of scores exists at any time (without autograd); the contract
    on the API page asks less: no tensor holds a quarter of the L x S scores,
    so tiling the queries alone, O(block_size x S), meets it too.

    Inputs:
      query: (..., L, E)
      key: (..., S, E)
      value: (..., S, Ev); leading dims broadcast as in ``matmul``.
      is_causal: query ``i`` may attend key ``j`` iff ``j <= i + S - L``
        (unit 2's bottom-right alignment).
      scale: multiplies the scores; defaults to 1 / sqrt(E).
      block_size: the tile size, >= 1.
    Returns:
      output: (..., L, Ev), query's dtype (bfloat16 is accumulated in
        float32, and only the output cast back); equal to unit 2's
        ``scaled_dot_product_attention(query, key, value, is_causal=...)[0]``
        for every input (scores of any magnitude) and every block size. A
        query with no key it may attend gets zeros.

    Raises:
      ValueError, naming the argument and the sizes, if a tensor has fewer
      than 2 dims, query's E differs from key's, key's S differs from value's,
      or block_size < 1.

    Hint: with no visible key yet, a row's running maximum is -inf, and
    ``exp(-inf - (-inf))`` is NaN. Shift such a row by 0 instead.
    """
    # TODO: implement flash_attention (see its docstring).
    raise NotImplementedError("flash_attention: not implemented yet")


def online_softmax_tile(q: Tensor, k: Tensor, v: Tensor, first: int, is_causal: bool, scale: float, block_size: int) -> Tensor:
    """One tile of queries against the keys, one key tile at a time (the online softmax).

    Inputs:
      q: (..., Bq, E), the tile's queries; the first one sits at absolute
        position ``first`` (``i + S - L`` for query ``i``).
      k: (..., S, E), v: (..., S, Ev), in the working dtype.
    Returns:
      (..., Bq, Ev): the tile's attention output.
    """
    # TODO: implement online_softmax_tile (see its docstring).
    raise NotImplementedError("online_softmax_tile: not implemented yet")


def repeat_kv(x: Tensor, num_groups: int) -> Tensor:
    """Repeat each key/value head for the query heads of its group.

    Inputs:
      x: (B, Hkv, S, Dh)
      num_groups: G = num_heads // num_kv_heads, >= 1.
    Returns:
      (B, Hkv * G, S, Dh), where ``out[:, h]`` is ``x[:, h // G]``: heads
      ``0..G-1`` share kv head 0, heads ``G..2G-1`` kv head 1, and so on
      (Meta LLaMA's ``repeat_kv``).

    Raises:
      ValueError naming the shape if x is not 4-D, or num_groups if < 1.
    """
    # TODO: implement repeat_kv (see its docstring).
    raise NotImplementedError("repeat_kv: not implemented yet")


def rotate_pairs(x: Tensor, positions: Tensor, *, base: float = 10000.0) -> Tensor:
    """Unit 4's rotary embedding at given positions (``apply_rope(x, positions, base=base)``).

    Pair ``i`` of token ``l``, ``(x[..., l, 2i], x[..., l, 2i+1])``, turns by
    ``positions[l] * base**(-2i/D)``. This unit keeps its own copy so that it
    is graded on its own (copy your unit-4 code).

    Inputs:
      x: (..., L, D), D even.
      positions: (L,) long, the absolute position of each token.
      base: pair i turns at frequency base**(-2i/D).
    Returns:
      (..., L, D), x's dtype.
    """
    # TODO: implement rotate_pairs (see its docstring).
    raise NotImplementedError("rotate_pairs: not implemented yet")


class KVCache(nn.Module):
    """The keys and values of one attention layer, for every token so far.

    ``keys`` and ``values`` are ``None`` while empty, then (B, Hkv, S, Dh):
    non-persistent buffers, so ``.to(device)`` moves a filled cache and a
    model's ``state_dict`` does not include it. A model keeps one cache per
    layer.
    """

    def __init__(self):
        super().__init__()
        # TODO: implement __init__ (see its docstring).
        raise NotImplementedError("__init__: not implemented yet")

    @property
    def length(self) -> int:
        """S, the number of tokens held (0 while empty)."""
        # TODO: implement length (see its docstring).
        raise NotImplementedError("length: not implemented yet")

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add the keys and values of ``T`` new tokens after the ones held.

        Inputs:
          key: (B, Hkv, T, Dh)
          value: (B, Hkv, T, Dv)
        Returns:
          (keys, values): the whole cache, (B, Hkv, S + T, Dh) and
          (B, Hkv, S + T, Dv), the new tokens last.

        Raises:
          ValueError naming the shapes if key or value is not 4-D, they
          disagree on (B, Hkv, T), or they do not match what the cache holds.
        """
        # TODO: implement append (see its docstring).
        raise NotImplementedError("append: not implemented yet")


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with ``num_kv_heads`` key/value heads shared by ``num_heads`` query heads.

    Submodules (all ``nn.Linear``): ``q_proj (E->E)``, ``k_proj (E->Hkv*Dh)``,
    ``v_proj (E->Hkv*Dh)``, ``out_proj (E->E)``, with ``Dh = E // num_heads``.
    Head ``h`` of a projection is its features ``h*Dh:(h+1)*Dh`` (unit 3's
    ``split_heads``); query head ``h`` attends with key/value head
    ``h // (num_heads // num_kv_heads)``. With ``num_kv_heads == num_heads``
    it is unit 3's multi-head self-attention; with ``num_kv_heads == 1``,
    multi-query attention.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int, *, bias: bool = True,
                 rope_base: float | None = None):
        """Inputs:
          embed_dim: E.
          num_heads: H, the query heads; E must be divisible by H.
          num_kv_heads: Hkv, the key/value heads; H must be divisible by Hkv.
          bias: whether the four projections have biases.
          rope_base: None for no positional information, else the base of
            the rotary embedding applied to every query and key head
            (``rotate_pairs``); Dh must then be even.
        Raises:
          ValueError naming both sizes if E % H, H % Hkv (or Dh % 2 with
          rope_base) is not 0.
        """
        super().__init__()
        # TODO: implement __init__ (see its docstring).
        raise NotImplementedError("__init__: not implemented yet")

    def forward(self, x: Tensor, *, cache: KVCache | None = None, positions: Tensor | None = None,
                is_causal: bool = True) -> Tensor:
        """Attend from the new tokens ``x`` to the cached tokens and to themselves.

        Inputs:
          x: (B, L, E), the new tokens.
          cache: None, or the layer's KVCache holding the P earlier tokens;
            the new tokens' keys and values are appended to it (it grows by L).
          positions: None, or (L,) long: the absolute positions of the new
            tokens for the rotary embedding; default ``P + arange(L)`` (P = 0
            without a cache). Unused without ``rope_base``.
          is_causal: new token ``i`` may attend key ``j`` of the P + L iff
            ``j <= P + i`` (unit 2's causal mask, aligned bottom-right).
        Returns:
          output: (B, L, E). Decoding a sequence in chunks of any sizes with
          one cache gives the output of one full causal pass over it.

        Raises:
          ValueError naming both widths if x is not (B, L, embed_dim).
        """
        # TODO: implement forward (see its docstring).
        raise NotImplementedError("forward: not implemented yet")


def decode_in_chunks(attn: GroupedQueryAttention, x: Tensor, chunk_sizes) -> tuple[Tensor, Tensor, Tensor]:
    """Run ``attn`` over ``x`` the way a decoder does: a prompt, then steps, with one fresh KVCache.

    Inputs:
      attn: a GroupedQueryAttention.
      x: (B, L, E), the whole sequence.
      chunk_sizes: a list of positive ints summing to L: the first chunk is
        the prompt, each later one a decoding step ([P, 1, 1, ...] decodes
        token by token).
    Returns:
      (output, keys, values): output (B, L, E), the chunks' outputs in order
      (equal to ``attn(x)``, one full causal pass); keys and values, what the
      cache holds at the end, (B, Hkv, L, Dh).

    Raises:
      ValueError naming both numbers if a chunk size is < 1 or they do not
      sum to L.
    """
    # TODO: implement decode_in_chunks (see its docstring).
    raise NotImplementedError("decode_in_chunks: not implemented yet")
