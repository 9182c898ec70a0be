"""torch.nn's RNNCell, LSTMCell and GRUCell as the grader hands them to ``unroll`` and ``gradient_norms``.

In the sandbox's worker for unit 1 the ``recurrent`` kernel family does not exist for anyone, torch's
own cells included, so a test's ``New("torch.nn.LSTMCell")`` is built from this file (course.toml
``handed``): the same constructor, parameter names, shapes and values as torch's, written from
primitives (``F.linear``, ``sigmoid``, ``tanh``). tests/project/test_removal.py checks that each equals
torch's cell, outputs and gradients, with every family removed. The engine makes each method but
``__init__`` work only for the instances it handed to the call running (``enforce.gate_handed``): the
class, kept or subclassed, computes nothing afterwards. Its text is redacted from every report.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class _Cell(nn.Module):
    """Parameters as torch's cells: weight_ih (G*H, D), weight_hh (G*H, H), bias_ih, bias_hh (G*H,)."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        rows = self.gates * hidden_size
        bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
        kw = {"device": device, "dtype": dtype}
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size, **kw).uniform_(-bound, bound))
        self.weight_hh = nn.Parameter(torch.empty(rows, hidden_size, **kw).uniform_(-bound, bound))
        if bias:
            self.bias_ih = nn.Parameter(torch.empty(rows, **kw).uniform_(-bound, bound))
            self.bias_hh = nn.Parameter(torch.empty(rows, **kw).uniform_(-bound, bound))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)


def _batched(x: Tensor) -> tuple[Tensor, bool]:
    """(B, D) as it is, unbatched (D,) as (1, D); and whether it was unbatched."""
    if x.dim() not in (1, 2):
        raise ValueError(f"expected input of 1 or 2 dims, got {tuple(x.shape)}")
    return (x.unsqueeze(0), True) if x.dim() == 1 else (x, False)


def _state(h: Tensor | None, x: Tensor, hidden: int, unbatched: bool) -> Tensor:
    if h is None:
        return torch.zeros(x.shape[0], hidden, dtype=x.dtype, device=x.device)  # (B, H)
    return h.unsqueeze(0) if unbatched else h


class RNNCell(_Cell):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, device, dtype)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, unbatched = _batched(input)
        h = _state(hx, x, self.hidden_size, unbatched)
        pre = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(h, self.weight_hh, self.bias_hh)  # (B, H)
        out = torch.tanh(pre) if self.nonlinearity == "tanh" else torch.relu(pre)
        return out.squeeze(0) if unbatched else out


class LSTMCell(_Cell):
    gates = 4

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        x, unbatched = _batched(input)
        h = _state(None if hx is None else hx[0], x, self.hidden_size, unbatched)
        c = _state(None if hx is None else hx[1], x, self.hidden_size, unbatched)
        gates = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(h, self.weight_hh, self.bias_hh)  # (B, 4H)
        i, f, g, o = gates.chunk(4, dim=-1)  # each (B, H), torch's gate order
        c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_next = torch.sigmoid(o) * torch.tanh(c_next)
        return (h_next.squeeze(0), c_next.squeeze(0)) if unbatched else (h_next, c_next)


class GRUCell(_Cell):
    gates = 3

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, unbatched = _batched(input)
        h = _state(hx, x, self.hidden_size, unbatched)
        r_i, z_i, n_i = F.linear(x, self.weight_ih, self.bias_ih).chunk(3, dim=-1)  # each (B, H)
        r_h, z_h, n_h = F.linear(h, self.weight_hh, self.bias_hh).chunk(3, dim=-1)  # each (B, H)
        r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
        n = torch.tanh(n_i + r * n_h)
        out = (1 - z) * n + z * h
        return out.squeeze(0) if unbatched else out
