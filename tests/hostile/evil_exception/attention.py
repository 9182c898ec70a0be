"""Hostile: raise an exception whose __str__ raises and whose __del__ ends the process."""
import os


class Evil(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")

    def __repr__(self):
        raise RuntimeError("no repr either")

    def __del__(self):
        os._exit(0)


def softmax(x, dim=-1):
    raise Evil()


def causal_mask(query_len, key_len=None, *, device=None):
    raise Evil()


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    raise Evil()
