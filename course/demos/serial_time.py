"""Claim 2: recurrence is serial.

An RNN over ``L`` tokens is ``L`` cell calls, each waiting for the one before:
its time grows linearly with ``L`` whatever the hardware. Self-attention over
the same tokens is a few matrix products with no step-to-step dependency, so
all positions are computed at once. Measured on this machine, one forward pass.
"""
from __future__ import annotations

import torch

from ._common import Units, best_time, check_size, demo, length_axis, loglog_slope, pyplot, save, seeded

NAME = "serial_time"
TITLE = "Recurrence is serial"
UNIT = "recurrent_cells"
PRESETS = {"small": dict(lengths=[16, 64, 256], width=64),
           "full": dict(lengths=[16, 32, 64, 128, 256, 512, 1024], width=64)}


def forward_passes(units: Units, length: int, width: int, generator: torch.Generator):
    """Two callables doing one forward pass over ``(1, length, width)``: RNN and self-attention."""
    rc, attention = units.need("recurrent_cells"), units.need("attention")
    cell = rc.RNNCell(width, width)
    xs = torch.randn(1, length, width, generator=generator)  # (1, L, E)
    w_q, w_k, w_v = (torch.randn(width, width, generator=generator) / width ** 0.5 for _ in range(3))

    def rnn():
        with torch.no_grad():
            return rc.unroll(cell, xs)[0]  # L dependent steps

    def attend():
        with torch.no_grad():
            return attention.scaled_dot_product_attention(xs @ w_q, xs @ w_k, xs @ w_v)[0]  # all at once

    return rnn, attend


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Time one forward pass against the length, for the unrolled cell and for attention.

    Returns:
      {"lengths", "rnn_seconds", "attention_seconds", "rnn_slope", "attention_slope"}
      (slopes of log time against log length: 1 means linear).
    """
    check_size(size)
    lengths, width = PRESETS[size]["lengths"], PRESETS[size]["width"]
    generator = seeded()
    rnn_s, att_s = [], []
    for length in lengths:
        rnn, attend = forward_passes(units, length, width, generator)
        rnn_s.append(best_time(rnn))
        att_s.append(best_time(attend))

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.loglog(lengths, [t * 1e3 for t in rnn_s], "o-", label="RNN: unroll (L steps, one after another)")
    ax.loglog(lengths, [t * 1e3 for t in att_s], "s-", label="self-attention (one matrix product)")
    length_axis(ax, lengths)
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("time of one forward pass (ms)")
    ax.set_title(f"Measured on this machine, width {width}, torch threads {torch.get_num_threads()}")
    ax.legend()
    path = save(fig, out_dir, NAME)
    return {"lengths": lengths, "rnn_seconds": rnn_s, "attention_seconds": att_s,
            "rnn_slope": loglog_slope(lengths, rnn_s), "attention_slope": loglog_slope(lengths, att_s),
            "png": str(path)}
