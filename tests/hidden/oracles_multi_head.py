"""Trusted float64 oracles for unit 3, multi-head attention.

Two independent ones: torch's own ``nn.MultiheadAttention`` (under the weight
mapping of the API page), and an explicit loop over heads built on unit 2's
float64 oracle. They run only in the grader, never in student code.

The explicit loop takes ``wrong=`` options that rebuild known bugs, so a
test can name the bug a student's answer matches (see ``assert_close``'s hints).
"""
from __future__ import annotations

import math

import torch

from oracles_attention import attention64, causal_allowed
from tensors import randn

from autograder.testing.memo import remembered

PARAMS = ("q_proj", "k_proj", "v_proj", "out_proj")


def make_state(E: int, kdim: int, vdim: int, bias: bool, seed: int, *, dtype=torch.float32) -> dict:
    """A seeded state_dict for ``MultiHeadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim)``."""
    fan_in = {"q_proj": E, "k_proj": kdim, "v_proj": vdim, "out_proj": E}
    state = {}
    for i, name in enumerate(PARAMS):
        state[f"{name}.weight"] = randn((E, fan_in[name]), seed + 10 * i, dtype=dtype, scale=1.5 / math.sqrt(fan_in[name]))
        if bias:
            state[f"{name}.bias"] = randn((E,), seed + 10 * i + 1, dtype=dtype, scale=0.5)
    return state


def expected_keys(E: int, kdim: int, vdim: int, bias: bool) -> dict[str, tuple[int, ...]]:
    fan_in = {"q_proj": E, "k_proj": kdim, "v_proj": vdim, "out_proj": E}
    keys = {f"{n}.weight": (E, fan_in[n]) for n in PARAMS}
    if bias:
        keys.update({f"{n}.bias": (E,) for n in PARAMS})
    return keys


def permute_heads(state: dict, H: int, perm: torch.Tensor) -> dict:
    """The same function with its heads renumbered: head h of the result is head perm[h]."""
    E = state["q_proj.weight"].shape[0]
    Dh = E // H
    rows = torch.cat([torch.arange(p * Dh, (p + 1) * Dh) for p in perm.tolist()])
    out = dict(state)
    for name in ("q_proj", "k_proj", "v_proj"):
        out[f"{name}.weight"] = state[f"{name}.weight"][rows]
        if f"{name}.bias" in state:
            out[f"{name}.bias"] = state[f"{name}.bias"][rows]
    out["out_proj.weight"] = state["out_proj.weight"][:, rows]
    return out


def _torch_mask(attn_mask, is_causal, L, S, B, H):
    """This course's attn_mask and is_causal as one torch attn_mask (True = masked out, or additive)."""
    mask = attn_mask
    if mask is not None and mask.dim() == 4:
        mask = mask.expand(B, H, L, S).reshape(B * H, L, S)  # torch's (B*H, L, S), batch-major
    if is_causal:
        causal = causal_allowed(L, S)
        if mask is None:
            mask = causal
        elif mask.dtype == torch.bool:
            mask = mask & causal
        else:
            mask = mask.double().masked_fill(~causal, float("-inf"))
    if mask is None:
        return None
    return ~mask if mask.dtype == torch.bool else mask.double()


@remembered
def torch_mha64(state, H, query, key=None, value=None, *, key_padding_mask=None, attn_mask=None,
                is_causal=False, need_weights=True, average_attn_weights=True, grad_outputs=None):
    """torch.nn.MultiheadAttention(batch_first=True) in float64 under the API page's weight mapping.

    Returns (output, weights); with ``grad_outputs`` (g_output, g_weights or None)
    also a dict of gradients named like this course's parameters and inputs.
    Rows with no allowed key are NaN here (torch's behaviour): avoid them.
    """
    key = query if key is None else key
    value = query if value is None else value
    E, kdim, vdim = query.shape[-1], key.shape[-1], value.shape[-1]
    B, L, S = query.shape[0], query.shape[1], key.shape[1]
    bias = "q_proj.bias" in state
    m = torch.nn.MultiheadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        w = {k: v.double() for k, v in state.items()}
        if m._qkv_same_embed_dim:
            m.in_proj_weight.copy_(torch.cat([w["q_proj.weight"], w["k_proj.weight"], w["v_proj.weight"]]))
        else:
            m.q_proj_weight.copy_(w["q_proj.weight"])
            m.k_proj_weight.copy_(w["k_proj.weight"])
            m.v_proj_weight.copy_(w["v_proj.weight"])
        m.out_proj.weight.copy_(w["out_proj.weight"])
        if bias:
            m.in_proj_bias.copy_(torch.cat([w["q_proj.bias"], w["k_proj.bias"], w["v_proj.bias"]]))
            m.out_proj.bias.copy_(w["out_proj.bias"])
    m.eval()
    inputs = [t.detach().double().requires_grad_(grad_outputs is not None) for t in (query, key, value)]
    mask = _torch_mask(attn_mask, is_causal, L, S, B, H)
    kpm = key_padding_mask
    if kpm is not None and mask is not None and mask.dtype != torch.bool:
        # torch wants both masks of one kind: make the padding additive too.
        kpm = torch.zeros(B, S, dtype=torch.float64).masked_fill(kpm, float("-inf"))
    out, weights = m(*inputs, key_padding_mask=kpm, attn_mask=mask, need_weights=need_weights,
                     average_attn_weights=average_attn_weights)
    if grad_outputs is None:
        return out.detach(), None if weights is None else weights.detach()
    outs, grads = [out], [grad_outputs[0].double()]
    if grad_outputs[1] is not None:
        outs.append(weights)
        grads.append(grad_outputs[1].double())
    torch.autograd.backward(outs, grads)
    found = {"query": inputs[0].grad, "key": inputs[1].grad, "value": inputs[2].grad}
    if m._qkv_same_embed_dim:
        gq, gk, gv = m.in_proj_weight.grad.chunk(3)
    else:
        gq, gk, gv = m.q_proj_weight.grad, m.k_proj_weight.grad, m.v_proj_weight.grad
    found.update({"q_proj.weight": gq, "k_proj.weight": gk, "v_proj.weight": gv, "out_proj.weight": m.out_proj.weight.grad})
    if bias:
        bq, bk, bv = m.in_proj_bias.grad.chunk(3)
        found.update({"q_proj.bias": bq, "k_proj.bias": bk, "v_proj.bias": bv, "out_proj.bias": m.out_proj.bias.grad})
    return out.detach(), None if weights is None else weights.detach(), found


def _linear(x, state, name):
    y = x.double() @ state[f"{name}.weight"].double().T
    return y + state[f"{name}.bias"].double() if f"{name}.bias" in state else y


def strided(state: dict, H: int) -> dict:
    """The weights that make contiguous heads compute what strided heads (h::H) would."""
    E = state["q_proj.weight"].shape[0]
    rows = torch.arange(E).reshape(E // H, H).T.reshape(-1)  # head h's features: h, h + H, ...
    out = dict(state)
    for name in ("q_proj", "k_proj", "v_proj"):
        out[f"{name}.weight"] = state[f"{name}.weight"][rows]
        if f"{name}.bias" in state:
            out[f"{name}.bias"] = state[f"{name}.bias"][rows]
    out["out_proj.weight"] = state["out_proj.weight"][:, rows]
    return out


@remembered
def explicit_mha64(state, H, query, key=None, value=None, *, key_padding_mask=None, attn_mask=None,
                   is_causal=False, wrong=()):
    """A loop over heads, each one unit-2 attention (float64): returns (output, per-head weights (B, H, L, S)).

    Rows with no allowed key give zero attention, so output = out_proj.bias there.
    ``wrong`` names known bugs to rebuild for hints: "scale_E", "no_out_proj",
    "kv_swapped", "pad_polarity", "pad_queries", "mask_polarity", "no_causal", "strided",
    "finite" (masked scores set to -1e9: a row with no key left gets uniform weights).
    """
    key = query if key is None else key
    value = query if value is None else value
    if "kv_swapped" in wrong:
        key, value = value, key
    if "strided" in wrong:
        state = strided(state, H)
    if "mask_polarity" in wrong and attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = ~attn_mask
    if "no_causal" in wrong:
        is_causal = False
    B, L, E = query.shape
    S = key.shape[1]
    Dh = E // H
    q, k, v = _linear(query, state, "q_proj"), _linear(key, state, "k_proj"), _linear(value, state, "v_proj")
    if attn_mask is None or attn_mask.dtype == torch.bool:
        mask = torch.ones(B, H, L, S, dtype=torch.bool)
        if attn_mask is not None:
            mask = mask & attn_mask
        if key_padding_mask is not None:
            padded = ~key_padding_mask if "pad_polarity" in wrong else key_padding_mask
            if "pad_queries" in wrong:
                mask = mask & ~padded[:, None, :, None]  # (only meaningful when L == S)
            else:
                mask = mask & ~padded[:, None, None, :]
    else:
        mask = attn_mask.double().expand(B, H, L, S)
        if key_padding_mask is not None:
            mask = mask.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    scale = 1.0 / math.sqrt(E) if "scale_E" in wrong else None
    heads, weights = [], []
    for h in range(H):
        cols = slice(h * Dh, (h + 1) * Dh)
        o, w = attention64(q[..., cols], k[..., cols], v[..., cols], mask[:, h], is_causal=is_causal, scale=scale,
                           finite="finite" in wrong)
        heads.append(o)
        weights.append(w)
    concat = torch.cat(heads, dim=-1)  # (B, L, E)
    out = concat if "no_out_proj" in wrong else _linear(concat, state, "out_proj")
    return out, torch.stack(weights, dim=1)
