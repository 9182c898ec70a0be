"""Claim 6: no order without positions.

狗咬人 (dog bites man) and 人咬狗 (man bites dog) hold the same bag of tokens.
Self-attention is permutation-equivariant: permute its input and its output is
permuted the same way, nothing else changes. So each token gets exactly the
same vector in both sentences, and any pooled summary of the sentence is
identical: the model cannot tell who bit whom. Adding positions (sinusoidal
encoding to the input, or RoPE on queries and keys) breaks the tie.
"""
from __future__ import annotations

import math

import torch

from autograder.core.i18n import N_

from ._common import Units, check_size, cjk_font, demo, magnitude, pyplot, save, seeded, sig, tr

NAME = "order"
TITLE = "No order without positions"
UNIT = "positional_encoding"
PRESETS = {"small": dict(dim=16), "full": dict(dim=64)}
WORDS = ("狗", "咬", "人")
GLOSS = {"狗": "gou (dog)", "咬": "yao (bites)", "人": "ren (man)"}
SENTENCES = {"狗咬人": (0, 1, 2), "人咬狗": (2, 1, 0)}


def _rope_attention(attention, positional_encoding, x, w_q, w_k, w_v):
    """Single-head self-attention with RoPE applied to the queries and keys: x (1, L, E) -> (1, L, E)."""
    q = positional_encoding.apply_rope(x @ w_q)
    k = positional_encoding.apply_rope(x @ w_k)
    return attention.scaled_dot_product_attention(q, k, x @ w_v)[0]


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Token vectors after one self-attention layer, for 狗咬人 and 人咬狗, with and without positions.

    Returns:
      {"words", "difference": {variant: [|| out_1(word) - out_2(word) || per word]},
       "sentence_difference": {variant: || mean-pooled out_1 - out_2 ||}}
      for the variants "no positions", "sinusoidal", "RoPE" (a difference of
      ~1e-7 is float rounding: the same vector).
    """
    check_size(size)
    dim = PRESETS[size]["dim"]
    multi_head, pos, attention = (units.need(n) for n in ("multi_head", "positional_encoding", "attention"))
    generator = seeded()
    embedding = torch.randn(len(WORDS), dim, generator=generator)  # one vector per word
    mha = multi_head.MultiHeadAttention(dim, 2)
    mha.eval()
    w_q, w_k, w_v = (torch.randn(dim, dim, generator=generator) / math.sqrt(dim) for _ in range(3))
    encode = pos.SinusoidalPositionalEncoding(dim, max_len=16)
    variants = {
        N_("no positions"): lambda x: mha(x)[0],
        N_("sinusoidal"): lambda x: mha(encode(x))[0],
        "RoPE": lambda x: _rope_attention(attention, pos, x, w_q, w_k, w_v),
    }
    difference, sentence_difference = {}, {}
    with torch.no_grad():
        for name, layer in variants.items():
            outs = {}
            for sentence, order in SENTENCES.items():
                out = layer(embedding[list(order)].unsqueeze(0))[0]  # (3, E), in sentence order
                # Back to word order: row w is the vector of word w in this sentence.
                outs[sentence] = out[torch.argsort(torch.tensor(order))]
            first, second = outs.values()
            difference[name] = [float(v) for v in (first - second).norm(dim=-1)]
            sentence_difference[name] = float((first.mean(0) - second.mean(0)).norm())

    plt = pyplot()
    font = cjk_font()  # pyplot() has set it up; without one, pinyin
    labels = list(WORDS) if font else [GLOSS[w] for w in WORDS]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    width = 0.8 / len(variants)
    floor = 1e-9
    for i, (name, values) in enumerate(difference.items()):
        ax.bar([w + (i - 1) * width for w in range(len(WORDS))], [max(v, floor) for v in values], width, label=tr(name))
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, 1e4)  # room above the bars for the legend
    ax.set_xticks(range(len(WORDS)), labels)
    ax.set_xlabel(tr("word"))
    ax.set_ylabel(tr("|| word's vector in s1 - in s2 ||  (log)"))
    title = "狗咬人 vs 人咬狗" if font else "gou yao ren vs ren yao gou"
    ax.set_title(tr("{title}: one word, two sentences").format(title=title))
    ax.legend(loc="upper center", ncol=3)
    path = save(fig, out_dir, NAME)
    return {"words": list(WORDS), "difference": difference, "sentence_difference": sentence_difference,
            "png": str(path)}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json). Without
    positions the differences are float32 rounding, whose digits vary with the machine: only
    their power of ten is quoted."""
    none, sinusoidal, rope = (result["difference"][k] for k in ("no positions", "sinusoidal", "RoPE"))
    return {"none_magnitude": magnitude(max(none)),
            "sinusoidal_min": sig(min(sinusoidal), 2), "sinusoidal_max": sig(max(sinusoidal), 2),
            "rope_min": sig(min(rope), 2), "rope_max": sig(max(rope), 2)}
