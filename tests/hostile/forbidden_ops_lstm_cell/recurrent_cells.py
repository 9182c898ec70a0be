"""Hostile: an LSTM cell that calls the dispatcher's operator torch.ops.aten.lstm_cell,
a route to nn.LSTMCell's kernel that no name list holds."""
import math

import torch
from torch import nn


class LSTMCell(nn.Module):
    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(4 * hidden_size)) if bias else None
        self.bias_hh = nn.Parameter(torch.empty(4 * hidden_size)) if bias else None
        for p in self.parameters():
            nn.init.uniform_(p, -1 / math.sqrt(hidden_size), 1 / math.sqrt(hidden_size))

    def forward(self, x, state=None):
        if state is not None and any(s.dim() != x.dim() for s in state):
            raise ValueError("state and x disagree on batching")  # torch's kernel would crash on it
        batched = x.dim() == 2
        if state is None:
            zeros = x.new_zeros(*x.shape[:-1], self.hidden_size)
            state = (zeros, zeros)
        x, h, c = (t if batched else t.unsqueeze(0) for t in (x, *state))
        h, c = torch.ops.aten.lstm_cell(x, [h, c], self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return (h, c) if batched else (h[0], c[0])
