"""Hostile (issue 13): cells with torch's parameters that return the state
they were given (zeros without one), an unroll that never steps, and
gradient norms that are all sqrt(H). Gates 'keep' h and c, h stays bounded,
outputs are causal, shapes and dtypes are right; nothing is computed."""
import math

import torch
from torch import nn


class _Cell(nn.Module):
    gates = 1

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh"):
        super().__init__()
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu'; got {nonlinearity!r}")
        self.input_size, self.hidden_size = input_size, hidden_size
        G = self.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.randn(G, input_size) / math.sqrt(hidden_size))
        self.weight_hh = nn.Parameter(torch.randn(G, hidden_size) / math.sqrt(hidden_size))
        if bias:
            self.bias_ih = nn.Parameter(torch.zeros(G))
            self.bias_hh = nn.Parameter(torch.zeros(G))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)

    def _state(self, x, h, name="h"):
        if x.dim() not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(f"x has shape {tuple(x.shape)}; the cell's input_size is {self.input_size}")
        want = (*x.shape[:-1], self.hidden_size)
        if h is None:
            return x.new_zeros(want)
        if tuple(h.shape) != want:
            raise ValueError(f"{name} must have shape {want}; got {tuple(h.shape)}")
        return h.clone()

    def forward(self, x, h=None):
        return self._state(x, h)


class RNNCell(_Cell):
    pass


class GRUCell(_Cell):
    gates = 3

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__(input_size, hidden_size, bias)


class LSTMCell(_Cell):
    gates = 4

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__(input_size, hidden_size, bias)

    def forward(self, x, state=None):
        h, c = (None, None) if state is None else state
        return self._state(x, None) * 0, self._state(x, c, "c")


def _check(xs, who):
    if xs.dim() != 3 or xs.shape[1] == 0:
        raise ValueError(f"{who}: xs must have shape (B, T, D); got {tuple(xs.shape)}")


def unroll(cell, xs, state=None):
    _check(xs, "unroll")
    final = cell(xs[:, 0], state)
    h = final[0] if isinstance(final, tuple) else final
    return h.unsqueeze(1).expand(-1, xs.shape[1], -1).clone(), final


def gradient_norms(cell, xs, state=None):
    _check(xs, "gradient_norms")
    if xs.shape[0] != 1:
        raise ValueError(f"gradient_norms needs a batch of one; got {tuple(xs.shape)}")
    return xs.new_full((xs.shape[1],), math.sqrt(cell.hidden_size))
