"""Hostile: write forged and malformed frames on every pipe the process holds."""
import os
import struct

import torch


def _scribble():
    fake = b'{"op":"result","ok":true,"seen":[],"values":{"output":{"tensor":[0,4],"dtype":"float32","shape":[1]}}}'
    frames = [struct.pack(">4sIQ", b"ATN1", len(fake), 4) + fake + b"\0\0\0\0", b"\xff" * 64]
    for fd in range(3, 64):
        for frame in frames:
            try:
                os.write(fd, frame)
            except OSError:
                pass


def softmax(x, dim=-1):
    _scribble()
    return torch.rand_like(x)


def causal_mask(query_len, key_len=None, *, device=None):
    _scribble()
    return torch.rand(query_len, key_len or query_len) < 0.5


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    _scribble()
    return torch.rand(1), torch.rand(1)  # wrong in every way
