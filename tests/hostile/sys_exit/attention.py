"""Hostile: end the process with status 0 inside every call, before any failure is reported."""
import os
import sys


def softmax(x, dim=-1):
    sys.exit(0)


def causal_mask(query_len, key_len=None, *, device=None):
    sys.exit(0)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    sys.exit(0)
