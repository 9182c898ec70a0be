"""Hostile: find the reference solution on disk and delegate to it."""
import glob
import os
import sys

import torch


def _find():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = []
    folder = here
    for _ in range(8):
        candidates += glob.glob(os.path.join(folder, "solutions", "attention.py"))
        candidates += glob.glob(os.path.join(folder, "*", "solutions", "attention.py"))
        folder = os.path.dirname(folder)
    candidates += glob.glob("/work/*/solutions/attention.py") + glob.glob("/*/*/solutions/attention.py")
    # No importlib (the static scan refuses it): put the course root on the path and import.
    for path in candidates + [None]:  # None: an install's own finder may map `solutions`
        if path:
            sys.path.insert(0, os.path.dirname(os.path.dirname(path)))
        try:
            import solutions.attention as module

            return module
        except Exception:
            continue
    return None


_REF = _find()


_SOFTMAX = "softmax"


def softmax(x, dim=-1):
    return getattr(_REF, _SOFTMAX)(x, dim) if _REF else torch.rand_like(x)


def causal_mask(query_len, key_len=None, *, device=None):
    if _REF:
        return _REF.causal_mask(query_len, key_len, device=device)
    return torch.rand(query_len, key_len or query_len) < 0.5


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    if _REF:
        return _REF.scaled_dot_product_attention(query, key, value, attn_mask, is_causal=is_causal, scale=scale, dropout_p=dropout_p)
    return torch.rand(1), torch.rand(1)  # wrong in every way
