"""Claim 8, the capstone: long-range recall, LSTM against a small Transformer.

"John went to the market, bought bread, ... and then he ...": to know who
"he" is, a model must reach back to a token seen ``k`` steps earlier. The toy
version: the first token is a name, ``k`` random tokens follow (other names
among them, as distractors), then the query token "he"; the answer is the
first name. For each ``k`` an LSTM (unit 1's ``LSTMCell``) and a two-block
Transformer (units 4 and 5) are trained from scratch with the same budget and
seed. The LSTM's only route from "he" back to the name is ``k`` steps of
recurrence, and the learning signal fades along it (claim 1); the
Transformer's route is one attention step at any ``k``.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ._common import Units, check_size, demo, percent, pyplot, save, seeded, tr

NAME = "capstone"
TITLE = "Long-range recall: LSTM vs Transformer"
UNIT = "transformer_block"
NAMES, FILLERS = 8, 16  # token ids: names 0..7, fillers 8..23, "he" = 24
VOCAB = NAMES + FILLERS + 1
HE = VOCAB - 1
PRESETS = {"small": dict(distances=[4, 32], steps=300),
           "full": dict(distances=[2, 4, 8, 16, 32, 64], steps=300)}
SETTINGS = dict(dim=32, batch=64, lr=3e-3, eval_batch=512)


def recall_batch(batch: int, k: int, generator: torch.Generator):
    """(tokens (B, k + 2), answer (B,)): name, k tokens (fillers and other names), "he"."""
    name = torch.randint(0, NAMES, (batch,), generator=generator)
    middle = torch.randint(0, NAMES + FILLERS, (batch, k), generator=generator)
    tokens = torch.cat([name[:, None], middle, torch.full((batch, 1), HE)], dim=1)
    return tokens, name


class LSTMReader(nn.Module):
    """Embedding, the course's LSTMCell unrolled, a readout of the last h."""

    def __init__(self, recurrent_cells, dim: int):
        super().__init__()
        self.recurrent_cells = recurrent_cells
        self.embed = nn.Embedding(VOCAB, dim)
        self.cell = recurrent_cells.LSTMCell(dim, dim)
        self.readout = nn.Linear(dim, NAMES)

    def forward(self, tokens):
        _, (h, _) = self.recurrent_cells.unroll(self.cell, self.embed(tokens))
        return self.readout(h)  # (B, NAMES)


class TransformerReader(nn.Module):
    """Embedding + sinusoidal positions, two pre-norm TransformerBlocks, a readout of the last position."""

    def __init__(self, positional_encoding, transformer_block, dim: int, layers: int = 2):
        super().__init__()
        self.dim = dim
        self.embed = nn.Embedding(VOCAB, dim)
        self.positions = positional_encoding.SinusoidalPositionalEncoding(dim, max_len=512)
        self.blocks = nn.ModuleList(
            [transformer_block.TransformerBlock(dim, 2, 2 * dim, norm_first=True) for _ in range(layers)])
        self.norm = transformer_block.LayerNorm(dim)
        self.readout = nn.Linear(dim, NAMES)

    def forward(self, tokens):
        h = self.positions(self.embed(tokens) * math.sqrt(self.dim))  # (B, L, E)
        for block in self.blocks:
            h = block(h)
        return self.readout(self.norm(h[:, -1]))  # (B, NAMES)


def train_and_test(model: nn.Module, k: int, steps: int, seed: int) -> float:
    """Train on distance k with Adam, then return the accuracy on fresh sequences."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=SETTINGS["lr"])
    with torch.enable_grad():
        for _ in range(steps):
            tokens, answer = recall_batch(SETTINGS["batch"], k, generator)
            loss = nn.functional.cross_entropy(model(tokens), answer)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    with torch.no_grad():
        tokens, answer = recall_batch(SETTINGS["eval_batch"], k, torch.Generator().manual_seed(seed + 1))
        return float((model(tokens).argmax(-1) == answer).float().mean())


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Accuracy against k for both models (chance is 1/8).

    Returns:
      {"distances", "lstm": [accuracy per k], "transformer": [...], "chance", "steps"}
    """
    check_size(size)
    distances, steps = PRESETS[size]["distances"], PRESETS[size]["steps"]
    rc, pe, tb = (units.need(n) for n in ("recurrent_cells", "positional_encoding", "transformer_block"))
    dim = SETTINGS["dim"]
    lstm, transformer = [], []
    for k in distances:
        seeded()
        lstm.append(train_and_test(LSTMReader(rc, dim), k, steps, seed=k))
        seeded()
        transformer.append(train_and_test(TransformerReader(pe, tb, dim), k, steps, seed=k))

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.semilogx(distances, transformer, "s-", base=2, label=tr("Transformer (2 blocks)"))
    ax.semilogx(distances, lstm, "o-", base=2, label=tr("LSTM"))
    ax.axhline(1 / NAMES, color="gray", ls=":", lw=0.8, label=tr("chance (1/{count})").format(count=NAMES))
    ax.set_ylim(0, 1.05)
    ax.set_xticks(distances, [str(k) for k in distances])
    ax.set_xlabel(tr("k: steps between the name and 'he'"))
    ax.set_ylabel(tr("accuracy"))
    ax.set_title(tr("Who is 'he'? Same budget: {steps} Adam steps, width {width}").format(steps=steps, width=dim))
    ax.legend()
    path = save(fig, out_dir, NAME)
    return {"distances": distances, "lstm": lstm, "transformer": transformer, "chance": 1 / NAMES,
            "steps": steps, "png": str(path)}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json)."""
    out = {f"lstm_{k}": percent(v) for k, v in zip(result["distances"], result["lstm"])}
    out.update(transformer_min=percent(min(result["transformer"])), transformer_max=percent(max(result["transformer"])),
               steps=str(result["steps"]))
    return out
