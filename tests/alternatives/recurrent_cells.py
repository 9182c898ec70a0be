"""A correct unit 1 in another style: one matmul per gate, a shared base class,
per-step re-rooted Jacobians for gradient_norms.

Written from the API page alone; it must score full marks.
"""
import torch
import torch.nn.functional as F
from torch import nn


class _Cell(nn.Module):
    n_gates = 1

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__()
        if input_size < 1 or hidden_size < 1:
            raise ValueError(f"sizes must be positive, got input_size={input_size}, hidden_size={hidden_size}")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        rows = self.n_gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        self.weight_hh = nn.Parameter(torch.empty(rows, hidden_size))
        if bias:
            self.bias_ih = nn.Parameter(torch.empty(rows))
            self.bias_hh = nn.Parameter(torch.empty(rows))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        for p in self.parameters():
            nn.init.uniform_(p, -hidden_size ** -0.5, hidden_size ** -0.5)

    def _gate(self, k, x, h):
        """(W_ih[k] x + b_ih[k], W_hh[k] h + b_hh[k]) for gate block k: one matmul each."""
        s = slice(k * self.hidden_size, (k + 1) * self.hidden_size)
        bi = None if self.bias_ih is None else self.bias_ih[s]
        bh = None if self.bias_hh is None else self.bias_hh[s]
        return F.linear(x, self.weight_ih[s], bi), F.linear(h, self.weight_hh[s], bh)

    def _check(self, x, *states):
        if x.ndim == 2:
            want = [x.size(0), self.hidden_size]
        elif x.ndim == 1:
            want = [self.hidden_size]
        else:
            raise ValueError(f"input must be 1-D or 2-D, got {x.ndim}-D with shape {list(x.shape)}")
        if x.size(-1) != self.input_size:
            raise ValueError(f"input has size {x.size(-1)} in its last dim, expected input_size={self.input_size}")
        for name, s in states:
            if s is not None and list(s.shape) != want:
                raise ValueError(f"{name} has shape {list(s.shape)}, expected {want} for input of shape {list(x.shape)}")
        return torch.zeros(want, dtype=x.dtype, device=x.device)


class RNNCell(_Cell):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh"):
        if nonlinearity == "tanh":
            self._act = torch.tanh
        elif nonlinearity == "relu":
            self._act = F.relu
        else:
            raise ValueError(f"unknown nonlinearity {nonlinearity!r}; use 'tanh' or 'relu'")
        super().__init__(input_size, hidden_size, bias)
        self.nonlinearity = nonlinearity

    def forward(self, x, h=None):
        zero = self._check(x, ("h", h))
        h = zero if h is None else h
        a, b = self._gate(0, x, h)
        return self._act(a + b)


class LSTMCell(_Cell):
    n_gates = 4

    def forward(self, x, state=None):
        if state is None:
            zero = self._check(x)
            h, c = zero, zero
        else:
            h, c = state
            self._check(x, ("h", h), ("c", c))
        i = torch.sigmoid(sum(self._gate(0, x, h)))
        f = torch.sigmoid(sum(self._gate(1, x, h)))
        g = torch.tanh(sum(self._gate(2, x, h)))
        o = torch.sigmoid(sum(self._gate(3, x, h)))
        c_new = torch.addcmul(i * g, f, c)
        return o * c_new.tanh(), c_new


class GRUCell(_Cell):
    n_gates = 3

    def forward(self, x, h=None):
        zero = self._check(x, ("h", h))
        h = zero if h is None else h
        r = torch.sigmoid(sum(self._gate(0, x, h)))
        z = torch.sigmoid(sum(self._gate(1, x, h)))
        xn, hn = self._gate(2, x, h)
        n = torch.tanh(xn + r * hn)
        return torch.lerp(n, h, z)  # n + z * (h - n)


def _h(state):
    return state[0] if type(state) in (tuple, list) else state


def unroll(cell, xs, state=None):
    if xs.ndim != 3:
        raise ValueError(f"xs must be (batch, time, features), got shape {list(xs.shape)}")
    hs = []
    for x_t in xs.unbind(1):
        state = cell(x_t, state)
        hs.append(_h(state))
    if not hs:
        raise ValueError("xs has no time steps")
    return torch.stack(hs, 1), state


def gradient_norms(cell, xs, state=None):
    if xs.ndim != 3 or xs.size(0) != 1:
        raise ValueError(f"xs must be (1, time, features), got shape {list(xs.shape)}")
    steps = xs.unbind(1)
    if not steps:
        raise ValueError("xs has no time steps")
    with torch.no_grad():
        states = []
        for x_t in steps:
            state = cell(x_t, state)
            states.append(state)
    out = []
    with torch.enable_grad():
        for t, s in enumerate(states):
            # Re-root the recurrence at h_t (c_t, if any, is held fixed) and run to T.
            h_t = _h(s).detach().requires_grad_()
            s = (h_t, *[v.detach() for v in s[1:]]) if type(s) in (tuple, list) else h_t
            for x_u in steps[t + 1:]:
                s = cell(x_u, s)
            h_T = _h(s).reshape(-1)
            total = h_T.new_zeros(())
            for k in range(h_T.numel()):
                (row,) = torch.autograd.grad(h_T[k], h_t, retain_graph=True, allow_unused=True)
                if row is not None:
                    total = total + (row * row).sum()
            out.append(total)
    return torch.stack(out).sqrt()
