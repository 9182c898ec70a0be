"""Claim 1: an RNN's signal decays with distance.

``gradient_norms`` gives ``|| d h_T / d h_t ||`` for every step ``t``: how much
the last state still depends on the state ``T - t`` steps earlier. For a tanh
RNN it falls geometrically; an LSTM's gates slow the fall, and an LSTM whose
forget gates start open (forget bias 3) keeps a usable signal much longer.
It still has to travel ``T - t`` steps.
"""
from __future__ import annotations

import torch

from ._common import Units, check_size, demo, pyplot, save, seeded

NAME = "rnn_decay"
TITLE = "An RNN's signal decays with distance"
UNIT = "recurrent_cells"
PRESETS = {"small": dict(steps=60, hidden=16), "full": dict(steps=200, hidden=32)}


def _cells(rc, hidden: int) -> dict:
    cells = {
        "tanh RNN": rc.RNNCell(hidden, hidden),
        "LSTM (forget bias 0)": rc.LSTMCell(hidden, hidden),
        "LSTM (forget bias 3)": rc.LSTMCell(hidden, hidden),
    }
    with torch.no_grad():
        # Gate order i, f, g, o: rows H..2H are the forget gate.
        open_lstm = cells["LSTM (forget bias 3)"]
        open_lstm.bias_ih[hidden : 2 * hidden] = 3.0
        open_lstm.bias_hh[hidden : 2 * hidden] = 0.0
    return cells


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Plot ``gradient_norms`` against distance for a tanh RNN and two LSTMs.

    Returns:
      {"distance": [0..T-1], "hidden": H, "norms": {cell name: [norm at each distance]}}
    """
    check_size(size)
    steps, hidden = PRESETS[size]["steps"], PRESETS[size]["hidden"]
    rc = units.need("recurrent_cells")
    generator = seeded()
    # float64: the tanh RNN's gradient falls below float32's range within ~60 steps.
    cells = {name: cell.double() for name, cell in _cells(rc, hidden).items()}
    xs = torch.randn(1, steps, hidden, generator=generator, dtype=torch.float64)  # (1, T, D)
    norms = {}
    for name, cell in cells.items():
        per_step = rc.gradient_norms(cell, xs)  # (T,), entry t-1 is step t
        norms[name] = [float(v) for v in per_step.flip(0)]  # by distance T - t = 0..T-1
    distance = list(range(steps))

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for (name, values), style in zip(norms.items(), ("-", "--", "-.")):
        ax.semilogy(distance, values, style, label=name)
    ax.set_xlabel("distance T - t (steps)")
    ax.set_ylabel("|| d h_T / d h_t ||  (log scale)")
    ax.set_title(f"The signal from t fades on its way to T (H = {hidden})")
    ax.legend()
    path = save(fig, out_dir, NAME)
    return {"distance": distance, "hidden": hidden, "norms": norms, "png": str(path)}
