"""Claim 3: attention's path is length 1.

The output at the last position depends on the first input through ``L - 1``
cell steps in an RNN, and through one attention weight in self-attention. We
take the Jacobian ``d y_L / d x_j`` for every input position ``j`` and plot its
norm against the distance ``L - j``: the RNN's falls geometrically, attention's
does not depend on the distance at all (it only wobbles with the weights).
"""
from __future__ import annotations

import math

import torch

from ._common import Units, check_size, demo, pyplot, save, sci, seeded, tr

NAME = "path_length"
TITLE = "Attention's path is length 1"
UNIT = "attention"
PRESETS = {"small": dict(length=32, width=16, samples=2), "full": dict(length=128, width=32, samples=4)}


def jacobian_norms(output: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """``|| d output / d inputs[0, j] ||_F`` for every position j.

    Inputs:
      output: (H,), computed from ``inputs``.
      inputs: (1, L, D), a leaf that requires grad.
    Returns:
      (L,)
    """
    squares = torch.zeros(inputs.shape[1], dtype=inputs.dtype)
    for k in range(output.shape[0]):
        (row,) = torch.autograd.grad(output[k], inputs, retain_graph=True)  # (1, L, D)
        squares += row[0].pow(2).sum(-1)
    return squares.sqrt()


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Plot ``|| d y_L / d x_j ||`` against ``L - j`` for a tanh RNN and for self-attention.

    Returns:
      {"distance": [0..L-1], "rnn": [...], "attention": [...]} (norms averaged
      over a few random sequences; the RNN is the unit-1 RNNCell, attention is
      unit 2's scaled_dot_product_attention with random projections).
    """
    check_size(size)
    length, width, samples = (PRESETS[size][k] for k in ("length", "width", "samples"))
    rc, attention = units.need("recurrent_cells"), units.need("attention")
    generator = seeded()
    # float64: the RNN's dependence falls below float32's range within ~60 steps.
    cell = rc.RNNCell(width, width).double()
    w_q, w_k, w_v = (torch.randn(width, width, generator=generator, dtype=torch.float64) / math.sqrt(width)
                     for _ in range(3))
    rnn, att = torch.zeros(length, dtype=torch.float64), torch.zeros(length, dtype=torch.float64)
    with torch.enable_grad():
        for _ in range(samples):
            xs = torch.randn(1, length, width, generator=generator, dtype=torch.float64).requires_grad_(True)  # (1, L, D)
            outputs, _ = rc.unroll(cell, xs)  # (1, L, H)
            rnn += jacobian_norms(outputs[0, -1], xs) / samples
            y, _ = attention.scaled_dot_product_attention(xs @ w_q, xs @ w_k, xs @ w_v)  # (1, L, D)
            att += jacobian_norms(y[0, -1], xs) / samples
    # By distance L - j: position L is distance 0.
    rnn_d, att_d = [float(v) for v in rnn.flip(0)], [float(v) for v in att.flip(0)]
    distance = list(range(length))

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.semilogy(distance, rnn_d, "-", label=tr("tanh RNN: path of L - j steps"))
    ax.semilogy(distance, att_d, "-", label=tr("self-attention: path of 1 step"))
    ax.set_xlabel(tr("distance L - j"))
    ax.set_ylabel(tr("|| d y_L / d x_j ||  (log scale)"))
    ax.set_title(tr("How much the last output feels input j (L = {length})").format(length=length))
    ax.legend()
    path = save(fig, out_dir, NAME)
    return {"distance": distance, "rnn": rnn_d, "attention": att_d, "png": str(path)}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json)."""
    return {"length": str(len(result["distance"])), "farthest": str(result["distance"][-1]),
            "attention_farthest": sci(result["attention"][-1], 0), "rnn_farthest": sci(result["rnn"][-1], 0)}
