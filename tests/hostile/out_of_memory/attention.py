"""Hostile: allocate until memory runs out (and keep it between calls)."""
import torch

_HOARD = []


def _eat():
    while True:
        _HOARD.append(torch.empty(1 << 28))  # 1 GiB each


def softmax(x, dim=-1):
    _eat()


def causal_mask(query_len, key_len=None, *, device=None):
    _HOARD.append(bytearray(1 << 40))


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    _eat()
