"""Claim 9: the price of attention.

Attention compares every query with every key: an ``L x L`` table of scores,
so its time and memory grow like ``L^2``. An RNN keeps one state per step:
``L``. Memory here is what a training forward pass keeps for the backward pass
(the tensors autograd saves), counted exactly; time is measured on this machine,
the median of repeated runs (one run is at the mercy of whatever else the machine does).
"""
from __future__ import annotations

import torch

from ._common import Units, check_size, demo, length_axis, loglog_slope, median_time, pyplot, save, seeded, tr

NAME = "price"
TITLE = "The price: O(n^2) time and memory"
UNIT = "attention"
PRESETS = {"small": dict(lengths=[128, 256, 512, 1024], width=16, time_lengths=[64, 256, 1024]),
           "full": dict(lengths=[128, 256, 512, 1024, 2048, 4096], width=16,
                        time_lengths=[64, 128, 256, 512, 1024, 2048, 4096])}
REPEATS = 7  # timed batches per point: the plot shows their median


def saved_bytes(fn) -> int:
    """Bytes of the distinct storages autograd saves for backward while ``fn()`` runs."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Memory kept for backward and forward time, against L, for attention and an RNN.

    Returns:
      {"lengths", "attention_bytes", "rnn_bytes", "attention_memory_slope", "rnn_memory_slope",
       "time_lengths", "attention_seconds", "rnn_seconds" (medians), "attention_time_ratios"
       (each length's time over the one before)} (slopes of log-log fits: 2 = quadratic,
       1 = linear; the memory slopes use the two longest lengths).
    """
    check_size(size)
    lengths, width, time_lengths = (PRESETS[size][k] for k in ("lengths", "width", "time_lengths"))
    rc, attention = units.need("recurrent_cells"), units.need("attention")
    generator = seeded()
    cell = rc.RNNCell(width, width)
    w_q, w_k, w_v = (torch.randn(width, width, generator=generator) / width ** 0.5 for _ in range(3))

    def attend(xs):
        return attention.scaled_dot_product_attention(xs @ w_q, xs @ w_k, xs @ w_v)[0]

    att_bytes, rnn_bytes = [], []
    for length in lengths:
        xs = torch.randn(1, length, width, generator=generator).requires_grad_(True)
        att_bytes.append(saved_bytes(lambda: attend(xs)))
        rnn_bytes.append(saved_bytes(lambda: rc.unroll(cell, xs)))
    att_s, rnn_s = [], []
    for length in time_lengths:
        xs = torch.randn(1, length, width, generator=generator)
        with torch.no_grad():
            att_s.append(median_time(lambda: attend(xs), repeats=REPEATS))
            rnn_s.append(median_time(lambda: rc.unroll(cell, xs), repeats=REPEATS))

    plt = pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.0))
    ax0.loglog(lengths, [b / 2**20 for b in att_bytes], "s-", label=tr("attention"))
    ax0.loglog(lengths, [b / 2**20 for b in rnn_bytes], "o-", label=tr("RNN"))
    length_axis(ax0, lengths)
    ax0.set_xlabel(tr("sequence length L"))
    ax0.set_ylabel(tr("MiB kept for backward"))
    ax0.set_title(tr("Memory: attention ~ L^{attention:.2f}, RNN ~ L^{rnn:.2f}").format(
        attention=loglog_slope(lengths[-2:], att_bytes[-2:]), rnn=loglog_slope(lengths[-2:], rnn_bytes[-2:])))
    ax0.legend(loc="upper left")
    ax1.loglog(time_lengths, [t * 1e3 for t in att_s], "s-", label=tr("attention"))
    ax1.loglog(time_lengths, [t * 1e3 for t in rnn_s], "o-", label=tr("RNN (unroll)"))
    length_axis(ax1, time_lengths)
    ax1.set_xlabel(tr("sequence length L"))
    ax1.set_ylabel(tr("forward time (ms, median of {repeats})").format(repeats=REPEATS))
    ax1.set_title(tr("Time on this machine (width {width}, {threads} thread(s)): attention x{growth:.1f} at L = "
                     "{length}").format(width=width, threads=torch.get_num_threads(), growth=att_s[-1] / att_s[-2],
                                        length=time_lengths[-1]))
    ax1.legend(loc="upper left")
    path = save(fig, out_dir, NAME)
    return {"lengths": lengths, "attention_bytes": att_bytes, "rnn_bytes": rnn_bytes,
            "attention_memory_slope": loglog_slope(lengths[-2:], att_bytes[-2:]),
            "rnn_memory_slope": loglog_slope(lengths[-2:], rnn_bytes[-2:]),
            "time_lengths": time_lengths, "attention_seconds": att_s, "rnn_seconds": rnn_s,
            "attention_time_ratios": [b / a for a, b in zip(att_s, att_s[1:])],
            "png": str(path)}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json): memory is
    counted, the same on every machine."""
    att, rnn, lengths = result["attention_bytes"], result["rnn_bytes"], result["lengths"]
    return {"attention_memory_ratio": f"{att[-1] / att[-2]:.2f}", "attention_memory_slope": f"{result['attention_memory_slope']:.2f}",
            "rnn_memory_ratio": f"{rnn[-1] / rnn[-2]:.2f}", "longest": str(lengths[-1]), "before_longest": str(lengths[-2]),
            "repeats": str(REPEATS), "time_longest": str(result["time_lengths"][-1])}


def timings(result: dict) -> dict[str, tuple[float, str]]:
    """The times the lessons quote, as ranges over runs: attention's time over the length before's,
    and over the RNN's at the longest length."""
    lengths, seconds = result["time_lengths"], result["attention_seconds"]
    out = {f"attention_time_{n}_over_{m}": (b / a, "{:.1f}") for m, n, a, b in zip(lengths, lengths[1:], seconds, seconds[1:])}
    out["attention_over_rnn"] = (seconds[-1] / result["rnn_seconds"][-1], "{:.1f}")
    return out
