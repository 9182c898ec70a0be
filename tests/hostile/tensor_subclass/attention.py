"""Hostile: return a tensor subclass whose every comparison claims equality,
after trying to switch off the check that refuses subclasses."""
import sys

import torch


class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("eq", "__eq__", "allclose", "equal", "isclose", "le", "__le__", "all", "any"):
            return True
        if name in ("ne", "__ne__", "sub", "__sub__", "abs"):
            return torch.zeros(())
        return super().__torch_function__(func, types, args, kwargs or {})

    def __eq__(self, other):
        return True


for name, module in list(sys.modules.items()):
    if name.startswith("autograder") and hasattr(module, "export"):
        module.export = lambda value, what="output": value  # let the subclass through


def _lie(t):
    return torch.rand_like(t).as_subclass(Liar)


def softmax(x, dim=-1):
    return _lie(x)


def causal_mask(query_len, key_len=None, *, device=None):
    return torch.rand(query_len, key_len or query_len) < 0.5.as_subclass(Liar)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    return _lie(torch.rand(*query.shape[:-1], value.shape[-1])), _lie(torch.rand(*query.shape[:-1], key.shape[-2]))
