"""The tiny two-head model of the course: trained in seconds, used by the heads demo
(the attention viewer shows ``pronoun_model.py`` instead, whose attention follows content).

Task: at every position, say which token came just before it and which comes
just after it (two classifiers on top of one multi-head self-attention layer).
Tokens are random, so only positions help: one head has to look one step back
and the other one step forward, and training makes them do it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._common import Units, load_units, seeded, torch_threads

VOCAB = 16
MAX_LEN = 32
IGNORE = -100


class TinyModel(nn.Module):
    """Token + learned position embeddings, one ``MultiHeadAttention``, two readouts."""

    def __init__(self, multi_head, *, dim: int = 32, heads: int = 2, vocab: int = VOCAB, max_len: int = MAX_LEN):
        super().__init__()
        self.max_len = max_len
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_len, dim)
        self.attn = multi_head.MultiHeadAttention(dim, heads)
        self.previous = nn.Linear(dim, vocab)
        self.next = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor):
        """ids (B, L) long -> (previous logits (B, L, V), next logits (B, L, V), weights (B, H, L, L))."""
        if ids.shape[-1] > self.max_len:
            raise ValueError(f"the tiny model reads at most {self.max_len} tokens, got {ids.shape[-1]}")
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[-1], device=ids.device))  # (B, L, E)
        out, weights = self.attn(x, average_attn_weights=False)  # (B, L, E), (B, H, L, L)
        return self.previous(out), self.next(out), weights


def toy_batch(batch: int, length: int, generator: torch.Generator, vocab: int = VOCAB):
    """Random tokens and their targets: the previous and the next token (IGNORE at the ends)."""
    ids = torch.randint(0, vocab, (batch, length), generator=generator)  # (B, L)
    previous = torch.full_like(ids, IGNORE)
    following = torch.full_like(ids, IGNORE)
    previous[:, 1:], following[:, :-1] = ids[:, :-1], ids[:, 1:]
    return ids, previous, following


@dataclass
class Trained:
    model: TinyModel
    accuracy: float  # mean of the previous- and next-token accuracies on fresh data
    steps: int


def train_tiny_model(units: Units | None = None, *, steps: int = 400, batch: int = 64,
                     lengths: tuple[int, int] = (4, 16), seed: int = 0) -> Trained:
    """Train the tiny model with a fixed seed; a few seconds on a CPU (one torch thread)."""
    with torch_threads(1):
        return _train(units, steps, batch, lengths, seed)


def _train(units, steps, batch, lengths, seed) -> Trained:
    multi_head = (load_units() if units is None else units).need("multi_head")
    generator = seeded(seed)
    model = TinyModel(multi_head)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE)
    with torch.enable_grad():
        for _ in range(steps):
            length = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=generator))
            ids, previous, following = toy_batch(batch, length, generator)
            prev_logits, next_logits, _ = model(ids)
            loss = loss_fn(prev_logits.flatten(0, 1), previous.flatten()) + loss_fn(
                next_logits.flatten(0, 1), following.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        ids, previous, following = toy_batch(256, lengths[1], torch.Generator().manual_seed(seed + 1))
        prev_logits, next_logits, _ = model(ids)
        hits = [(logits.argmax(-1) == target)[target != IGNORE].float().mean()
                for logits, target in ((prev_logits, previous), (next_logits, following))]
    return Trained(model, float(sum(hits) / 2), steps)


def offset_weight(weights: torch.Tensor, offset: int) -> torch.Tensor:
    """Per head, the mean weight a query puts on the key ``offset`` positions away.

    Inputs:
      weights: (H, L, L) or (B, H, L, L).
    Returns:
      (H,), averaged over the queries that have such a key (and over the batch).
    """
    if weights.dim() == 3:
        weights = weights.unsqueeze(0)
    length = weights.shape[-1]
    rows = torch.arange(max(0, -offset), min(length, length - offset))
    return weights[:, :, rows, rows + offset].mean(dim=(0, 2))
