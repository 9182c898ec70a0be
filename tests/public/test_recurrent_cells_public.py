"""Public tests for unit 1: run them with `attn-course check recurrent_cells`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.compare import assert_close, check_tensor
from autograder.subject import Call, New

pytestmark = pytest.mark.unit("recurrent_cells")
UNIT = "recurrent_cells"


def zeros_state(gates, D, H):
    """Parameters with torch's names, all zero: every gate pre-activation is 0."""
    return {"weight_ih": torch.zeros(gates * H, D), "weight_hh": torch.zeros(gates * H, H),
            "bias_ih": torch.zeros(gates * H), "bias_hh": torch.zeros(gates * H)}


@pytest.mark.points(1)
def test_rnn_cell_hand_example(subject):
    """RNNCell with W_ih = [[1]], W_hh = [[0.5]], zero biases: h' = tanh(1*2 + 0.5*2) = tanh(3)"""
    state = {"weight_ih": torch.tensor([[1.0]]), "weight_hh": torch.tensor([[0.5]]),
             "bias_ih": torch.zeros(1), "bias_hh": torch.zeros(1)}
    cell = New("RNNCell", (1, 1), state=state)
    got = subject.run(Call(UNIT, cell, (torch.tensor([[2.0]]), torch.tensor([[2.0]])))).output
    assert_close(got, torch.tensor([[math.tanh(3.0)]]), what="h'")


@pytest.mark.points(1)
def test_lstm_cell_zero_weights(subject):
    """LSTMCell with zero weights: every gate is 1/2, so c' = c / 2 and h' = tanh(c') / 2"""
    cell = New("LSTMCell", (2, 3), state=zeros_state(4, 2, 3))
    c = torch.tensor([[1.0, -2.0, 0.5]])
    h_next, c_next = subject.run(Call(UNIT, cell, (torch.ones(1, 2), (torch.zeros(1, 3), c)))).output
    assert_close(c_next, c / 2, what="c'")
    assert_close(h_next, torch.tanh(c / 2) / 2, what="h'")


@pytest.mark.points(1)
def test_gru_cell_zero_weights(subject):
    """GRUCell with zero weights: z = 1/2 and n = 0, so h' = h / 2"""
    cell = New("GRUCell", (2, 3), state=zeros_state(3, 2, 3))
    h = torch.tensor([[1.0, -2.0, 0.5]])
    got = subject.run(Call(UNIT, cell, (torch.ones(1, 2), h))).output
    assert_close(got, h / 2, what="h'")


@pytest.mark.points(1)
def test_unroll_shapes(subject):
    """unroll of an RNNCell(3, 4) over xs (2, 5, 3) gives outputs (2, 5, 4) and final_state = outputs[:, -1]"""
    outputs, final = subject.run(Call(UNIT, "unroll", (New("RNNCell", (3, 4)), torch.randn(2, 5, 3)))).output
    check_tensor(outputs, shape=(2, 5, 4), what="outputs")
    assert_close(final, outputs[:, -1], what="final_state")


@pytest.mark.points(1)
def test_gradient_norms_last_entry(subject):
    """gradient_norms over 4 steps has 4 entries, the last sqrt(H) = 2 for H = 4"""
    norms = subject.run(Call(UNIT, "gradient_norms", (New("GRUCell", (3, 4)), torch.randn(1, 4, 3)))).output
    check_tensor(norms, shape=(4,), what="gradient_norms")
    assert_close(norms[-1], torch.tensor(2.0), what="the last entry")
