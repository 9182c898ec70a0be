"""Trusted float64 oracles for unit 1, recurrent cells.

They may use torch's own recurrent modules freely: they run only in the
grader, never in student code. The hand-written formulas exist to build the
known-wrong answers behind the hints (each knob names one bug); the right
answers come from torch's modules.
"""
from __future__ import annotations

import itertools

import torch

from tensors import randn

from autograder.testing.memo import remembered

KINDS = ("rnn_tanh", "rnn_relu", "lstm", "gru")
GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}
CLASS = {"rnn_tanh": "RNNCell", "rnn_relu": "RNNCell", "lstm": "LSTMCell", "gru": "GRUCell"}
SEQUENCE = {"rnn_tanh": "RNN", "rnn_relu": "RNN", "lstm": "LSTM", "gru": "GRU"}
PARAMS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def cell_kwargs(kind: str, bias: bool = True) -> dict:
    """The constructor kwargs shared by this unit's cell and torch's."""
    kwargs = {"bias": bias}
    if kind.startswith("rnn"):
        kwargs["nonlinearity"] = kind.removeprefix("rnn_")
    return kwargs


def cell_params(kind: str, D: int, H: int, bias: bool, seed: int, *, scale: float = 0.6) -> dict:
    """A float32 state dict with torch's names and shapes."""
    G = GATES[kind]
    shapes = {"weight_ih": (G * H, D), "weight_hh": (G * H, H)}
    if bias:
        shapes.update(bias_ih=(G * H,), bias_hh=(G * H,))
    return {name: randn(shape, seed + i, scale=scale) for i, (name, shape) in enumerate(shapes.items())}


def torch_cell(kind: str, params: dict, *, dtype=torch.float64, round_to=None) -> torch.nn.Module:
    """torch's own cell holding ``params`` (rounded through ``round_to`` first, if given)."""
    D, H = params["weight_ih"].shape[1], params["weight_hh"].shape[1]
    cell = getattr(torch.nn, CLASS[kind])(D, H, **cell_kwargs(kind, "bias_ih" in params), dtype=dtype)
    if round_to is not None:
        params = {k: v.to(round_to) for k, v in params.items()}
    cell.load_state_dict({k: v.to(dtype) for k, v in params.items()})
    return cell


def torch_sequence(kind: str, params: dict, *, dtype=torch.float64) -> torch.nn.Module:
    """torch.nn.RNN / LSTM / GRU (batch_first=True) with the cell's weights copied in."""
    D, H = params["weight_ih"].shape[1], params["weight_hh"].shape[1]
    kwargs = cell_kwargs(kind, "bias_ih" in params)
    module = getattr(torch.nn, SEQUENCE[kind])(D, H, batch_first=True, dtype=dtype, **kwargs)
    module.load_state_dict({f"{k}_l0": v.to(dtype) for k, v in params.items()})
    return module


def _double(value):
    if isinstance(value, (tuple, list)):
        return tuple(_double(v) for v in value)
    return None if value is None else value.detach().double()


@remembered
def cell_reference(kind: str, params: dict, args: tuple, grad_outputs=None, *, round_to=None):
    """torch's cell in float64 on ``args``: (output, arg_grads, param_grads).

    ``args`` is ``(x,)``, ``(x, h)`` or ``(x, (h, c))``; the gradients follow
    its nesting, as the subject's Result does.
    """
    cell = torch_cell(kind, params, round_to=round_to)
    leaves = []

    def leaf(t):
        t = t.detach().double().requires_grad_(grad_outputs is not None)
        leaves.append(t)
        return t

    inputs = tuple(tuple(leaf(t) for t in a) if isinstance(a, (tuple, list)) else leaf(a) for a in args)
    if round_to is not None:
        with torch.no_grad():
            for t in leaves:
                t.copy_(t.to(round_to).double())
    out = cell(*inputs)
    if grad_outputs is None:
        return _double(out), None, None
    outs = out if isinstance(out, tuple) else (out,)
    grads = grad_outputs if isinstance(grad_outputs, tuple) else (grad_outputs,)
    wrt = leaves + list(cell.parameters())
    found = torch.autograd.grad(outs, wrt, [g.double() for g in grads])
    by_leaf = dict(zip(map(id, leaves), found))
    arg_grads = tuple(
        tuple(by_leaf[id(t)] for t in a) if isinstance(a, tuple) else by_leaf[id(a)] for a in inputs
    )
    names = [name for name, _ in cell.named_parameters()]
    return _double(out), arg_grads, dict(zip(names, found[len(leaves):]))


# -- hand formulas, with one knob per known bug --------------------------------

def _lin(x, w, b):
    out = x @ w.t()
    return out if b is None else out + b


def _p(params):
    return {k: params[k].double() if k in params else None for k in PARAMS}


def rnn64(x, h, params, nonlinearity="tanh", *, transpose_hh=True, bias_hh=True, act=None):
    p = _p(params)
    x = x.double()
    h = torch.zeros(*x.shape[:-1], p["weight_hh"].shape[1], dtype=torch.float64) if h is None else h.double()
    w_hh = p["weight_hh"] if transpose_hh else p["weight_hh"].t()
    pre = _lin(x, p["weight_ih"], p["bias_ih"]) + _lin(h, w_hh, p["bias_hh"] if bias_hh else None)
    act = act or (torch.tanh if nonlinearity == "tanh" else torch.relu)
    return act(pre)


def lstm64(x, state, params, *, order="ifgo", forget=True, h_from_old_c=False, tanh_c=True,
           bias_hh=True, g_act=torch.tanh):
    """(h', c') from the formulas; ``order`` is how the four row blocks are read."""
    p = _p(params)
    x = x.double()
    H = p["weight_hh"].shape[1]
    if state is None:
        h = c = torch.zeros(*x.shape[:-1], H, dtype=torch.float64)
    else:
        h, c = state[0].double(), state[1].double()
    gates = _lin(x, p["weight_ih"], p["bias_ih"]) + _lin(h, p["weight_hh"], p["bias_hh"] if bias_hh else None)
    blocks = dict(zip(order, gates.chunk(4, dim=-1)))
    i, f, g, o = (blocks[k] for k in "ifgo")
    keep = torch.sigmoid(f) * c if forget else 0.0
    c_next = keep + torch.sigmoid(i) * g_act(g)
    squash = torch.tanh if tanh_c else (lambda t: t)
    h_next = torch.sigmoid(o) * squash(c if h_from_old_c else c_next)
    return h_next, c_next


def gru64(x, h, params, *, order="rzn", reset_before_matmul=False, update_reversed=False, bias_hh=True,
          detach_carry=False):
    """h' from the formulas; ``detach_carry`` detaches the h of the carried-over term z * h."""
    p = _p(params)
    x = x.double()
    H = p["weight_hh"].shape[1]
    h = torch.zeros(*x.shape[:-1], H, dtype=torch.float64) if h is None else h.double()
    b_hh = p["bias_hh"] if bias_hh else None
    xi = dict(zip(order, _lin(x, p["weight_ih"], p["bias_ih"]).chunk(3, dim=-1)))
    w = dict(zip(order, p["weight_hh"].chunk(3, dim=0)))
    b = dict(zip(order, b_hh.chunk(3)) if b_hh is not None else {})
    hh = {k: _lin(h, w[k], b.get(k)) for k in "rzn"}
    r = torch.sigmoid(xi["r"] + hh["r"])
    z = torch.sigmoid(xi["z"] + hh["z"])
    if reset_before_matmul:
        n = torch.tanh(xi["n"] + _lin(r * h, w["n"], b.get("n")))
    else:
        n = torch.tanh(xi["n"] + r * hh["n"])
    carried = h.detach() if detach_carry else h
    return z * n + (1 - z) * carried if update_reversed else (1 - z) * n + z * carried


def gru_arg_grads64(params, args, upstream, **change):
    """The gradients of ``gru64(*args, params, **change)`` with respect to ``args`` ((x,) or (x, h))
    under ``upstream``, nested as a subject's ``arg_grads``."""
    leaves = [a.detach().double().requires_grad_() for a in args]
    out = gru64(leaves[0], leaves[1] if len(leaves) > 1 else None, params, **change)
    return torch.autograd.grad(out, leaves, upstream.double(), allow_unused=True)


def cell_hints(kind, x, state, params):
    """Known wrong outputs of one step, each with the advice that fixes it."""
    bias = "bias_ih" in params
    square = params["weight_hh"].shape[0] == params["weight_hh"].shape[1]
    hints = []
    if kind.startswith("rnn"):
        nl = kind.removeprefix("rnn_")
        if square:
            hints.append((rnn64(x, state, params, nl, transpose_hh=False), "h' uses h W_hh^T: did you forget to transpose weight_hh?"))
        if bias:
            hints.append((rnn64(x, state, params, nl, bias_hh=False), "h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh): bias_hh was dropped."))
        hints.append((rnn64(x, state, params, nl, act=torch.sigmoid), "the activation is tanh (or relu), not sigmoid."))
        other = "relu" if nl == "tanh" else "tanh"
        hints.append((rnn64(x, state, params, other), f"nonlinearity={nl!r} was given, but {other} was applied."))
        return hints
    if kind == "lstm":
        wrong = [
            (dict(order="ifog"), "torch's gate order is i, f, g, o (CS231n's notes use i, f, o, g)."),
            (dict(forget=False), "c' = f * c + i * g: the forget-gate term f * c is missing."),
            (dict(h_from_old_c=True), "h' = o * tanh(c'), from the new c', not the old c."),
            (dict(tanh_c=False), "h' = o * tanh(c'): the tanh on c' is missing."),
            (dict(g_act=torch.sigmoid), "the candidate g goes through tanh, not sigmoid."),
        ]
        if bias:
            wrong.append((dict(bias_hh=False), "the gates add both bias_ih and bias_hh: bias_hh was dropped."))
        return [(lstm64(x, state, params, **change), text) for change, text in wrong]
    wrong = [
        (dict(reset_before_matmul=True), "torch's GRU applies r after the matmul: n = tanh(W_in x + b_in + r * (W_hn h + b_hn))."),
        (dict(update_reversed=True), "h' = (1 - z) * n + z * h: z keeps the old state (you swapped z and 1 - z)."),
        (dict(order="zrn"), "torch's gate order is r, z, n."),
    ]
    if bias:
        wrong.append((dict(bias_hh=False), "the gates add both bias_ih and bias_hh: bias_hh was dropped."))
    return [(gru64(x, state, params, **change), text) for change, text in wrong]


def permuted_orders(canonical: str):
    """Every other order of the gate letters."""
    return ["".join(p) for p in itertools.permutations(canonical) if "".join(p) != canonical]


# -- sequences ---------------------------------------------------------------

def hidden_of(state):
    return state[0] if isinstance(state, (tuple, list)) else state


def unroll64(cell, xs, state=None, *, carry=True):
    """Step ``cell`` (a float64 torch cell) by hand: (outputs (B, T, H), final state).

    ``carry=False`` rebuilds a known bug: every step starts from the initial state.
    """
    xs = xs.double()
    initial = state = _double(state)
    outputs = []
    with torch.no_grad():
        for t in range(xs.shape[1]):
            state = cell(xs[:, t], state if carry else initial)
            outputs.append(hidden_of(state))
    return torch.stack(outputs, dim=1), state


@remembered
def sequence_reference(kind, params, xs, state=None):
    """torch.nn.RNN / LSTM / GRU in float64: (outputs, final state shaped like a cell's)."""
    module = torch_sequence(kind, params)
    xs = xs.double()
    if state is not None:
        state = tuple(s.double().unsqueeze(0) for s in state) if kind == "lstm" else state.double().unsqueeze(0)
    with torch.no_grad():
        out, final = module(xs, state)
    final = tuple(f.squeeze(0) for f in final) if kind == "lstm" else final.squeeze(0)
    return out, final


@remembered
def jacobian_norms64(kind, params, xs, state=None, *, wrt="h", ord="fro"):
    """Entry t-1: the norm of d h_T / d h_t (or d h_T / d x_t when wrt="x"), t = 1..T.

    Each Jacobian comes from torch.autograd.functional.jacobian of the map
    h_t -> h_T (c_t held fixed for an LSTM), run with torch's float64 cell.
    """
    cell = torch_cell(kind, params)
    xs = xs.double()[0]  # (T, D), the batch of one
    T = xs.shape[0]
    states = []  # the state after each step
    initial = None if state is None else _double(tuple(v[0] for v in state) if kind == "lstm" else state[0])
    s = initial
    with torch.no_grad():
        for t in range(T):
            s = cell(xs[t], s)
            states.append(s)

    def continue_from(t, s_t):
        s = s_t
        for u in range(t + 1, T):
            s = cell(xs[u], s)
        return hidden_of(s)

    norms = []
    for t in range(T):
        if wrt == "h":
            def f(h_t, t=t):
                s_t = (h_t, states[t][1]) if kind == "lstm" else h_t
                return continue_from(t, s_t)
            point = hidden_of(states[t])
        else:
            before = initial if t == 0 else states[t - 1]

            def f(x_t, t=t, before=before):
                return continue_from(t, cell(x_t, before))
            point = xs[t]
        J = torch.autograd.functional.jacobian(f, point)
        norms.append(torch.linalg.matrix_norm(J, ord=ord))
    return torch.stack(norms)


@remembered
def unroll_grads64(kind, params, xs, state, g_outputs, g_final=None, *, truncated=False):
    """The gradients of unroll's (outputs, final_state) under upstream ``g_outputs`` (B, T, H)
    and ``g_final`` (like the state, or None), with respect to xs and the initial state.

    The right ones come from torch.nn.RNN / LSTM / GRU (batch_first=True) in float64;
    ``truncated`` rebuilds a known bug: the state detached after every step (BPTT cut).
    Returns (grad of xs (B, T, D), grad of the state: None, h, or (h, c)).
    """
    xs = xs.detach().double().requires_grad_()
    leaves = [] if state is None else [s.detach().double().requires_grad_() for s in flat_state(state)]
    initial = None if state is None else (tuple(leaves) if kind == "lstm" else leaves[0])
    if truncated:
        cell, s, steps = torch_cell(kind, params), initial, []
        for t in range(xs.shape[1]):
            s = cell(xs[:, t], s)
            steps.append(hidden_of(s))
            if t < xs.shape[1] - 1:
                s = tuple(v.detach() for v in s) if kind == "lstm" else s.detach()
        outputs, final = torch.stack(steps, dim=1), s
    else:
        module = torch_sequence(kind, params)
        h0 = None if state is None else (tuple(v.unsqueeze(0) for v in leaves) if kind == "lstm" else leaves[0].unsqueeze(0))
        outputs, final = module(xs, h0)
        final = tuple(f.squeeze(0) for f in final) if kind == "lstm" else final.squeeze(0)
    outs, grads = [outputs], [g_outputs.double()]
    if g_final is not None:
        outs += flat_state(final)
        grads += [g.double() for g in flat_state(g_final)]
    found = torch.autograd.grad(outs, [xs, *leaves], grads, allow_unused=True)
    found = [torch.zeros_like(w) if g is None else g for w, g in zip([xs, *leaves], found)]
    grad_state = None if state is None else (tuple(found[1:]) if kind == "lstm" else found[1])
    return found[0], grad_state


def flat_state(state) -> list:
    return list(state) if isinstance(state, (tuple, list)) else [state]
