"""Claim 10: FlashAttention computes the same function in O(n) extra memory.

Unit 2's attention builds the (L, L) table of scores and weights: its peak
memory grows like L^2. ``flash_attention`` visits the keys in tiles of
``block_size`` with an online softmax: besides its output it holds one
(block, block) tile and two numbers per query, so its peak grows like L. Both
give the same output. Peak memory is measured on the CPU with torch's profiler
(the bytes allocated during one forward pass without autograd, inputs
excluded). On a CUDA device, when there is one, it also times ``flash_attention``
against ``F.scaled_dot_product_attention``.
"""
from __future__ import annotations

import torch

from ._common import (Units, check_size, demo, loglog_slope, median_time, power_above, pyplot, quiet_stderr, save,
                      seeded, sig, tr)

NAME = "efficient_memory"
TITLE = "FlashAttention: the same output in O(n) memory"
UNIT = "efficient_attention"
PRESETS = {"small": dict(lengths=[256, 512, 1024], width=16, block=64),
           "full": dict(lengths=[256, 512, 1024, 2048, 4096], width=16, block=128)}


def peak_bytes(fn) -> int:
    """The largest number of bytes live at once among those allocated while ``fn()`` runs (CPU)."""
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr(), torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # An operator's own allocations are its self memory; frees are "[memory]" events (negative).
    changes = sorted((e.time_range.start, e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage)
                     for e in prof.events())
    live = peak = 0
    for _, change in changes:
        live += change
        peak = max(peak, live)
    return peak


def on_cuda(units: Units, block: int) -> dict | str:
    """flash_attention against torch's fused attention on CUDA: largest difference and times (ms)."""
    if not torch.cuda.is_available():
        return "not run: this machine has no CUDA device"
    efficient = units.need("efficient_attention")
    q, k, v = (torch.randn(4, 8, 4096, 64, device="cuda") for _ in range(3))
    ours = efficient.flash_attention(q, k, v, is_causal=True, block_size=block)
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def timed(fn):
        return median_time(lambda: (fn(), torch.cuda.synchronize()), repeats=5) * 1e3

    return {"max_difference": float((ours - fused).abs().max()),
            "flash_attention_ms": timed(lambda: efficient.flash_attention(q, k, v, is_causal=True, block_size=block)),
            "torch_sdpa_ms": timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))}


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Peak memory of one causal forward pass against L, naive (unit 2) and tiled (unit 6).

    Returns:
      {"lengths", "naive_bytes", "tiled_bytes", "naive_slope", "tiled_slope", "tiled_bytes_per_token",
       "max_difference", "block", "cuda"} (slopes of log memory against log L over the two longest
       lengths: 2 = quadratic; ``tiled_bytes_per_token`` the growth between successive lengths,
       constant for a straight line; ``max_difference`` between the two outputs; ``cuda`` the
       comparison with torch's fused attention, or why it did not run).
    """
    check_size(size)
    lengths, width, block = (PRESETS[size][k] for k in ("lengths", "width", "block"))
    attention, efficient = units.need("attention"), units.need("efficient_attention")
    generator = seeded()
    naive_bytes, tiled_bytes, difference = [], [], 0.0
    for length in lengths:
        q, k, v = (torch.randn(1, length, width, generator=generator) for _ in range(3))
        naive_bytes.append(peak_bytes(lambda: attention.scaled_dot_product_attention(q, k, v, is_causal=True)))
        tiled_bytes.append(peak_bytes(lambda: efficient.flash_attention(q, k, v, is_causal=True, block_size=block)))
        with torch.no_grad():
            naive = attention.scaled_dot_product_attention(q, k, v, is_causal=True)[0]
            tiled = efficient.flash_attention(q, k, v, is_causal=True, block_size=block)
        difference = max(difference, float((naive - tiled).abs().max()))
    naive_slope = loglog_slope(lengths[-2:], naive_bytes[-2:])
    tiled_slope = loglog_slope(lengths[-2:], tiled_bytes[-2:])
    # Bytes per extra token between successive lengths: constant for a straight line.
    tiled_per_token = [(b1 - b0) / (n1 - n0) for n0, n1, b0, b1 in
                       zip(lengths, lengths[1:], tiled_bytes, tiled_bytes[1:])]

    plt = pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.0))
    ax0.plot(lengths, [b / 2**20 for b in naive_bytes], "s-", label=tr("unit 2: the (L, L) table (~ L^{slope:.2f})").format(slope=naive_slope))
    ax0.plot(lengths, [b / 2**20 for b in tiled_bytes], "o-", label=tr("flash_attention, block {block}").format(block=block))
    ax0.set_xlabel(tr("sequence length L (causal self-attention, width 16)"))
    ax0.set_ylabel(tr("peak MiB allocated in one forward pass"))
    ax0.set_title(tr("Same output (largest difference {difference:.1e}): a parabola...").format(difference=difference))
    ax0.legend()
    ax1.plot(lengths, [b / 2**10 for b in tiled_bytes], "o-", color="C1")
    ax1.set_xlabel(tr("sequence length L"))
    ax1.set_ylabel(tr("peak KiB allocated in one forward pass"))
    ax1.set_title(tr("...and a straight line: flash_attention, {bytes:.0f} bytes per token").format(
        bytes=tiled_per_token[-1]))
    path = save(fig, out_dir, NAME)
    return {"lengths": lengths, "naive_bytes": naive_bytes, "tiled_bytes": tiled_bytes, "naive_slope": naive_slope,
            "tiled_slope": tiled_slope, "tiled_bytes_per_token": tiled_per_token, "max_difference": difference, "block": block,
            "cuda": on_cuda(units, block), "png": str(path)}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json): bytes are
    counted, the same on every machine for the same code."""
    lengths, naive, tiled = result["lengths"], result["naive_bytes"], result["tiled_bytes"]
    return {"shortest": str(lengths[0]), "longest": str(lengths[-1]), "block": str(result["block"]),
            "naive_mib_shortest": sig(naive[0] / 2**20, 2), "naive_mib_longest": f"{naive[-1] / 2**20:.0f}",
            "naive_ratio": f"{naive[-1] / naive[-2]:.1f}", "naive_slope": f"{result['naive_slope']:.2f}",
            "tiled_kib_shortest": f"{tiled[0] / 2**10:.0f}", "tiled_kib_longest": f"{tiled[-1] / 2**10:.0f}",
            "tiled_bytes_per_token": f"{result['tiled_bytes_per_token'][-1]:.0f}",
            "max_difference_below": power_above(result["max_difference"])}
