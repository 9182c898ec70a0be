"""Claim 11: a KV cache makes each generated token cost O(n), not a whole new pass.

Without a cache, generating token ``n`` means running attention over all ``n``
tokens again (every projection, every score) and keeping only the last
output. With a cache, only the new token is projected; it attends to the
``n - 1`` cached keys and values. Measured on this machine: the time of the
step that produces token ``n``, for one grouped-query attention layer.
"""
from __future__ import annotations

import torch

from ._common import Units, check_size, demo, length_axis, loglog_slope, median_time, pyplot, save, seeded, tr

NAME = "decode_time"
TITLE = "Decoding with and without a KV cache"
UNIT = "efficient_attention"
PRESETS = {"small": dict(lengths=[64, 256, 1024], width=64, heads=8, kv_heads=2),
           "full": dict(lengths=[64, 128, 256, 512, 1024, 2048], width=64, heads=8, kv_heads=2)}


def steps(units: Units, attn, x: torch.Tensor):
    """Two callables that each produce the output of the last token of ``x`` (B, n, E)."""
    efficient = units.need("efficient_attention")
    with torch.no_grad():
        _, keys, values = efficient.decode_in_chunks(attn, x[:, :-1], [x.shape[1] - 1])  # the cache after n - 1 tokens

    def without_cache():
        with torch.no_grad():
            return attn(x)[:, -1]  # a full causal pass, then the last row

    def with_cache():
        cache = efficient.KVCache()
        cache.append(keys, values)  # a cache holding the first n - 1 tokens, as decoding leaves it
        with torch.no_grad():
            return attn(x[:, -1:], cache=cache)[:, -1]

    return without_cache, with_cache


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Time of the step producing token n, with and without a cache, against n.

    Returns:
      {"lengths", "uncached_seconds", "cached_seconds", "uncached_slope", "cached_slope",
       "max_difference"} (least-squares slopes of log time against log n over every length;
       ``max_difference`` between the two ways' last outputs).
    """
    check_size(size)
    lengths, width, heads, kv_heads = (PRESETS[size][k] for k in ("lengths", "width", "heads", "kv_heads"))
    efficient = units.need("efficient_attention")
    generator = seeded()
    attn = efficient.GroupedQueryAttention(width, heads, kv_heads, rope_base=10000.0)
    uncached, cached, difference = [], [], 0.0
    for length in lengths:
        x = torch.randn(1, length, width, generator=generator)  # (1, n, E)
        without_cache, with_cache = steps(units, attn, x)
        difference = max(difference, float((without_cache() - with_cache()).abs().max()))
        uncached.append(median_time(without_cache, repeats=5))
        cached.append(median_time(with_cache, repeats=5))
    # The cached step costs about a millisecond: over two lengths its slope is mostly noise, so
    # both slopes are fitted over every length (the plot says each curve's growth instead).
    uncached_slope, cached_slope = loglog_slope(lengths, uncached), loglog_slope(lengths, cached)

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    span = tr("n = {first} to {last}").format(first=lengths[0], last=lengths[-1])
    ax.loglog(lengths, [t * 1e3 for t in uncached], "s-",
              label=tr("no cache: a full pass per token (x{growth:.0f}, {span})").format(growth=uncached[-1] / uncached[0],
                                                                                     span=span))
    ax.loglog(lengths, [t * 1e3 for t in cached], "o-",
              label=tr("KV cache: the new token only (x{growth:.1f}, {span})").format(growth=cached[-1] / cached[0], span=span))
    length_axis(ax, lengths)
    ax.set_xlabel(tr("tokens so far n"))
    ax.set_ylabel(tr("time to produce token n (ms)"))
    ax.set_title(tr("One GQA layer ({heads} query heads, {kv_heads} kv heads, width {width}), {threads} thread(s)").format(
        heads=heads, kv_heads=kv_heads, width=width, threads=torch.get_num_threads()))
    ax.legend(fontsize=8)
    path = save(fig, out_dir, NAME)
    return {"lengths": lengths, "uncached_seconds": uncached, "cached_seconds": cached,
            "uncached_slope": uncached_slope, "cached_slope": cached_slope, "max_difference": difference,
            "png": str(path)}


def timings(result: dict) -> dict[str, tuple[float, str]]:
    """The times the lessons quote, as ranges over runs: (value, format)."""
    uncached, cached = result["uncached_seconds"], result["cached_seconds"]
    return {"uncached_ms_shortest": (uncached[0] * 1e3, "{:.1f}"), "uncached_ms_longest": (uncached[-1] * 1e3, "{:.0f}"),
            "cached_ms_longest": (cached[-1] * 1e3, "{:.1f}"), "cached_growth": (cached[-1] / cached[0], "{:.1f}"),
            "uncached_growth": (uncached[-1] / uncached[0], "{:.0f}"), "uncached_slope": (result["uncached_slope"], "{:.1f}")}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo that do not depend on the machine."""
    return {"shortest": str(result["lengths"][0]), "longest": str(result["lengths"][-1])}
