"""Claim 2: recurrence is serial.

An RNN over ``L`` tokens is ``L`` cell calls, each waiting for the one before.
Self-attention over the same tokens is a few matrix products with no
step-to-step dependency. Four measurements, all on a CPU:

1. the kernels one forward pass launches, counted: ``L`` times a handful for
   the RNN (each one waits for the last), the same handful at every ``L`` for
   attention (each one a bigger matrix product);
2. the time of one forward pass against ``L`` (one torch thread: on a shared
   machine a second thread waits for a busy core and measures the neighbours);
3. the same number of tokens as one chain of ``N`` or as ``N / 16``
   independent sequences of 16: the batch is parallel work, the chain is not;
4. the time of one RNN step against the width ``H`` (the seed's "hidden x2 ->
   time x4": the arithmetic grows like ``H^2``, the time only once a step is
   big enough to be compute-bound).

On a GPU (when one is present) it also prints the gap there.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._common import Units, check_size, demo, length_axis, loglog_slope, median_time, pyplot, save, seeded, tr

NAME = "serial_time"
TITLE = "Recurrence is serial"
UNIT = "recurrent_cells"
PRESETS = {"small": dict(lengths=[16, 64, 256], width=64, widths=[64, 256, 1024]),
           "full": dict(lengths=[16, 32, 64, 128, 256, 512, 1024], width=64,
                        widths=[32, 64, 128, 256, 512, 1024, 2048])}
CHUNK = 16  # the short sequences of measurement 3
WIDTH_RUN = dict(batch=32, steps=8)  # measurement 4: a training-sized batch, a few steps


class _KernelCounter(TorchDispatchMode):
    """Counts the aten operators (kernels) that run while it is active."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def kernel_calls(fn) -> int:
    """The number of aten kernels one call of ``fn`` launches."""
    with _KernelCounter() as counter:
        fn()
    return counter.count


def forward_passes(units: Units, batch: int, length: int, width: int, generator: torch.Generator,
                   device: str = "cpu"):
    """Two callables doing one forward pass over ``(batch, length, width)``: RNN and self-attention."""
    rc, attention = units.need("recurrent_cells"), units.need("attention")
    cell = rc.RNNCell(width, width).to(device)
    xs = torch.randn(batch, length, width, generator=generator).to(device)  # (B, L, E)
    w_q, w_k, w_v = (torch.randn(width, width, generator=generator).to(device) / width ** 0.5 for _ in range(3))

    def rnn():
        with torch.no_grad():
            return rc.unroll(cell, xs)[0]  # L dependent steps

    def attend():
        with torch.no_grad():
            return attention.scaled_dot_product_attention(xs @ w_q, xs @ w_k, xs @ w_v)[0]  # all at once

    return rnn, attend


def _synchronized(fn):
    def call():
        fn()
        torch.cuda.synchronize()
    return call


def gpu_gap(units: Units, length: int, width: int) -> dict | None:
    """Forward times on the GPU at ``length``, printed; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    rnn, attend = forward_passes(units, 1, length, width, seeded(), device="cuda")
    gap = {"length": length, "device": torch.cuda.get_device_name(),
           "rnn_seconds": median_time(_synchronized(rnn)), "attention_seconds": median_time(_synchronized(attend))}
    print(f"serial_time on {gap['device']}, L = {length}: RNN {gap['rnn_seconds'] * 1e3:.2f} ms, "
          f"attention {gap['attention_seconds'] * 1e3:.3f} ms "
          f"({gap['rnn_seconds'] / gap['attention_seconds']:.0f}x)")
    return gap


def _measure(units: Units, lengths, width: int, widths, generator) -> dict:
    calls = {"rnn": [], "attention": []}
    seconds = {"rnn": [], "attention": []}
    for length in lengths:
        rnn, attend = forward_passes(units, 1, length, width, generator)
        for name, fn in (("rnn", rnn), ("attention", attend)):
            calls[name].append(kernel_calls(fn))
            seconds[name].append(median_time(fn))
    # The chain of N tokens is the RNN above; the batch holds the same N tokens.
    batched = [median_time(forward_passes(units, tokens // CHUNK, CHUNK, width, generator)[0]) for tokens in lengths]
    step = []
    for w in widths:
        rnn, _ = forward_passes(units, WIDTH_RUN["batch"], WIDTH_RUN["steps"], w, generator)
        step.append(median_time(rnn, repeats=5) / WIDTH_RUN["steps"])
    return {"calls": calls, "seconds": seconds, "chain_seconds": seconds["rnn"], "batch_seconds": batched,
            "step_seconds": step}


def _plot(out_dir, lengths, width, widths, m):
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11.5, 8.0))
    ax = axes[0, 0]
    ax.loglog(lengths, m["calls"]["rnn"], "o-", label=tr("RNN: unroll"))
    ax.loglog(lengths, m["calls"]["attention"], "s-", label=tr("self-attention"))
    length_axis(ax, lengths)
    ax.set_xlabel(tr("sequence length L"))
    ax.set_ylabel(tr("kernels launched per forward pass (counted)"))
    per_token = kernels_per_token(lengths, m["calls"]["rnn"])
    ax.set_title(tr("1. Kernels: {per_token:.0f} per token, in a chain, vs {attention} in all").format(
        per_token=per_token, attention=m["calls"]["attention"][-1]))
    ax.legend()
    ax = axes[0, 1]
    ax.loglog(lengths, [t * 1e3 for t in m["seconds"]["rnn"]], "o-", label=tr("RNN: L steps, one after another"))
    ax.loglog(lengths, [t * 1e3 for t in m["seconds"]["attention"]], "s-", label=tr("self-attention: a few matrix products"))
    length_axis(ax, lengths)
    ax.set_xlabel(tr("sequence length L"))
    ax.set_ylabel(tr("time of one forward pass (ms, median)"))
    ax.set_title(tr("2. Time, width {width}, one thread").format(width=width))
    ax.legend(fontsize=8)
    ax = axes[1, 0]
    ax.loglog(lengths, [t * 1e3 for t in m["chain_seconds"]], "o-", label=tr("RNN, 1 sequence of N tokens"))
    ax.loglog(lengths, [t * 1e3 for t in m["batch_seconds"]], "^-", label=tr("RNN, N/{chunk} sequences of {chunk}").format(chunk=CHUNK))
    length_axis(ax, lengths)
    ax.set_xlabel(tr("tokens N"))
    ax.set_ylabel(tr("time of one forward pass (ms, median)"))
    ax.set_title(tr("3. {tokens} tokens as one chain cost x{ratio:.0f} the batch").format(
        tokens=lengths[-1], ratio=m["chain_seconds"][-1] / m["batch_seconds"][-1]))
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    ax.loglog(widths, [t * 1e6 for t in m["step_seconds"]], "o-", label=tr("one RNN step (measured)"))
    ideal = [m["step_seconds"][-1] * 1e6 * (w / widths[-1]) ** 2 for w in widths]
    ax.loglog(widths, ideal, ":", color="gray", label=tr("grows like H^2 (x4 per doubling)"))
    length_axis(ax, widths)
    ax.set_xlabel(tr("hidden width H"))
    ax.set_ylabel(tr("time of one step, batch {batch} (µs, median)").format(batch=WIDTH_RUN["batch"]))
    ax.set_title(tr("4. Width x2: x4 arithmetic; time x{ratio:.1f} at H = {width}").format(
        ratio=m["step_seconds"][-1] / m["step_seconds"][-2], width=widths[-1]))
    ax.legend(fontsize=8)
    return save(fig, out_dir, NAME)


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Count and time the RNN's chain against attention's matrix products.

    Returns:
      {"lengths", "rnn_calls", "attention_calls" (kernels per forward pass),
       "rnn_seconds", "attention_seconds" (medians), "rnn_slope", "attention_slope" (log-log),
       "chain_seconds", "batch_seconds" (N tokens as one chain / as N/16 sequences of 16),
       "widths", "step_seconds" (one RNN step at each width), "width_slope" (log-log slope
       over the two widest: 2 when compute-bound), "gpu" (None without CUDA)}
    """
    check_size(size)
    lengths, width, widths = (PRESETS[size][k] for k in ("lengths", "width", "widths"))
    m = _measure(units, lengths, width, widths, seeded())
    path = _plot(out_dir, lengths, width, widths, m)
    s = m["seconds"]
    return {"lengths": lengths, "rnn_calls": m["calls"]["rnn"], "attention_calls": m["calls"]["attention"],
            "rnn_seconds": s["rnn"], "attention_seconds": s["attention"],
            "rnn_slope": loglog_slope(lengths, s["rnn"]), "attention_slope": loglog_slope(lengths, s["attention"]),
            "chain_seconds": m["chain_seconds"], "batch_seconds": m["batch_seconds"],
            "widths": widths, "step_seconds": m["step_seconds"],
            "width_slope": loglog_slope(widths[-2:], m["step_seconds"][-2:]),
            "gpu": gpu_gap(units, lengths[-1], width), "png": str(path)}


def kernels_per_token(lengths, calls) -> float:
    """The kernels the RNN launches per extra token."""
    return (calls[-1] - calls[0]) / (lengths[-1] - lengths[0])


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json): kernels are
    counted, the same on every machine for the same code."""
    return {"rnn_kernels_per_token": f"{kernels_per_token(result['lengths'], result['rnn_calls']):.0f}",
            "attention_kernels": str(result["attention_calls"][-1]),
            "longest": str(result["lengths"][-1]), "chunk": str(CHUNK),
            "sequences": str(result["lengths"][-1] // CHUNK)}


def timings(result: dict) -> dict[str, tuple[float, str]]:
    """The times the lessons quote, as ranges over runs: (value, format)."""
    steps = dict(zip(result["widths"], result["step_seconds"]))
    out = {"rnn_slope": (result["rnn_slope"], "{:.1f}"),
           "chain_over_batch": (result["chain_seconds"][-1] / result["batch_seconds"][-1], "{:.0f}"),
           "batch_growth": (result["batch_seconds"][-1] / result["batch_seconds"][0], "{:.1f}")}
    for width in result["widths"][1:]:
        out[f"step_{width}_over_{width // 2}"] = (steps[width] / steps[width // 2], "{:.1f}")
    return out
