"""Claim 1b: seq2seq's fixed context vector is a bottleneck; Bahdanau's attention removes it.

An encoder GRU reads ``n`` random symbols; a decoder GRU must write them back
in the same order. Without attention the decoder starts from the encoder's
last state and sees nothing else: the whole sentence must fit in that one
vector of ``H`` numbers (Sutskever et al. 2014, Cho et al. 2014). With
attention (Bahdanau et al. 2014), at every output step the decoder's state
scores every encoder state with a small additive network, and reads their
softmax-weighted sum as well. Both models have the same width, the same
training budget and the same seed; we measure the share of symbols recalled
right, by sequence length.
"""
from __future__ import annotations

import torch
from torch import nn

from ._common import Units, check_size, demo, percent, pyplot, save, seeded, tr

NAME = "seq2seq"
TITLE = "The fixed context vector is a bottleneck"
UNIT = "recurrent_cells"
SYMBOLS = 8  # token ids 0..7; BOS = 8 starts the decoder
BOS = SYMBOLS
PRESETS = {"small": dict(lengths=[4, 12], steps=250),
           "full": dict(lengths=[4, 8, 16, 32], steps=600)}
SETTINGS = dict(hidden=32, batch=64, lr=1e-2, eval_batch=512)


def copy_batch(batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """(B, n) random symbols: the source, and the target to write back."""
    return torch.randint(0, SYMBOLS, (batch, length), generator=generator)


class Seq2Seq(nn.Module):
    """A GRU encoder and a GRU decoder (unit 1's GRUCell), with or without additive attention.

    Without attention the decoder's only view of the source is its first state,
    the encoder's last one: the fixed context vector.
    """

    def __init__(self, recurrent_cells, hidden: int, attention: bool):
        super().__init__()
        self.recurrent_cells, self.attention = recurrent_cells, attention
        self.embed = nn.Embedding(SYMBOLS + 1, hidden)
        self.encoder = recurrent_cells.GRUCell(hidden, hidden)
        context = hidden if attention else 0
        self.decoder = recurrent_cells.GRUCell(hidden + context, hidden)
        self.readout = nn.Linear(hidden + context, SYMBOLS)
        if attention:  # Bahdanau's score: v . tanh(W s + U h_j)
            self.w_state, self.w_source = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden, bias=False)
            self.v = nn.Linear(hidden, 1, bias=False)

    def context(self, state: torch.Tensor, sources: torch.Tensor, keys: torch.Tensor):
        """state (B, H), sources (B, n, H), keys = U sources (B, n, H) -> context (B, H), weights (B, n)."""
        scores = self.v(torch.tanh(self.w_state(state)[:, None] + keys))[..., 0]  # (B, n)
        weights = torch.softmax(scores, dim=-1)
        return (weights[:, :, None] * sources).sum(1), weights  # (B, H), (B, n)

    def forward(self, source: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        """source (B, n) -> logits (B, n, SYMBOLS). With ``target`` the decoder reads the true
        previous symbol (teacher forcing); without, its own previous guess."""
        sources, state = self.recurrent_cells.unroll(self.encoder, self.embed(source))  # (B, n, H), (B, H)
        keys = self.w_source(sources) if self.attention else None
        previous = torch.full_like(source[:, 0], BOS)  # (B,)
        logits = []
        for t in range(source.shape[1]):
            x = self.embed(previous)  # (B, H)
            if self.attention:
                context, _ = self.context(state, sources, keys)
                x = torch.cat([x, context], dim=-1)  # (B, 2H)
            state = self.decoder(x, state)
            out = torch.cat([state, context], dim=-1) if self.attention else state
            logits.append(self.readout(out))  # (B, SYMBOLS)
            previous = target[:, t] if target is not None else logits[-1].argmax(-1)
        return torch.stack(logits, dim=1)  # (B, n, SYMBOLS)


def train_and_test(model: Seq2Seq, length: int, steps: int, seed: int) -> float:
    """Train on sequences of ``length`` with Adam, then return the share of symbols written back
    right, decoding greedily (no teacher forcing) on fresh sequences."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=SETTINGS["lr"])
    with torch.enable_grad():
        for _ in range(steps):
            source = copy_batch(SETTINGS["batch"], length, generator)
            loss = nn.functional.cross_entropy(model(source, source).flatten(0, 1), source.flatten())
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    with torch.no_grad():
        source = copy_batch(SETTINGS["eval_batch"], length, torch.Generator().manual_seed(seed + 1))
        return float((model(source).argmax(-1) == source).float().mean())


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Recall against sequence length, for seq2seq with and without attention (chance is 1/8).

    Returns:
      {"lengths", "fixed_vector": [recall per length], "attention": [...], "chance", "steps", "hidden"}
    """
    check_size(size)
    lengths, steps = PRESETS[size]["lengths"], PRESETS[size]["steps"]
    rc, hidden = units.need("recurrent_cells"), SETTINGS["hidden"]
    curves = {"fixed_vector": [], "attention": []}
    for length in lengths:
        for name in curves:
            seeded(length)
            curves[name].append(train_and_test(Seq2Seq(rc, hidden, name == "attention"), length, steps, length))

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(lengths, curves["attention"], "s-", label=tr("with attention (Bahdanau): reads every encoder state"))
    ax.plot(lengths, curves["fixed_vector"], "o-", label=tr("fixed context vector: {hidden} numbers").format(hidden=hidden))
    ax.axhline(1 / SYMBOLS, color="gray", ls=":", lw=0.8, label=tr("chance (1/{count})").format(count=SYMBOLS))
    ax.set_ylim(0, 1.05)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel(tr("sequence length n (symbols to copy)"))
    ax.set_ylabel(tr("share of symbols written back right"))
    ax.set_title(tr("Copy n symbols: same GRUs, {steps} Adam steps, width {hidden}").format(steps=steps, hidden=hidden))
    ax.legend(loc="lower left", fontsize=8)
    path = save(fig, out_dir, NAME)
    return {"lengths": lengths, **curves, "chance": 1 / SYMBOLS, "steps": steps, "hidden": hidden,
            "png": str(path)}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json)."""
    out = {"steps": str(result["steps"]), "hidden": str(result["hidden"])}
    for n, fixed, attention in zip(result["lengths"], result["fixed_vector"], result["attention"]):
        out[f"fixed_vector_{n}"], out[f"attention_{n}"] = percent(fixed), percent(attention)
    return out
