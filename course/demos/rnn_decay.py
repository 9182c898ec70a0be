"""Claim 1: an RNN's signal decays with distance.

``gradient_norms`` gives ``|| d h_T / d h_t ||`` for every step ``t``: how much
the last state still depends on the state ``T - t`` steps earlier. For a tanh
RNN it falls geometrically; an LSTM's gates slow the fall, and an LSTM whose
forget gates start open (forget bias 3) keeps a usable signal much longer.
It still has to travel ``T - t`` steps. Two distances are read off each curve:
where the signal falls below 5% of its size one step back (a seed speaks of
"5% left" without saying after how far), and where it falls below float32's
smallest normal number (about 1.2e-38), where float32 arithmetic loses it.
"""
from __future__ import annotations

import torch

from autograder.core.i18n import N_

from ._common import Units, check_size, demo, pyplot, save, sci, seeded, sig, tr

NAME = "rnn_decay"
TITLE = "An RNN's signal decays with distance"
UNIT = "recurrent_cells"
PRESETS = {"small": dict(steps=60, hidden=16), "full": dict(steps=200, hidden=32)}
FLOAT32_TINY = torch.finfo(torch.float32).tiny  # the smallest normal float32
SHARE = 0.05  # "5% of the signal left"


def _cells(rc, hidden: int) -> dict:
    cells = {
        N_("tanh RNN"): rc.RNNCell(hidden, hidden),
        N_("LSTM (forget bias 0)"): rc.LSTMCell(hidden, hidden),
        N_("LSTM (forget bias 3)"): rc.LSTMCell(hidden, hidden),
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
      {"distance": [0..T-1], "hidden": H, "norms": {cell name: [norm at each distance]},
       "five_percent": {cell name: first distance whose norm is below 5% of the norm at distance 1},
       "float32_floor": {cell name: first distance whose norm is below float32's smallest normal}}
      (None where the curve stays above within the T steps measured).
    """
    check_size(size)
    steps, hidden = PRESETS[size]["steps"], PRESETS[size]["hidden"]
    rc = units.need("recurrent_cells")
    generator = seeded()
    # float64: the tanh RNN's gradient falls below float32's smallest normal after ~100 steps.
    cells = {name: cell.double() for name, cell in _cells(rc, hidden).items()}
    xs = torch.randn(1, steps, hidden, generator=generator, dtype=torch.float64)  # (1, T, D)
    norms = {}
    for name, cell in cells.items():
        per_step = rc.gradient_norms(cell, xs)  # (T,), entry t-1 is step t
        norms[name] = [float(v) for v in per_step.flip(0)]  # by distance T - t = 0..T-1
    distance = list(range(steps))
    five = {name: first_below(values, SHARE * values[1]) for name, values in norms.items()}
    floor = {name: first_below(values, FLOAT32_TINY) for name, values in norms.items()}

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    for (name, values), style in zip(norms.items(), ("-", "--", "-.")):
        reach = (tr("{name} (5% at {steps} steps)").format(name=tr(name), steps=five[name]) if five[name] is not None
                 else tr("{name} (above 5% for {steps} steps)").format(name=tr(name), steps=steps))
        ax.semilogy(distance, values, style, label=reach)
    ax.axhline(FLOAT32_TINY, color="gray", lw=0.8, ls=":", label=tr("smallest normal float32 (1.2e-38)"))
    ax.set_xlabel(tr("distance T - t (steps)"))
    ax.set_ylabel(tr("|| d h_T / d h_t ||  (log scale)"))
    ax.set_title(tr("The signal from t fades on its way to T (H = {hidden}, untrained)").format(hidden=hidden))
    ax.legend(fontsize=8, loc="lower left")
    path = save(fig, out_dir, NAME)
    return {"distance": distance, "hidden": hidden, "norms": norms, "five_percent": five,
            "float32_floor": floor, "png": str(path)}


def first_below(values: list[float], threshold: float) -> int | None:
    """The first distance (index) after 0 whose value is below ``threshold``, or None."""
    return next((d for d, v in enumerate(values) if d > 0 and v < threshold), None)


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json)."""
    rnn = result["norms"]["tanh RNN"]
    five, floor = result["five_percent"], result["float32_floor"]
    return {"hidden": str(result["hidden"]),
            "five_percent_rnn": str(five["tanh RNN"]), "five_percent_lstm": str(five["LSTM (forget bias 0)"]),
            "five_percent_open_lstm": str(five["LSTM (forget bias 3)"]),
            "rnn_at_60": sci(rnn[60], 0), "float32_floor_rnn": str(floor["tanh RNN"]),
            "rnn_fall_in_10": sig(rnn[1] / rnn[11], 1)}
