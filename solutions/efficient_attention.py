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
    if block_size < 1:
        raise ValueError(f"block_size={block_size} must be >= 1")
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    # Running sums of exponentials lose digits in bfloat16: accumulate in at least float32.
    work = torch.promote_types(query.dtype, torch.float32)
    q, k, v = query.to(work), key.to(work), value.to(work)
    L, S = q.shape[-2], k.shape[-2]
    tiles = [
        online_softmax_tile(q[..., start:start + block_size, :], k, v, start + S - L, is_causal, scale, block_size)
        for start in range(0, L, block_size)
    ]
    return torch.cat(tiles, dim=-2).to(query.dtype)  # (..., L, Ev)
    ### END SOLUTION


def online_softmax_tile(q: Tensor, k: Tensor, v: Tensor, first: int, is_causal: bool, scale: float, block_size: int) -> Tensor:
    """One tile of queries against the keys, one key tile at a time (the online softmax).

    Inputs:
      q: (..., Bq, E), the tile's queries; the first one sits at absolute
        position ``first`` (``i + S - L`` for query ``i``).
      k: (..., S, E), v: (..., S, Ev), in the working dtype.
    Returns:
      (..., Bq, Ev): the tile's attention output.
    """
    ### BEGIN SOLUTION
    rows = first + torch.arange(q.shape[-2], device=q.device).unsqueeze(-1)  # (Bq, 1) absolute positions
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    peak = torch.full((*batch, q.shape[-2], 1), float("-inf"), dtype=q.dtype, device=q.device)  # running max
    total = torch.zeros_like(peak)  # running sum of exp(score - peak)
    acc = torch.zeros((*batch, q.shape[-2], v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., Bq, Ev)
    # Causal: keys past the tile's last query (position first + Bq - 1) are hidden from all its rows.
    stop = min(k.shape[-2], first + q.shape[-2]) if is_causal else k.shape[-2]
    for start in range(0, stop, block_size):
        key_tile, value_tile = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        scores = (q @ key_tile.transpose(-2, -1)) * scale  # (..., Bq, Bk)
        if is_causal:
            cols = start + torch.arange(key_tile.shape[-2], device=q.device)  # (Bk,) absolute key positions
            scores = scores.masked_fill(cols > rows, float("-inf"))  # (..., Bq, Bk)
        new_peak = torch.maximum(peak, scores.amax(dim=-1, keepdim=True))  # (..., Bq, 1)
        # A row with no visible key so far has peak -inf: shift it by 0 so exp gives 0, not NaN.
        shift = torch.where(torch.isfinite(new_peak), new_peak, torch.zeros_like(new_peak))
        weights = torch.exp(scores - shift)  # (..., Bq, Bk), unnormalized
        rescale = torch.exp(peak - shift)  # the old sums were relative to the old peak
        total = total * rescale + weights.sum(dim=-1, keepdim=True)
        acc = acc * rescale + weights @ value_tile  # (..., Bq, Ev)
        peak = new_peak
    # A row that saw no key has total 0 and acc 0: dividing by 1 keeps its zeros.
    return acc / torch.where(total > 0, total, torch.ones_like(total))
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    if x.dim() != 4:
        raise ValueError(f"repeat_kv: x must be (B, Hkv, S, Dh), got shape {tuple(x.shape)}")
    if num_groups < 1:
        raise ValueError(f"repeat_kv: num_groups={num_groups} must be >= 1")
    return x.repeat_interleave(num_groups, dim=1)  # (B, Hkv * G, S, Dh)
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    dim = x.shape[-1]
    compute = torch.promote_types(x.dtype, torch.float32)
    exponents = torch.arange(0, dim, 2, device=x.device, dtype=compute) / dim  # (D/2,): 2i/D
    angles = positions.to(compute).unsqueeze(-1) * torch.exp(-math.log(base) * exponents)  # (L, D/2)
    cos, sin = angles.cos(), angles.sin()
    pairs = x.to(compute).unflatten(-1, (dim // 2, 2))  # (..., L, D/2, 2)
    a, b = pairs[..., 0], pairs[..., 1]  # (..., L, D/2) each
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2).to(x.dtype)  # (..., L, D)
    ### END SOLUTION


class KVCache(nn.Module):
    """The keys and values of one attention layer, for every token so far.

    ``keys`` and ``values`` are ``None`` while empty, then (B, Hkv, S, Dh):
    non-persistent buffers, so ``.to(device)`` moves a filled cache and a
    model's ``state_dict`` does not include it. A model keeps one cache per
    layer.
    """

    def __init__(self):
        super().__init__()
        ### BEGIN SOLUTION
        self.register_buffer("keys", None, persistent=False)
        self.register_buffer("values", None, persistent=False)
        ### END SOLUTION

    @property
    def length(self) -> int:
        """S, the number of tokens held (0 while empty)."""
        ### BEGIN SOLUTION
        return 0 if self.keys is None else self.keys.shape[-2]
        ### END SOLUTION

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
        ### BEGIN SOLUTION
        if key.dim() != 4 or value.dim() != 4 or key.shape[:-1] != value.shape[:-1]:
            raise ValueError(f"KVCache.append: key {tuple(key.shape)} and value {tuple(value.shape)} must be "
                             f"(B, Hkv, T, Dh) with the same B, Hkv and T")
        if self.keys is None:
            self.keys, self.values = key, value
            return self.keys, self.values
        held = (*self.keys.shape[:2], self.keys.shape[-1], self.values.shape[-1])
        if (*key.shape[:2], key.shape[-1], value.shape[-1]) != held:
            raise ValueError(f"KVCache.append: key {tuple(key.shape)} and value {tuple(value.shape)} do not match "
                             f"the cache's keys {tuple(self.keys.shape)} and values {tuple(self.values.shape)}")
        self.keys = torch.cat([self.keys, key], dim=-2)  # (B, Hkv, S + T, Dh)
        self.values = torch.cat([self.values, value], dim=-2)  # (B, Hkv, S + T, Dv)
        return self.keys, self.values
        ### END SOLUTION


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
        ### BEGIN SOLUTION
        if num_heads <= 0 or embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        if num_kv_heads <= 0 or num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        if rope_base is not None and self.head_dim % 2:
            raise ValueError(f"rotary embedding needs an even head_dim; embed_dim={embed_dim} / "
                             f"num_heads={num_heads} = {self.head_dim}")
        self.rope_base = rope_base
        kv_dim = num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        ### END SOLUTION

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
        ### BEGIN SOLUTION
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must be (B, L, {self.embed_dim}), got shape {tuple(x.shape)}")
        past = 0 if cache is None else cache.length
        if positions is None:
            positions = torch.arange(past, past + x.shape[1], device=x.device)  # (L,)
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, H, L, Dh)
        k = split_heads(self.k_proj(x), self.num_kv_heads)  # (B, Hkv, L, Dh)
        v = split_heads(self.v_proj(x), self.num_kv_heads)  # (B, Hkv, L, Dh)
        if self.rope_base is not None:
            q = rotate_pairs(q, positions, base=self.rope_base)
            k = rotate_pairs(k, positions, base=self.rope_base)
        if cache is not None:
            # Append first: each new token attends to the earlier ones and to the new ones up to itself.
            k, v = cache.append(k, v)  # (B, Hkv, P + L, Dh)
        groups = self.num_heads // self.num_kv_heads
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # (B, H, P + L, Dh)
        out, _ = scaled_dot_product_attention(q, k, v, is_causal=is_causal)  # (B, H, L, Dh), scale 1/sqrt(Dh)
        return self.out_proj(merge_heads(out))  # (B, L, E)
        ### END SOLUTION


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
    ### BEGIN SOLUTION
    sizes = [int(size) for size in chunk_sizes]
    if any(size < 1 for size in sizes) or sum(sizes) != x.shape[1]:
        raise ValueError(f"chunk_sizes {sizes} must be positive and sum to L={x.shape[1]} (they sum to {sum(sizes)})")
    cache = KVCache()
    outputs, start = [], 0
    for size in sizes:
        outputs.append(attn(x[:, start:start + size], cache=cache))  # (B, size, E)
        start += size
    return torch.cat(outputs, dim=1), cache.keys, cache.values  # (B, L, E), (B, Hkv, L, Dh) twice
    ### END SOLUTION
