"""Claim 5: heads look at different things.

The tiny model (``tiny_model.py``) must report, at every position, the token
before it and the token after it. Tokens are random, so only position helps.
After a few seconds of training one head looks one step back and the other
one step forward: the same layer, two different questions.
"""
from __future__ import annotations

import torch

from ._common import Units, check_size, demo, percent, pyplot, save, tr
from .tiny_model import offset_weight, toy_batch, train_tiny_model

NAME = "heads"
TITLE = "Heads look at different things"
UNIT = "multi_head"
PRESETS = {"small": dict(steps=250, length=10), "full": dict(steps=400, length=12)}


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Train the tiny model and draw each head's attention map on one sequence.

    Returns:
      {"accuracy", "steps", "back" (per head: mean weight on the previous token),
       "forward" (per head: mean weight on the next token), "maps" (H x L x L)}
    """
    check_size(size)
    steps, length = PRESETS[size]["steps"], PRESETS[size]["length"]
    trained = train_tiny_model(units, steps=steps)
    ids, _, _ = toy_batch(256, length, torch.Generator().manual_seed(7))
    with torch.no_grad():
        _, _, weights = trained.model(ids)  # (B, H, L, L)
    back, forward = offset_weight(weights, -1), offset_weight(weights, +1)
    maps = weights[0]  # (H, L, L)

    plt = pyplot()
    heads = maps.shape[0]
    fig, axes = plt.subplots(1, heads, figsize=(4.6 * heads, 4.4), squeeze=False,
                             layout="constrained")
    labels = [str(int(t)) for t in ids[0]]
    for h, ax in enumerate(axes[0]):
        image = ax.imshow(maps[h].numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(tr("head {head}: {back:.0%} on the previous,\n{forward:.0%} on the next token").format(
            head=h, back=back[h], forward=forward[h]), fontsize=10)
        ax.set_xticks(range(length), labels, fontsize=7)
        ax.set_yticks(range(length), labels, fontsize=7)
        ax.set_xlabel(tr("key (token id)"))
        ax.set_ylabel(tr("query (token id)"))
    fig.colorbar(image, ax=list(axes[0]), label=tr("attention weight"), shrink=0.85)
    # Above the figure: the heads' square maps leave constrained layout no room under a suptitle.
    fig.suptitle(tr("Tiny model after {steps} steps: {accuracy:.0%} right on 'previous and next token'").format(
        steps=steps, accuracy=trained.accuracy), y=1.06)
    path = save(fig, out_dir, NAME)
    return {"accuracy": trained.accuracy, "steps": steps, "back": [float(v) for v in back],
            "forward": [float(v) for v in forward], "maps": maps.tolist(), "png": str(path)}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json): the head that
    looks back most, and the one that looks forward most."""
    return {"steps": str(result["steps"]), "accuracy": percent(result["accuracy"]),
            "back": percent(max(result["back"])), "forward": percent(max(result["forward"]))}
