"""Deterministic tensors and hypothesis strategies shared by the hidden suites.

Hypothesis draws shapes and integer seeds; tensors come from a seeded CPU
``torch.Generator``, so every example is the same on every machine.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from hypothesis import strategies as st


def randn(shape, seed: int, *, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(tuple(shape), generator=gen, dtype=torch.float64) * scale).to(dtype)


def rand_bool(shape, seed: int, p_true: float = 0.7) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(tuple(shape), generator=gen) < p_true


def permutation(n: int, seed: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))


seeds = st.integers(min_value=0, max_value=2**20)
batch_dims = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


class QKVShapes(NamedTuple):
    """A counterexample's attention sizes, labelled as the API page names them (its repr is what a
    student reads): query (*B, L, E), key (*B, S, E), value (*B, S, Ev)."""

    B: tuple  # the batch dims, any number
    L: int
    S: int
    E: int
    Ev: int
