"""Hostile: find a correct implementation already loaded in this process and delegate."""
import sys

import torch

NAMES = ("softmax", "causal_mask", "scaled_dot_product_attention")


def _donor():
    for name, module in list(sys.modules.items()):
        if module is None or name == __name__ or name.startswith(("torch", "numpy")):
            continue
        if all(callable(getattr(module, n, None)) for n in NAMES):
            if getattr(module, "__file__", None) != __file__:
                return module
    return None


def _call(name, *args, **kwargs):
    donor = _donor()
    if donor is None:
        raise RuntimeError("no donor found")
    return getattr(donor, name)(*args, **kwargs)


def softmax(x, dim=-1):
    return _call("softmax", x, dim)


def causal_mask(query_len, key_len=None, *, device=None):
    return _call("causal_mask", query_len, key_len, device=device)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    return _call("scaled_dot_product_attention", query, key, value, attn_mask, is_causal=is_causal, scale=scale, dropout_p=dropout_p)
