"""Hostile: print 100 MB in every call, then return wrong answers."""
import sys

import torch

_CHUNK = "100 passed\n" * 100_000  # about 1 MB


def _flood():
    for _ in range(100):
        sys.stdout.write(_CHUNK)
    sys.stdout.flush()


def softmax(x, dim=-1):
    _flood()
    return torch.rand_like(x)


def causal_mask(query_len, key_len=None, *, device=None):
    _flood()
    return torch.rand(query_len, key_len or query_len) < 0.5


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    _flood()
    return torch.rand(1), torch.rand(1)  # wrong in every way
