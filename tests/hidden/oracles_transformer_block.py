"""Trusted oracles for unit 5, the Transformer block, in float64.

They may use the very torch modules students must not (``nn.LayerNorm``,
``nn.TransformerEncoderLayer``): they run only in the grader. The hand-written
``block64`` exists to build known-wrong answers for hints (and for cases torch
gives NaN on); the right answer always comes from torch itself.
"""
from __future__ import annotations

import contextlib
import functools
import math

import torch
import torch.nn.functional as F

from oracles_attention import causal_allowed
from tensors import randn

from autograder.testing.memo import remembered

LINEAR_BIASES = ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
                 "self_attn.out_proj.bias", "ffn.linear1.bias", "ffn.linear2.bias")
NORM_BIASES = ("norm1.bias", "norm2.bias")


# -- states ---------------------------------------------------------------------

def linear_state(prefix: str, d_in: int, d_out: int, seed: int, *, bias: bool = True) -> dict:
    state = {f"{prefix}.weight": randn((d_out, d_in), seed, scale=1.0 / math.sqrt(d_in))}
    if bias:
        state[f"{prefix}.bias"] = randn((d_out,), seed + 1, scale=0.3)
    return state


def norm_state(prefix: str, d: int, seed: int, *, random: bool = True, bias: bool = True) -> dict:
    weight = 1.0 + randn((d,), seed, scale=0.3) if random else torch.ones(d)
    state = {f"{prefix}.weight": weight}
    if bias:
        state[f"{prefix}.bias"] = randn((d,), seed + 1, scale=0.3) if random else torch.zeros(d)
    return state


def ffn_state(d_model: int, d_ff: int, seed: int, *, prefix: str = "", bias: bool = True) -> dict:
    return {**linear_state(f"{prefix}linear1", d_model, d_ff, seed, bias=bias),
            **linear_state(f"{prefix}linear2", d_ff, d_model, seed + 2, bias=bias)}


def block_state(d_model: int, d_ff: int, seed: int, *, bias: bool = True, random_norms: bool = True) -> dict:
    """A TransformerBlock state_dict (float32) with every parameter drawn from ``seed``."""
    state = {}
    for i, name in enumerate(("q_proj", "k_proj", "v_proj", "out_proj")):
        state.update(linear_state(f"self_attn.{name}", d_model, d_model, seed + 10 * i, bias=bias))
    state.update(ffn_state(d_model, d_ff, seed + 50, prefix="ffn.", bias=bias))
    state.update(norm_state("norm1", d_model, seed + 60, random=random_norms, bias=bias))
    state.update(norm_state("norm2", d_model, seed + 70, random=random_norms, bias=bias))
    return state


def torch_state(state: dict) -> dict:
    """The weight mapping of unit 3 onto ``nn.TransformerEncoderLayer``'s names."""
    out = {"self_attn.in_proj_weight": torch.cat([state[f"self_attn.{p}_proj.weight"] for p in "qkv"])}
    if "self_attn.q_proj.bias" in state:
        out["self_attn.in_proj_bias"] = torch.cat([state[f"self_attn.{p}_proj.bias"] for p in "qkv"])
    for key, value in state.items():
        if key.startswith("self_attn.out_proj."):
            out[key] = value
        elif key.startswith("ffn."):
            out[key.removeprefix("ffn.")] = value
        elif key.startswith("norm"):
            out[key] = value
    return out


def torch_grads_as_ours(grads: dict) -> dict:
    """Gradients named like ``nn.TransformerEncoderLayer``'s parameters, renamed to ours."""
    out = {}
    for key, value in grads.items():
        if key == "self_attn.in_proj_weight" or key == "self_attn.in_proj_bias":
            kind = key.rsplit("_", 1)[1]
            for p, part in zip("qkv", value.chunk(3)):
                out[f"self_attn.{p}_proj.{kind}"] = part
        elif key.startswith("linear"):
            out[f"ffn.{key}"] = value
        else:
            out[key] = value
    return out


# -- torch itself ---------------------------------------------------------------

@contextlib.contextmanager
def one_thread():
    """Run torch single-threaded: on CPU, torch's attention kernel starts its thread
    pool even for tiny tensors, which costs ~20 ms a call on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.lru_cache(maxsize=None)
def _empty_layer(d_model: int, num_heads: int, d_ff: int, norm_first: bool, bias: bool):
    return torch.nn.TransformerEncoderLayer(
        d_model, num_heads, d_ff, dropout=0.0, activation="gelu", batch_first=True,
        norm_first=norm_first, bias=bias, dtype=torch.float64,
    )


def torch_layer(d_model: int, num_heads: int, d_ff: int, state: dict, *, norm_first: bool, bias: bool = True):
    """``nn.TransformerEncoderLayer`` in float64, in train mode with dropout 0
    (train mode keeps torch off its fused inference path; dropout 0 makes it exact).
    One layer per configuration is built and reloaded with ``state`` on each use."""
    layer = _empty_layer(d_model, num_heads, d_ff, norm_first, bias)
    layer.load_state_dict({k: v.double() for k, v in torch_state(state).items()}, strict=True)
    return layer.train()


def torch_mask(L: int, attn_mask=None, is_causal: bool = False, batch_heads=None):
    """Our masks (bool True = may attend, or float; is_causal) as one additive float64 mask for torch.
    A (B, H, L, L) mask becomes torch's (B * H, L, L)."""
    mask = torch.zeros(L, L, dtype=torch.float64)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            mask = torch.where(attn_mask, mask, float("-inf"))
        else:
            mask = mask + attn_mask.double()
    if is_causal:
        mask = torch.where(causal_allowed(L, L), mask, float("-inf"))
    if mask.dim() == 4:
        mask = mask.flatten(0, 1)
    return mask


@remembered
def torch_block(x, state, num_heads, *, norm_first, attn_mask=None, key_padding_mask=None, is_causal=False,
                bias=True, grad_output=None):
    """The right answer: ``nn.TransformerEncoderLayer`` on ``x`` in float64.

    With ``grad_output`` also returns (input gradient, parameter gradients named like ours)."""
    d_model = x.shape[-1]
    d_ff = state["ffn.linear1.weight"].shape[0]
    layer = torch_layer(d_model, num_heads, d_ff, state, norm_first=norm_first, bias=bias)
    x = x.double().detach().requires_grad_(grad_output is not None)
    mask = None
    if attn_mask is not None or is_causal:
        mask = torch_mask(x.shape[1], attn_mask, is_causal)
    kpm = None
    if key_padding_mask is not None:  # as a float mask too: torch warns on mixed mask types
        kpm = torch.zeros(key_padding_mask.shape, dtype=torch.float64).masked_fill(key_padding_mask, float("-inf"))
    with one_thread():
        out = layer(x, src_mask=mask, src_key_padding_mask=kpm)
        if grad_output is None:
            return out.detach()
        names = [n for n, _ in layer.named_parameters()]
        grads = torch.autograd.grad(out, [x, *layer.parameters()], grad_output.double())
    return out.detach(), grads[0], torch_grads_as_ours(dict(zip(names, grads[1:])))


def torch_layer_norm(x, weight=None, bias=None, eps=1e-5):
    return F.layer_norm(x.double(), (x.shape[-1],), None if weight is None else weight.double(),
                        None if bias is None else bias.double(), eps)


# -- hand-written oracles, for known-wrong answers ------------------------------------

@remembered
def layer_norm64(x, weight=None, bias=None, eps=1e-5, *, unbiased=False, eps_outside=False, dims=(-1,), detached=()):
    """LayerNorm in float64; the keyword arguments build known-wrong answers (``detached``: the
    statistics, "mean" and/or "var", cut from the graph, so no gradient flows through them)."""
    x = x.double()
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
    mean = mean.detach() if "mean" in detached else mean
    var = var.detach() if "var" in detached else var
    y = (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / (var + eps).sqrt()
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


ACTIVATIONS = {
    "erf": lambda h: F.gelu(h),
    "tanh": lambda h: F.gelu(h, approximate="tanh"),
    "relu": torch.relu,
    "sigmoid": lambda h: h * torch.sigmoid(1.702 * h),
}


def ffn64(x, state, *, prefix="", act="erf"):
    def lin(h, name):
        b = state.get(f"{prefix}{name}.bias")
        return F.linear(h, state[f"{prefix}{name}.weight"].double(), None if b is None else b.double())

    return lin(ACTIVATIONS[act](lin(x.double(), "linear1")), "linear2")


def attention64(x, state, num_heads, *, attn_mask=None, key_padding_mask=None, is_causal=False):
    """Multi-head self-attention as in unit 3 (empty rows give zero attention, then out_proj)."""
    x = x.double()
    B, L, E = x.shape
    Dh = E // num_heads

    def lin(h, name):
        b = state.get(f"self_attn.{name}.bias")
        return F.linear(h, state[f"self_attn.{name}.weight"].double(), None if b is None else b.double())

    q, k, v = (lin(x, f"{p}_proj").unflatten(-1, (num_heads, Dh)).transpose(1, 2) for p in "qkv")  # (B, H, L, Dh)
    scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)  # (B, H, L, L)
    allowed = torch.ones(scores.shape, dtype=torch.bool)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = allowed & attn_mask
    elif attn_mask is not None:
        scores = scores + attn_mask.double()
    if key_padding_mask is not None:
        allowed = allowed & ~key_padding_mask[:, None, None, :]
    if is_causal:
        allowed = allowed & causal_allowed(L, L)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    out = (weights @ v).transpose(1, 2).flatten(-2)  # (B, L, E)
    return lin(out, "out_proj")


def block64(x, state, num_heads, *, norm_first, attn_mask=None, key_padding_mask=None, is_causal=False,
            act="erf", attn_residual=True, ffn_residual=True, residual_from_normed="", norms=("norm1", "norm2"),
            use_masks=True, detached=()):
    """The block by hand; the keyword arguments after ``is_causal`` build known-wrong answers
    (``residual_from_normed``: "attn", "ffn" or "both" pre-norm residuals taken from the normalized x;
    ``detached``: as ``layer_norm64``'s, in both norms)."""
    x = x.double()

    def norm(h, which):
        name = norms[which]
        return layer_norm64(h, state[f"{name}.weight"], state.get(f"{name}.bias"), detached=detached)

    def attn(h):
        masks = dict(attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal) if use_masks else {}
        return attention64(h, state, num_heads, **masks)

    def ffn(h):
        return ffn64(h, state, prefix="ffn.", act=act)

    if norm_first:
        h = norm(x, 0)
        x = (h if residual_from_normed in ("attn", "both") else x) * attn_residual + attn(h)
        h = norm(x, 1)
        x = (h if residual_from_normed in ("ffn", "both") else x) * ffn_residual + ffn(h)
    else:
        x = norm(x * attn_residual + attn(x), 0)
        x = norm(x * ffn_residual + ffn(x), 1)
    return x


def block_hints(x, state, num_heads, *, norm_first, **masks):
    """Known wrong answers of the block, each with the advice that fixes it."""
    has_masks = any(v is not None and v is not False for v in masks.values())
    wrong = []
    if has_masks:  # first: with masks ignored, other wrong answers can coincide
        wrong.append((dict(use_masks=False), "the masks (attn_mask, key_padding_mask, is_causal) must be passed on to self_attn."))
    if not masks.get("is_causal"):
        wrong.append((dict(is_causal=True), "is_causal=False: the block must not apply a causal mask unless asked."))
    wrong += [
        (dict(norm_first=not norm_first), "norm_first=True is pre-norm (x + attn(norm1(x))), False is post-norm "
                                          "(norm1(x + attn(x))): the two were swapped or norm_first ignored."),
        (dict(act="relu"), "the feed-forward activation is the exact (erf) GELU, not ReLU."),
        (dict(act="tanh"), "use the exact GELU x * Phi(x) (with erf), not the tanh approximation."),
        (dict(attn_residual=False), "the attention sublayer lost its residual connection (x + ...)."),
        (dict(ffn_residual=False), "the feed-forward sublayer lost its residual connection (x + ...)."),
        (dict(norms=("norm1", "norm1")), "norm2 must be a LayerNorm of its own: norm1 was used for both sublayers."),
        (dict(norms=("norm2", "norm2")), "norm1 and norm2 must be two LayerNorms: one was shared by both sublayers."),
        (dict(norms=("norm2", "norm1")), "norm1 goes with the attention sublayer and norm2 with the feed-forward one: "
                                         "the two were swapped."),
    ]
    if norm_first:
        text = "in pre-norm the residual adds the un-normalized x: x + attn(norm1(x)), not norm1(x) + attn(norm1(x))."
        wrong += [(dict(residual_from_normed=where), text) for where in ("attn", "ffn", "both")]
    hints = []
    for change, text in wrong:
        options = dict(norm_first=norm_first, **masks)
        options.update(change)
        hints.append((block64(x, state, num_heads, **options), text))
    return hints


DETACHED_STATS = ("LayerNorm's gradient flows through its mean and variance too: do not detach them "
                  "(or compute them under torch.no_grad()).")


def block_input_grads(x, state, num_heads, grad_output, *, norm_first, **masks):
    """Known wrong gradients of x (statistics of the norms cut from the graph), each with the advice."""
    hints = []
    for detached in (("mean",), ("var",), ("mean", "var")):
        leaf = x.double().detach().requires_grad_()
        out = block64(leaf, state, num_heads, norm_first=norm_first, detached=detached, **masks)
        hints.append((torch.autograd.grad(out, leaf, grad_output.double())[0], DETACHED_STATS))
    return hints
