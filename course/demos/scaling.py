"""Claim 4: why scores are divided by sqrt(d_k).

For ``q, k`` with independent unit-variance entries, ``q . k`` is a sum of
``d_k`` unit-variance terms, so its variance is ``d_k``. Unscaled, the scores
of a wide head spread so far that softmax puts almost all weight on one key,
and its gradient (the Jacobian ``diag(p) - p p^T``) goes to zero: the head
stops learning. Dividing by ``sqrt(d_k)`` gives the scores variance 1 at every width.
"""
from __future__ import annotations

import math

import torch

from ._common import Units, check_size, demo, pyplot, save, seeded, sig, tr

NAME = "scaling"
TITLE = "Why divide by sqrt(d_k)"
UNIT = "attention"
PRESETS = {"small": dict(dims=[4, 64, 512], queries=128, keys=16),
           "full": dict(dims=[4, 8, 16, 32, 64, 128, 256, 512, 1024], queries=512, keys=16)}
HISTOGRAM_DIMS = (4, 64, 512)


def softmax_gradient_norm(softmax, scores: torch.Tensor) -> float:
    """Mean over rows of the Frobenius norm of the softmax Jacobian ``d p / d scores``.

    Inputs:
      softmax: the unit's softmax(x, dim).
      scores: (Q, S)
    """
    scores = scores.detach().requires_grad_(True)
    with torch.enable_grad():
        weights = softmax(scores, dim=-1)  # (Q, S)
        squares = torch.zeros(scores.shape[0], dtype=scores.dtype)
        for i in range(scores.shape[1]):
            (row,) = torch.autograd.grad(weights[:, i].sum(), scores, retain_graph=True)  # (Q, S): d p_i / d s
            squares += row.pow(2).sum(-1)
    return float(squares.sqrt().mean())


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Variance of q.k, the largest softmax weight and the softmax gradient, against d_k.

    Returns:
      {"dims", "variance" (of q.k), "scaled_variance" (of q.k / sqrt(d_k)),
       "max_weight" / "scaled_max_weight" (mean over queries of the largest weight),
       "gradient" / "scaled_gradient" (mean softmax Jacobian norm)}
    """
    check_size(size)
    dims, queries, keys = (PRESETS[size][k] for k in ("dims", "queries", "keys"))
    attention = units.need("attention")
    generator = seeded()
    result = {k: [] for k in ("variance", "scaled_variance", "max_weight", "scaled_max_weight",
                              "gradient", "scaled_gradient")}
    samples = {}
    for d in dims:
        q = torch.randn(queries, d, generator=generator)  # (Q, d)
        k = torch.randn(keys, d, generator=generator)  # (S, d)
        v = torch.zeros(keys, 1)
        raw = q @ k.T  # (Q, S)
        result["variance"].append(float(raw.var()))
        result["scaled_variance"].append(float((raw / math.sqrt(d)).var()))
        _, w_raw = attention.scaled_dot_product_attention(q, k, v, scale=1.0)  # no scaling
        _, w_scaled = attention.scaled_dot_product_attention(q, k, v)  # default 1/sqrt(d)
        result["max_weight"].append(float(w_raw.amax(-1).mean()))
        result["scaled_max_weight"].append(float(w_scaled.amax(-1).mean()))
        result["gradient"].append(softmax_gradient_norm(attention.softmax, raw))
        result["scaled_gradient"].append(softmax_gradient_norm(attention.softmax, raw / math.sqrt(d)))
        if d in HISTOGRAM_DIMS:
            samples[d] = raw.flatten()

    plt = pyplot()
    fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(13, 3.8))
    for d, values in samples.items():
        ax0.hist(values.numpy(), bins=60, histtype="step", density=True, label=tr("q.k, d_k = {d}").format(d=d))
    if samples:
        widest = max(samples)
        ax0.hist((samples[widest] / math.sqrt(widest)).numpy(), bins=60, histtype="stepfilled", alpha=0.3,
                 density=True, label=tr("q.k / sqrt(d_k), d_k = {d}").format(d=widest))
    ax0.set_yscale("log")
    ax0.set_ylim(top=ax0.get_ylim()[1] * 100)  # room for the legend above the histograms
    ax0.set_xlabel(tr("score"))
    ax0.set_ylabel(tr("density (log scale)"))
    ax0.set_title(tr("The spread of q.k grows like sqrt(d_k)"))
    ax0.legend(fontsize=8, loc="upper left")
    ax1.semilogx(dims, result["max_weight"], "o-", label=tr("q.k (unscaled)"))
    ax1.semilogx(dims, result["scaled_max_weight"], "s-", label="q.k / sqrt(d_k)")
    ax1.axhline(1.0 / keys, color="gray", lw=0.8, ls=":", label=tr("uniform 1/{keys}").format(keys=keys))
    ax1.set_ylim(0, 1.05)
    ax1.set_xlabel("d_k")
    ax1.set_ylabel(tr("largest weight of {keys} (mean)").format(keys=keys))
    ax1.set_title(tr("Unscaled, softmax saturates"))
    ax1.legend(fontsize=8, loc="center right")
    ax2.loglog(dims, result["gradient"], "o-", label=tr("q.k (unscaled)"))
    ax2.loglog(dims, result["scaled_gradient"], "s-", label="q.k / sqrt(d_k)")
    ax2.set_xlabel("d_k")
    ax2.set_ylabel(tr("|| d softmax / d scores || (mean)"))
    ax2.set_title(tr("... and its gradient vanishes"))
    ax2.legend(fontsize=8, loc="lower left")
    path = save(fig, out_dir, NAME)
    return {"dims": dims, **result, "png": str(path)}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json)."""
    out = {}
    for d, variance, scaled in zip(result["dims"], result["variance"], result["scaled_variance"]):
        out[f"variance_{d}"] = sig(variance, 2) if variance < 100 else f"{variance:.0f}"
        out[f"scaled_variance_{d}"] = f"{scaled:.2f}"
    return out
