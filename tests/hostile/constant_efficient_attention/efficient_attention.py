"""Hostile: unit 6 that computes nothing. Every output is zeros of the right shape,
dtype and device, with the API page's argument checks and parameters, so shapes,
structure and errors look right while no attention, cache or rotation is computed."""
import torch
from torch import nn


def _check_qkv(query, key, value, block_size=1):
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise ValueError(f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)} need 2 dims")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query's E={query.shape[-1]} differs from key's {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key has S={key.shape[-2]} positions, value {value.shape[-2]}")
    if block_size < 1:
        raise ValueError(f"block_size={block_size} must be >= 1")


def flash_attention(query, key, value, *, is_causal=False, scale=None, block_size=64):
    _check_qkv(query, key, value, block_size)
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    return torch.zeros(*batch, query.shape[-2], value.shape[-1], dtype=query.dtype, device=query.device)


def repeat_kv(x, num_groups):
    if x.dim() != 4:
        raise ValueError(f"repeat_kv: x must be (B, Hkv, S, Dh), got shape {tuple(x.shape)}")
    if num_groups < 1:
        raise ValueError(f"repeat_kv: num_groups={num_groups} must be >= 1")
    return torch.zeros(x.shape[0], x.shape[1] * num_groups, *x.shape[2:], dtype=x.dtype, device=x.device)


def rotate_pairs(x, positions, *, base=10000.0):
    return torch.zeros_like(x)


class KVCache(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("keys", None, persistent=False)
        self.register_buffer("values", None, persistent=False)

    @property
    def length(self):
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, key, value):
        if key.dim() != 4 or value.dim() != 4 or key.shape[:-1] != value.shape[:-1]:
            raise ValueError(f"KVCache.append: key {tuple(key.shape)} and value {tuple(value.shape)} disagree")
        grown = (*key.shape[:2], self.length + key.shape[2])
        self.keys = torch.zeros(*grown, key.shape[-1], dtype=key.dtype, device=key.device)
        self.values = torch.zeros(*grown, value.shape[-1], dtype=value.dtype, device=value.device)
        return self.keys, self.values


class GroupedQueryAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, num_kv_heads, *, bias=True, rope_base=None):
        super().__init__()
        if num_heads <= 0 or embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        if num_kv_heads <= 0 or num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")
        head_dim = embed_dim // num_heads
        if rope_base is not None and head_dim % 2:
            raise ValueError(f"embed_dim={embed_dim} / num_heads={num_heads} = {head_dim} must be even")
        self.embed_dim, self.num_heads, self.num_kv_heads, self.head_dim = embed_dim, num_heads, num_kv_heads, head_dim
        self.rope_base = rope_base
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x, *, cache=None, positions=None, is_causal=True):
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must be (B, L, {self.embed_dim}), got shape {tuple(x.shape)}")
        if cache is not None:
            shape = (x.shape[0], self.num_kv_heads, x.shape[1], self.head_dim)
            cache.append(x.new_zeros(shape), x.new_zeros(shape))
        return torch.zeros_like(x)


def decode_in_chunks(attn, x, chunk_sizes):
    sizes = [int(size) for size in chunk_sizes]
    if any(size < 1 for size in sizes) or sum(sizes) != x.shape[1]:
        raise ValueError(f"chunk_sizes {sizes} must be positive and sum to L={x.shape[1]} (they sum to {sum(sizes)})")
    cache = KVCache()
    for size in sizes:
        attn(x[:, :size], cache=cache)
    return torch.zeros_like(x), cache.keys, cache.values
