"""Public tests for unit 1: run them with `attn-course check recurrent_cells`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.testing.compare import assert_close, assert_raises, check_tensor
from autograder.core.protocol import Call, New

pytestmark = pytest.mark.unit("recurrent_cells")


def zeros_state(gates, D, H):
    """Parameters with torch's names, all zero: every gate pre-activation is 0."""
    return {"weight_ih": torch.zeros(gates * H, D), "weight_hh": torch.zeros(gates * H, H),
            "bias_ih": torch.zeros(gates * H), "bias_hh": torch.zeros(gates * H)}


@pytest.mark.points(1)
def test_rnn_cell_hand_example(subject):
    """RNNCell with W_ih = [[1]], W_hh = [[0.5]], zero biases: h' = tanh(1*2 + 0.5*2) = tanh(3)"""
    # Checks: R3.
    state = {"weight_ih": torch.tensor([[1.0]]), "weight_hh": torch.tensor([[0.5]]),
             "bias_ih": torch.zeros(1), "bias_hh": torch.zeros(1)}
    cell = New("RNNCell", (1, 1), state=state)
    got = subject.run(Call(subject.unit, cell, (torch.tensor([[2.0]]), torch.tensor([[2.0]])))).output
    assert_close(got, torch.tensor([[math.tanh(3.0)]]), what="h'")


@pytest.mark.points(1)
def test_lstm_cell_zero_weights(subject):
    """LSTMCell with zero weights: every gate is 1/2, so c' = c / 2 and h' = tanh(c') / 2"""
    # Checks: R4, R5.
    cell = New("LSTMCell", (2, 3), state=zeros_state(4, 2, 3))
    c = torch.tensor([[1.0, -2.0, 0.5]])
    h_next, c_next = subject.run(Call(subject.unit, cell, (torch.ones(1, 2), (torch.zeros(1, 3), c)))).output
    assert_close(c_next, c / 2, what="c'")
    assert_close(h_next, torch.tanh(c / 2) / 2, what="h'")


@pytest.mark.points(1)
def test_gru_cell_zero_weights(subject):
    """GRUCell with zero weights: z = 1/2 and n = 0, so h' = h / 2"""
    # Checks: R6.
    cell = New("GRUCell", (2, 3), state=zeros_state(3, 2, 3))
    h = torch.tensor([[1.0, -2.0, 0.5]])
    got = subject.run(Call(subject.unit, cell, (torch.ones(1, 2), h))).output
    assert_close(got, h / 2, what="h'")


@pytest.mark.points(1)
def test_unroll_shapes(subject):
    """unroll of an RNNCell(3, 4) over xs (2, 5, 3) gives outputs (2, 5, 4) and final_state = outputs[:, -1]"""
    # Checks: R8, R9.
    outputs, final = subject.run(Call(subject.unit, "unroll", (New("RNNCell", (3, 4)), torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(0))))).output
    check_tensor(outputs, shape=(2, 5, 4), what="outputs")
    assert_close(final, outputs[:, -1], what="final_state")


@pytest.mark.points(1)
def test_gradient_norms_last_entry(subject):
    """gradient_norms over 4 steps has 4 entries, the last sqrt(H) = 2 for H = 4"""
    # Checks: R10.
    norms = subject.run(Call(subject.unit, "gradient_norms", (New("GRUCell", (3, 4)), torch.randn(1, 4, 3, generator=torch.Generator().manual_seed(0))))).output
    check_tensor(norms, shape=(4,), what="gradient_norms")
    assert_close(norms[-1], torch.tensor(2.0), what="the last entry")


def torch_cell(kind: str, D: int, H: int, **kwargs):
    """A seeded torch cell and its parameters (the same names as this unit's cells)."""
    torch.manual_seed(0)
    cell = getattr(torch.nn, kind)(D, H, **kwargs)
    return cell, {name: p.detach().clone() for name, p in cell.state_dict().items()}


def gates_read_as_ifog(cell: torch.nn.LSTMCell) -> torch.nn.LSTMCell:
    """``cell`` as an LSTM that reads the packed gate blocks as i, f, o, g (CS231n's order): torch's
    cell with blocks 2 and 3 (g and o) exchanged."""
    def reordered(t):  # (4H, ...): the blocks i, f, g, o stacked as i, f, o, g
        i, f, g, o = t.chunk(4)
        return torch.cat([i, f, o, g])

    wrong = torch.nn.LSTMCell(cell.input_size, cell.hidden_size)
    wrong.load_state_dict({name: reordered(p) for name, p in cell.state_dict().items()})
    return wrong


@pytest.mark.points(1)
def test_cells_match_torch(subject):
    """RNNCell (tanh and relu), LSTMCell and GRUCell with torch's weights give torch's next state"""
    # Checks: R1, R3, R4, R6, G5.
    gen = torch.Generator().manual_seed(1)
    x, h, c = torch.randn(2, 3, generator=gen), torch.randn(2, 4, generator=gen), torch.randn(2, 4, generator=gen)
    cases = [("RNNCell", {"nonlinearity": "tanh"}, h), ("RNNCell", {"nonlinearity": "relu"}, h),
             ("LSTMCell", {}, (h, c)), ("GRUCell", {}, h)]
    for kind, kwargs, state in cases:
        ref, params = torch_cell(kind, 3, 4, **kwargs)
        with torch.no_grad():
            want = ref(x, state)
            wrong = gates_read_as_ifog(ref)(x, state) if kind == "LSTMCell" else None
        got = subject.run(Call(subject.unit, New(kind, (3, 4), kwargs, state=params), (x, state))).output
        if kind == "LSTMCell":
            pairs = [(g, w, name, [(bad, "torch's gate order is i, f, g, o (CS231n's notes use i, f, o, g).")])
                     for g, w, name, bad in zip(got, want, ("h'", "c'"), wrong)]
        else:
            pairs = [(got, want, "h'", [])]
        for g, w, name, hints in pairs:
            assert_close(g, w, what=f"{kind} {kwargs or ''} {name}", hints=hints)


@pytest.mark.points(1)
def test_unbatched_step_stays_unbatched(subject):
    """an unbatched step x (D,) with h (H,) gives h' (H,), equal to the batched step's row"""
    # Checks: R2.
    ref, params = torch_cell("RNNCell", 3, 4)
    x, h = torch.ones(3), torch.zeros(4)
    got = check_tensor(subject.run(Call(subject.unit, New("RNNCell", (3, 4), state=params), (x, h))).output, shape=(4,), what="h'")
    with torch.no_grad():
        assert_close(got, ref(x.unsqueeze(0), h.unsqueeze(0))[0], what="h'")


@pytest.mark.points(1)
def test_unroll_steps_through_time_from_the_given_state(subject):
    """unroll of an LSTMCell steps t = 0, 1, 2 in order from the given (h, c) and returns the last (h, c)"""
    # Checks: R8, R9.
    ref, params = torch_cell("LSTMCell", 2, 3)
    gen = torch.Generator().manual_seed(2)
    xs, state = torch.randn(1, 3, 2, generator=gen), (torch.randn(1, 3, generator=gen), torch.randn(1, 3, generator=gen))
    with torch.no_grad():
        want, hs = state, []
        for t in range(3):
            want = ref(xs[:, t], want)
            hs.append(want[0])
    outputs, final = subject.run(Call(subject.unit, "unroll", (New("LSTMCell", (2, 3), state=params), xs, state))).output
    assert_close(outputs, torch.stack(hs, dim=1), what="outputs (the h of every step)")
    assert isinstance(final, (tuple, list)) and len(final) == 2, "an LSTM's final_state is the pair (h, c)"
    assert_close(final[0], want[0], what="final h")
    assert_close(final[1], want[1], what="final c")


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
def test_wrong_shapes_raise_value_error(subject):
    """a wrong input size, or xs that is not (B, T, D), raises ValueError naming the sizes"""
    # Checks: G8.
    assert_raises(subject.run, Call(subject.unit, New("RNNCell", (3, 4)), (torch.zeros(2, 5),)), "ValueError", mentions=(3, 5))
    # xs (4, 3) is not (B, T, D), though each xs[:, t] would pass as an unbatched step of size 4.
    assert_raises(subject.run, Call(subject.unit, "unroll", (New("RNNCell", (4, 4)), torch.zeros(4, 3))), "ValueError",
                  mentions=(4, 3))
