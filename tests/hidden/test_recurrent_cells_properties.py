"""Hidden properties of unit 1, recurrent cells (RNN, LSTM, GRU), unroll and gradient_norms.

Each test's docstring is the property students read; its points are marked.
Tests reach the student's code only through ``subject``. The unroll and
gradient_norms properties run them with torch's own cells (``New("torch.nn.LSTMCell")``),
so a bug in a student's cell costs points only in the cell properties; the
properties that are about the whole unit use the student's own cells.

Side properties (marked ``aspect``: dtypes, devices, layouts, argument checks) compare
the code with itself on the plain path (float32 on the CPU, contiguous inputs) and
anchor that path with ``assert_roughly``, so a bug in the values fails the value
properties only.
"""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from autograder.testing.compare import N_, assert_raises, assert_roughly, assert_unmodified, check_tensor, with_hint
from autograder.core.cases import attach
from autograder.core.protocol import Call, New, StudentError
from anchors import assert_close, check_gradients_of, computed_in_float32, differ, hinted, raises_with_advice, tolerance
from oracles_recurrent_cells import (
    CLASS, KINDS, cell_hints, cell_kwargs, cell_params, cell_reference, gru64, gru_arg_grads64, jacobian_norms64,
    lstm64, permuted_orders, sequence_reference, torch_cell, unroll64, unroll_grads64,
)
from tensors import randn, seeds

pytestmark = pytest.mark.unit("recurrent_cells")
# The checks a constant or shape-only answer may pass, and so the only points it may earn
# (tests/project/test_nothing_for_nothing.py): shapes, structure and argument errors;
# the public last-entry check asks for sqrt(H), a constant.
SHAPE_CHECKS = (
    "test_recurrent_cells_public.py::test_unroll_shapes",
    "test_recurrent_cells_public.py::test_unbatched_step_stays_unbatched",
    "test_recurrent_cells_public.py::test_wrong_shapes_raise_value_error",
    "test_recurrent_cells_public.py::test_gradient_norms_last_entry",
    "test_recurrent_cells_properties.py::test_bad_shapes_raise_value_error",
)

sizes = st.integers(1, 5)
batches = st.sampled_from([None, 1, 2, 3])  # None: unbatched
SATURATE = 30.0  # a gate bias that drives sigmoid to 0 or 1 in float32

# Advice for side bugs, each shown where the failure proves it (not a guess from a wrong value).
UNBATCHED = N_("an unbatched step, x of shape (D,), gives an unbatched state of shape (H,): remove the batch dim "
               "you added.")
ZERO_STATE = N_("a missing state means zeros made like x: x.new_zeros(B, H) (x's dtype and device), not "
                "torch.zeros(B, H).")
INPUT_WIDTH = N_("a cell checks x's last dim against input_size and raises ValueError naming both sizes.")
SEQUENCE_RANK = N_("xs must be (B, T, D): unroll and gradient_norms check its rank and raise ValueError naming "
                   "its shape.")
NORMS_DTYPE = N_("gradient_norms returns xs's dtype on xs's device: make the tensors it builds (its sums of squares) "
                 "with that dtype and device.")
IN_PLACE = N_("a cell returns new tensors and leaves x and the state alone: an in-place update (mul_, add_, +=) "
              "changes the caller's tensors.")
LSTM_FINAL = N_("for an LSTM cell, final_state is the pair (h, c) the cell returned at the last step; you returned "
                "h alone.")


# -- recipes and inputs --------------------------------------------------------

def student_cell(kind, D, H, bias=True, params=None):
    """This unit's cell, loaded with ``params``."""
    return New(CLASS[kind], (D, H), cell_kwargs(kind, bias), state=params)


def trusted_cell(kind, D, H, bias=True, params=None, dtype=None):
    """torch's own cell: a student's cell bug then costs no unroll or gradient_norms points."""
    kwargs = cell_kwargs(kind, bias)
    if dtype is not None:
        kwargs["dtype"] = dtype
    return New(f"torch.nn.{CLASS[kind]}", (D, H), kwargs, state=params)


def lead(batch):
    return () if batch is None else (batch,)


def make_state(kind, shape, seed, *, h_scale=0.8, c_scale=1.5, dtype=torch.float32):
    h = randn(shape, seed, scale=h_scale, dtype=dtype)
    return (h, randn(shape, seed + 1, scale=c_scale, dtype=dtype)) if kind == "lstm" else h


def step_args(kind, batch, D, H, seed, given_state, *, dtype=torch.float32, **scales):
    """``(x,)`` or ``(x, h)`` or ``(x, (h, c))`` for one step."""
    x = randn((*lead(batch), D), seed, dtype=dtype)
    return (x,) if not given_state else (x, make_state(kind, (*lead(batch), H), seed + 1, dtype=dtype, **scales))


def state_of(args):
    return args[1] if len(args) > 1 else None


def upstream_like(kind, shape, seed):
    """A random upstream gradient for a cell's output (not all-ones)."""
    g = randn(shape, seed)
    return (g, randn(shape, seed + 1)) if kind == "lstm" else g


def as_pair(got, what):
    if not (isinstance(got, tuple) and len(got) == 2):
        raise AssertionError(f"{what} must be a tuple (h, c); got {type(got).__name__}")
    return got


def assert_cell_output(kind, got, expected, hints=None, *, what="", **tol):
    """Compare one step's output; for an LSTM c' first (its error explains h').

    ``hints``: a function returning [(wrong output, advice)], called only on failure.
    """
    if kind == "lstm":
        h, c = as_pair(got, f"LSTMCell's output{what}")
        for name, index, value in (("c'", 1, c), ("h'", 0, h)):
            part = None if hints is None else (lambda index=index: [(w[index], t) for w, t in hints()])
            assert_close(of_shape(value, expected[index], f"{name}{what}"), expected[index], what=f"{name}{what}",
                         hints=part, **tol)
    else:
        assert_close(of_shape(got, expected, f"h'{what}"), expected, what=f"h'{what}", hints=hints, **tol)


def of_shape(got, expected, what):
    """``got``, shaped like ``expected``; an unbatched step that kept its batch dim, (1, H) for (H,), is told so."""
    try:
        return check_tensor(got, shape=expected.shape, what=what)
    except AssertionError as error:
        if isinstance(got, torch.Tensor) and expected.dim() == 1 and tuple(got.shape) == (1, *expected.shape):
            raise hinted(error, UNBATCHED) from None
        raise


def run_with_default_state(subject, call, given):
    """``subject.run(call)``, where ``call`` leaves the state None: a failure there, when ``given`` (the
    same call with a state passed) runs, is the default zero state's."""
    try:
        return subject.run(call)
    except StudentError as error:
        try:
            subject.run(given)
        except StudentError:
            raise error from None
        raise attach(AssertionError(with_hint(error.describe(), ZERO_STATE)), call=call) from None


def assert_computed_in_float64(got, right, what):
    """A float64 answer near ``right`` that holds float32 numbers only was computed in float32 and cast
    up: shown against ``right`` at float64 tolerance, where the downcast's hint is proven."""
    if isinstance(got, torch.Tensor) and computed_in_float32(got, right):
        assert_close(got, right, what=what, dtype=torch.float64, **tolerance(torch.float64))


def flat(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


def run_unroll(subject, cell, xs, state=None, **call):
    args = (cell, xs) if state is None else (cell, xs, state)
    got = subject.run(Call(subject.unit, "unroll", args, **call)).output
    if not (isinstance(got, tuple) and len(got) == 2):
        raise AssertionError("unroll must return a tuple (outputs, final_state)")
    return got


def run_norms(subject, cell, xs, state=None, **call):
    args = (cell, xs) if state is None else (cell, xs, state)
    return subject.run(Call(subject.unit, "gradient_norms", args, **call)).output


# -- cells vs torch ------------------------------------------------------------

@st.composite
def cell_cases(draw):
    return dict(D=draw(sizes), H=draw(sizes), batch=draw(batches), bias=draw(st.booleans()), given_state=draw(st.booleans()))


def check_cell_against_torch(subject, kind, case, seed):
    D, H, batch, bias = case["D"], case["H"], case["batch"], case["bias"]
    params = cell_params(kind, D, H, bias, seed)
    args = step_args(kind, batch, D, H, seed + 10, case["given_state"])
    upstream = upstream_like(kind, (*lead(batch), H), seed + 20)
    out, arg_grads, param_grads = cell_reference(kind, params, args, upstream)
    cell = student_cell(kind, D, H, bias, params)
    # Values first, without gradients: a wrong shape then reads as a wrong shape.
    got = subject.run(Call(subject.unit, cell, args)).output
    assert_cell_output(kind, got, out, lambda: cell_hints(kind, args[0], state_of(args), params))
    result = subject.run(Call(subject.unit, cell, args, grad_outputs=upstream))
    # Random upstream gradients: every input and parameter gets its own check.
    names = ["x"] + (["h", "c"] if kind == "lstm" else ["h"])
    got_grads = [result.arg_grads[0]] + (flat(result.arg_grads[1]) if len(args) > 1 else [])
    want_grads = [arg_grads[0]] + (flat(arg_grads[1]) if len(args) > 1 else [])
    known = {}  # input -> its known wrong gradients
    if kind == "gru" and len(args) > 1:
        known["h"] = [(gru_arg_grads64(params, args, upstream, detach_carry=True)[1],
                       "the carried-over z * h sends gradient to h as well: do not detach h (or take h.data) in "
                       "h' = (1 - z) * n + z * h.")]
    checks = [(f"the gradient with respect to {n}", g, w, known.get(n, [])) for n, g, w in zip(names, got_grads, want_grads)]
    checks += [(f"the gradient of {n}", result.param_grads.get(n), w, []) for n, w in param_grads.items()]
    for what, got, want, hints in checks:
        try:
            assert_close(got, want, what=what, hints=[(torch.zeros_like(want), "no gradient arrives: is something detached?"),
                                                      *hints])
        except AssertionError as error:
            if not (isinstance(got, torch.Tensor) and got.shape == want.shape):
                raise
            raise AssertionError(f"{error} (the output itself is right: look for a .detach(), .data or an "
                                 "in-place write on the path from this tensor to the output)") from None


@pytest.mark.points(3)
@given(case=cell_cases(), nonlinearity=st.sampled_from(["tanh", "relu"]), seed=seeds)
def test_rnn_cell_matches_torch(subject, case, nonlinearity, seed):
    """RNNCell equals torch.nn.RNNCell (tanh and relu): outputs and gradients, batched or not, h=None, bias=False"""
    # Checks: R1, R2, R3, G5.
    check_cell_against_torch(subject, f"rnn_{nonlinearity}", case, seed)


@pytest.mark.points(3)
@given(case=cell_cases(), seed=seeds)
def test_lstm_cell_matches_torch(subject, case, seed):
    """LSTMCell equals torch.nn.LSTMCell: outputs and gradients, batched or not, state=None, bias=False"""
    # Checks: R4, R5, G5.
    check_cell_against_torch(subject, "lstm", case, seed)


@pytest.mark.points(3)
@given(case=cell_cases(), seed=seeds)
def test_gru_cell_matches_torch(subject, case, seed):
    """GRUCell equals torch.nn.GRUCell: outputs and gradients, batched or not, h=None, bias=False"""
    # Checks: R6, R7, G5.
    check_cell_against_torch(subject, "gru", case, seed)


# -- gate semantics, independent of torch --------------------------------------

def saturated(kind, D, H, seed, gates: dict):
    """Random parameters with some gate biases set to +-SATURATE (gates: block index -> sign)."""
    params = cell_params(kind, D, H, True, seed)
    bias = params["bias_ih"].clone()
    for block, sign in gates.items():
        bias[block * H:(block + 1) * H] = sign * SATURATE
    params["bias_ih"] = bias
    return params


@pytest.mark.points(2)
@given(D=sizes, H=sizes, batch=batches, seed=seeds)
def test_lstm_open_forget_closed_input_keeps_c(subject, D, H, batch, seed):
    """an LSTM whose forget gate is saturated open and input gate closed keeps c unchanged"""
    # Checks: R4.
    params = saturated("lstm", D, H, seed, {0: -1, 1: +1})  # i = 0, f = 1 (gate order i, f, g, o)
    x, (h, c) = step_args("lstm", batch, D, H, seed + 10, True)
    got = subject.run(Call(subject.unit, student_cell("lstm", D, H, True, params), (x, (h, c)))).output
    h_next, c_next = as_pair(got, "LSTMCell's output")
    assert_close(c_next, c.double(), what="c' with the forget gate f = 1 and the input gate i = 0", hints=[
        (torch.zeros_like(c, dtype=torch.float64), "c' = f * c + i * g: with f = 1 the old c must come through; the term f * c is missing."),
        (lstm64(x, (h, c), params, order="figo")[1], "weight_ih's first block is the input gate i, the second the forget gate f."),
    ])
    # Passing c through is not a cell: h' must be right too.
    assert_close(h_next, lstm64(x, (h, c), params)[0], what="h' with the forget gate f = 1 and the input gate i = 0")


@pytest.mark.points(1)
@given(D=sizes, H=st.integers(2, 5), batch=st.integers(2, 3), seed=seeds)
def test_lstm_hidden_state_is_bounded(subject, D, H, batch, seed):
    """an LSTM's h' = o * tanh(c') stays within [-1, 1], even when c is large"""
    # Checks: R4.
    params = cell_params("lstm", D, H, True, seed, scale=3.0)
    x, state = step_args("lstm", batch, D, H, seed + 10, True, h_scale=1.0, c_scale=6.0)
    h_next, _ = as_pair(subject.run(Call(subject.unit, student_cell("lstm", D, H, True, params), (x, state))).output, "LSTMCell's output")
    check_tensor(h_next, shape=(batch, H), what="h'")
    worst = float(h_next.abs().max())
    if not worst <= 1.0 + 1e-6:
        raise AssertionError(f"|h'| reached {worst:.4g}: h' = o * tanh(c') can never leave [-1, 1]. Hint: is the tanh on c' missing?")
    assert_close(h_next, lstm64(x, state, params)[0], what="h' for a large c")  # zeros are bounded too


@pytest.mark.points(2)
@given(D=sizes, H=sizes, batch=batches, seed=seeds)
def test_gru_update_gate_one_keeps_h(subject, D, H, batch, seed):
    """a GRU whose update gate is saturated to z = 1 returns h unchanged"""
    # Checks: R6.
    params = saturated("gru", D, H, seed, {1: +1})  # z = 1 (gate order r, z, n)
    x, h = step_args("gru", batch, D, H, seed + 10, True)
    got = subject.run(Call(subject.unit, student_cell("gru", D, H, True, params), (x, h))).output
    assert_close(got, h.double(), what="h' with the update gate z = 1", hints=[
        (gru64(x, h, params, update_reversed=True), "h' = (1 - z) * n + z * h: with z = 1 the old h comes through unchanged; you swapped z and 1 - z."),
        (gru64(x, h, params, order="zrn"), "weight_ih's blocks are r, z, n: the second block is the update gate z."),
    ])
    # Returning h is right only there: the same cell with a free update gate must move h.
    free = cell_params("gru", D, H, True, seed)
    got = subject.run(Call(subject.unit, student_cell("gru", D, H, True, free), (x, h))).output
    assert_close(got, gru64(x, h, free), what="h' with the update gate free")


@pytest.mark.points(2)
@given(D=sizes, H=sizes, batch=batches, seed=seeds)
def test_gru_reset_gate_scales_the_recurrent_projection(subject, D, H, batch, seed):
    """GRU's reset gate multiplies (W_hn h + b_hn): with r = 0 and z = 0, h' = tanh(W_in x + b_in)"""
    # Checks: R6.
    params = saturated("gru", D, H, seed, {0: -1, 1: -1})  # r = 0, z = 0
    x, h = step_args("gru", batch, D, H, seed + 10, True)
    got = subject.run(Call(subject.unit, student_cell("gru", D, H, True, params), (x, h))).output
    w_in, b_in = params["weight_ih"][2 * H:].double(), params["bias_ih"][2 * H:].double()
    w_hn, b_hn = params["weight_hh"][2 * H:].double(), params["bias_hh"][2 * H:].double()
    xn = x.double() @ w_in.t() + b_in
    assert_close(got, torch.tanh(xn), what="h' with the reset gate r = 0 and the update gate z = 0", hints=[
        (torch.tanh(xn + b_hn), "r multiplies the whole recurrent projection: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)); "
                                "you computed W_hn (r * h) + b_hn (the reset applied before the matmul)."),
        (torch.tanh(xn + h.double() @ w_hn.t() + b_hn), "the reset gate r must multiply (W_hn h + b_hn); it was not applied."),
        (h.double(), "h' = (1 - z) * n + z * h: with z = 0 the new candidate n comes through, not the old h."),
    ])


@pytest.mark.points(2)
@given(D=sizes, H=sizes, batch=batches, seed=seeds)
def test_lstm_gate_order_is_i_f_g_o(subject, D, H, batch, seed):
    """LSTMCell reads the stacked rows of weight_ih and the biases in torch's gate order i, f, g, o"""
    # Checks: R4.
    params = {"weight_ih": torch.zeros(4 * H, D), "weight_hh": torch.zeros(4 * H, H),
              "bias_ih": randn((4 * H,), seed, scale=2.0), "bias_hh": randn((4 * H,), seed + 1, scale=0.5)}
    x, state = step_args("lstm", batch, D, H, seed + 10, True)
    got = subject.run(Call(subject.unit, student_cell("lstm", D, H, True, params), (x, state))).output

    def hints():
        return [(lstm64(x, state, params, order=order),
                 f"you read the gate blocks as {', '.join(order)}{' (CS231n order)' if order == 'ifog' else ''}; "
                 "torch stacks them i, f, g, o.") for order in permuted_orders("ifgo")]
    assert_cell_output("lstm", got, lstm64(x, state, params), hints, what=" with only gate biases")


@pytest.mark.points(2)
@given(D=sizes, H=sizes, batch=batches, seed=seeds)
def test_gru_gate_order_is_r_z_n(subject, D, H, batch, seed):
    """GRUCell reads the stacked rows of weight_ih, weight_hh and the biases in torch's gate order r, z, n"""
    # Checks: R6.
    params = {"weight_ih": torch.zeros(3 * H, D), "weight_hh": torch.zeros(3 * H, H),
              "bias_ih": randn((3 * H,), seed, scale=2.0), "bias_hh": randn((3 * H,), seed + 1, scale=2.0)}
    x, h = step_args("gru", batch, D, H, seed + 10, True)
    got = subject.run(Call(subject.unit, student_cell("gru", D, H, True, params), (x, h))).output

    def hints():
        return [(gru64(x, h, params, order=order), f"you read the gate blocks as {', '.join(order)}; torch stacks them r, z, n.")
                for order in permuted_orders("rzn")]
    assert_cell_output("gru", got, gru64(x, h, params), hints, what=" with only gate biases")


# -- unroll ----------------------------------------------------------------------

@st.composite
def sequence_cases(draw, *, min_T=1, max_T=6, kinds=KINDS):
    return dict(kind=draw(st.sampled_from(kinds)), B=draw(st.integers(1, 3)), T=draw(st.integers(min_T, max_T)),
                D=draw(st.integers(1, 4)), H=draw(st.integers(1, 4)), bias=draw(st.booleans()),
                given_state=draw(st.booleans()))


def make_sequence(case, seed, *, dtype=torch.float32):
    """(params, xs (B, T, D), initial state or None)."""
    kind, B, T, D, H = case["kind"], case["B"], case["T"], case["D"], case["H"]
    params = cell_params(kind, D, H, case["bias"], seed)
    xs = randn((B, T, D), seed + 10, dtype=dtype)
    state = make_state(kind, (B, H), seed + 20, dtype=dtype) if case["given_state"] else None
    return params, xs, state


def unroll_hints(kind, params, xs, state):
    cell = torch_cell(kind, params)
    backwards, _ = unroll64(cell, xs.flip(1), state)
    hints = [(backwards, "the outputs run backwards in time: step t must read xs[:, t], t = 0 .. T-1."),
             (backwards.flip(1), "the sequence was run backwards: step t must read xs[:, t], t = 0 .. T-1.")]
    if state is not None:
        hints.append((unroll64(cell, xs, None)[0], "the given initial state was ignored (the run started from zeros)."))
    hints.append((unroll64(cell, xs, state, carry=False)[0],
                  "carry the state: step t starts from the state step t - 1 returned, not from the initial state."))
    return hints


def assert_final_state(kind, got, expected, *, hints=(), what="final_state"):
    if kind == "lstm":
        if isinstance(got, torch.Tensor) and got.shape == expected[0].shape and not differ(got, expected[0], atol=1e-5, rtol=1e-4):
            raise AssertionError(with_hint(f"{what} must be a tuple (h, c); got a tensor, the last h", LSTM_FINAL))
        h, c = as_pair(got, what)
        assert_close(h, expected[0], what=f"{what}'s h", hints=[(w[0], t) for w, t in hints])
        assert_close(c, expected[1], what=f"{what}'s c", hints=[(w[1], t) for w, t in hints])
    else:
        assert_close(got, expected, what=what, hints=list(hints))


@pytest.mark.points(2)
@given(case=sequence_cases(), seed=seeds)
def test_unroll_equals_stepping_by_hand(subject, case, seed):
    """unroll's outputs are the h of every step of the cell, stepped by hand (with torch's cells)"""
    # Checks: R8.
    kind = case["kind"]
    params, xs, state = make_sequence(case, seed)
    outputs, _ = run_unroll(subject, trusted_cell(kind, case["D"], case["H"], case["bias"], params), xs, state)
    expected, _ = unroll64(torch_cell(kind, params), xs, state)
    assert_close(outputs, expected, what="unroll's outputs", hints=lambda: unroll_hints(kind, params, xs, state))


@pytest.mark.points(2)
@given(case=sequence_cases(), seed=seeds)
def test_unroll_matches_torch_sequence_modules(subject, case, seed):
    """unroll with a cell equals torch.nn.RNN / LSTM / GRU (batch_first=True) with the same weights"""
    # Checks: R8, R9.
    kind = case["kind"]
    params, xs, state = make_sequence(case, seed)
    outputs, final = run_unroll(subject, trusted_cell(kind, case["D"], case["H"], case["bias"], params), xs, state)
    want_out, want_final = sequence_reference(kind, params, xs, state)
    assert_close(outputs, want_out, what="unroll's outputs", hints=lambda: unroll_hints(kind, params, xs, state))
    assert_final_state(kind, final, want_final)


BPTT_CUT = ("the state is detached between steps, which cuts backpropagation through time: no gradient reaches "
            "earlier steps. Carry the state itself from step to step.")


@pytest.mark.points(2)
@settings(max_examples=20)
@given(case=sequence_cases(min_T=2), seed=seeds, with_final=st.booleans())
def test_unroll_gradients_match_torch_sequence_modules(subject, case, seed, with_final):
    """gradients through unroll with respect to xs and the initial state equal those of torch.nn.RNN / LSTM / GRU (batch_first=True) with the same weights, d outputs[:, -1] / d xs[:, 0] included (backpropagation runs through every step)"""
    # Checks: R8, R9.
    kind, B, T, H = case["kind"], case["B"], case["T"], case["H"]
    params, xs, state = make_sequence(case, seed)
    args = (trusted_cell(kind, case["D"], H, case["bias"], params), xs) + (() if state is None else (state,))
    # Only outputs[:, -1] sends gradient: it reaches xs[:, 0] only through every step's state.
    last = torch.zeros(B, T, H)
    last[:, -1] = randn((B, H), seed + 30)
    result = subject.run(Call(subject.unit, "unroll", args, grad_outputs=(last, None)))
    want_out, _ = sequence_reference(kind, params, xs, state)
    assert_close(result.output[0], want_out, what="unroll's outputs", hints=lambda: unroll_hints(kind, params, xs, state))
    want, _ = unroll_grads64(kind, params, xs, state, last)
    assert_close(result.arg_grads[1][:, 0], want[:, 0], atol=1e-4, rtol=1e-3,
                 what="the gradient of outputs[:, -1] with respect to xs[:, 0]",
                 hints=lambda: [(unroll_grads64(kind, params, xs, state, last, truncated=True)[0][:, 0], BPTT_CUT)])
    # Random upstream gradients on every output (and the final state): every input gets its own check.
    g_out = randn((B, T, H), seed + 31)
    g_final = upstream_like(kind, (B, H), seed + 32) if with_final else None
    result = subject.run(Call(subject.unit, "unroll", args, grad_outputs=(g_out, g_final)))
    want_xs, want_state = unroll_grads64(kind, params, xs, state, g_out, g_final)
    cut_xs, cut_state = unroll_grads64(kind, params, xs, state, g_out, g_final, truncated=True)
    checks = [("xs", result.arg_grads[1], want_xs, cut_xs)]
    if state is not None:
        names = ("h", "c") if kind == "lstm" else ("h",)
        checks += zip([f"the initial {n}" for n in names], flat(result.arg_grads[2]), flat(want_state), flat(cut_state))
    for name, got, expected, cut in checks:
        assert_close(got, expected, atol=1e-4, rtol=1e-3, what=f"the gradient of unroll's outputs with respect to {name}",
                     hints=[(cut, BPTT_CUT)])


@pytest.mark.points(1)
@given(case=sequence_cases(min_T=2), seed=seeds, data=st.data())
def test_unroll_is_causal(subject, case, seed, data):
    """unroll is causal: changing xs[:, t:] leaves outputs[:, :t] unchanged"""
    # Checks: R8.
    kind = case["kind"]
    t = data.draw(st.integers(1, case["T"] - 1), label="t")
    params, xs, state = make_sequence(case, seed)
    changed = xs.clone()
    changed[:, t:] += randn(changed[:, t:].shape, seed + 30, scale=3.0)
    cell = trusted_cell(kind, case["D"], case["H"], case["bias"], params)
    before, _ = run_unroll(subject, cell, xs, state)
    after, _ = run_unroll(subject, cell, changed, state)
    check_tensor(after, shape=(case["B"], case["T"], case["H"]), what="unroll's outputs")
    # Constants are causal too: the outputs must also be right.
    assert_close(before, unroll64(torch_cell(kind, params), xs, state)[0], what="unroll's outputs")
    assert_close(after[:, :t], before[:, :t], atol=1e-6, what=f"outputs[:, :{t}] after changing xs[:, {t}:]")


@pytest.mark.points(2)
@given(case=sequence_cases(max_T=4), T2=st.integers(1, 4), seed=seeds)
def test_unroll_resumes_from_a_state(subject, case, T2, seed):
    """two sequences run back to back (the second from the first's final state) equal their concatenation run at once"""
    # Checks: R8, R9.
    kind = case["kind"]
    params, first, state = make_sequence(case, seed)
    second = randn((case["B"], T2, case["D"]), seed + 40)
    cell = trusted_cell(kind, case["D"], case["H"], case["bias"], params)
    whole, whole_final = run_unroll(subject, cell, torch.cat([first, second], dim=1), state)
    out1, final1 = run_unroll(subject, cell, first, state)
    if kind == "lstm":
        as_pair(final1, "unroll's final_state for an LSTM cell")
    out2, final2 = run_unroll(subject, cell, second, final1)
    check_tensor(out1, shape=(case["B"], case["T"], case["H"]), what="unroll's outputs on the first part")
    check_tensor(out2, shape=(case["B"], T2, case["H"]), what="unroll's outputs on the second part")
    fresh, _ = unroll64(torch_cell(kind, params), second, None)
    assert_close(whole, unroll64(torch_cell(kind, params), torch.cat([first, second], dim=1), state)[0],
                 what="unroll's outputs on both parts at once")  # constants resume too
    assert_close(out2, whole[:, case["T"]:], what="the outputs of the second part, resumed from the first part's final state",
                 hints=[(fresh, "the state passed to unroll was ignored: the second part started from zeros.")])
    assert_close(out1, whole[:, :case["T"]], what="the outputs of the first part")
    assert_final_state(kind, final2, whole_final, what="the final state after both parts")


@pytest.mark.points(1)
@given(case=sequence_cases(), seed=seeds)
def test_unroll_final_state_is_the_last_step(subject, case, seed):
    """unroll's final_state is what the cell returned at the last step (h, or (h, c) for an LSTM)"""
    # Checks: R9.
    kind = case["kind"]
    params, xs, state = make_sequence(case, seed)
    outputs, final = run_unroll(subject, trusted_cell(kind, case["D"], case["H"], case["bias"], params), xs, state)
    check_tensor(outputs, shape=(case["B"], case["T"], case["H"]), what="unroll's outputs")
    cell = torch_cell(kind, params)
    _, expected = unroll64(cell, xs, state)
    _, after_first = unroll64(cell, xs[:, :1], state)
    # (Returning the initial state is no proven bug: with state None it is None, like returning nothing.)
    hints = [(after_first, "final_state is the state after the first step; it must be the state after the last one.")]
    assert_final_state(kind, final, expected, hints=hints)
    assert_close(final[0] if kind == "lstm" else final, outputs[:, -1].double(), what="final_state's h vs outputs[:, -1]")


@pytest.mark.points(1)
@settings(max_examples=10)
@given(case=sequence_cases(), seed=seeds)
def test_unroll_with_own_cells_matches_torch(subject, case, seed):
    """unroll with this unit's own RNNCell / LSTMCell / GRUCell equals torch.nn.RNN / LSTM / GRU"""
    # Checks: R8.
    kind = case["kind"]
    params, xs, state = make_sequence(case, seed)
    outputs, final = run_unroll(subject, student_cell(kind, case["D"], case["H"], case["bias"], params), xs, state)
    want_out, want_final = sequence_reference(kind, params, xs, state)
    assert_close(outputs, want_out, what="unroll's outputs with your own cell")
    assert_final_state(kind, final, want_final, what="final_state with your own cell")


# -- gradient_norms --------------------------------------------------------------

def one_sequence(case, seed):
    case = dict(case, B=1)
    return make_sequence(case, seed)


@pytest.mark.points(3)
@settings(max_examples=15)
@given(case=sequence_cases(), seed=seeds)
def test_gradient_norms_match_autograd_jacobians(subject, case, seed):
    """gradient_norms[t-1] is the Frobenius norm of the autograd Jacobian d h_T / d h_t"""
    # Checks: R10.
    kind = case["kind"]
    params, xs, state = one_sequence(case, seed)
    got = run_norms(subject, trusted_cell(kind, case["D"], case["H"], case["bias"], params), xs, state)
    expected = jacobian_norms64(kind, params, xs, state)
    assert_close(got, expected, atol=1e-5, rtol=1e-4, what="gradient_norms", hints=lambda: [
        (expected.flip(0), "the norms are reversed: entry t-1 is for d h_T / d h_t, so the last entry is sqrt(H)."),
        (expected ** 2, "those are squared Frobenius norms: take the square root."),
        (jacobian_norms64(kind, params, xs, state, wrt="x"), "those are the norms of d h_T / d x_t (the inputs); use the hidden states h_t."),
        (jacobian_norms64(kind, params, xs, state, ord=2), "those are spectral norms; use the Frobenius norm (the root of the sum of squares)."),
    ])


@pytest.mark.points(1)
@given(case=sequence_cases(), seed=seeds)
def test_gradient_norms_last_entry_is_sqrt_hidden(subject, case, seed):
    """gradient_norms has one entry per step and the last is sqrt(H), the norm of the identity d h_T / d h_T"""
    # Checks: R10.
    kind, H = case["kind"], case["H"]
    params, xs, state = one_sequence(case, seed)
    got = check_tensor(run_norms(subject, trusted_cell(kind, case["D"], H, case["bias"], params), xs, state),
                       shape=(case["T"],), what="gradient_norms")
    assert_close(got[-1], torch.tensor(math.sqrt(H), dtype=torch.float64), what="the last entry of gradient_norms",
                 hints=[(torch.tensor(float(H)), "that is H: the squared norm; take the square root.")])
    assert_close(got, jacobian_norms64(kind, params, xs, state), what="gradient_norms")  # a constant sqrt(H) ends right too


@pytest.mark.points(2)
@given(T=st.integers(2, 8), D=st.integers(1, 4), H=st.integers(1, 5), seed=seeds)
def test_gradient_norms_decay_for_a_contractive_rnn(subject, T, D, H, seed):
    """for a tanh RNN with ||W_hh||_2 = 0.5, each step back at least halves gradient_norms (the signal fades)"""
    # Checks: R10.
    params = cell_params("rnn_tanh", D, H, True, seed)
    w = params["weight_hh"].double()
    params["weight_hh"] = (w * (0.5 / torch.linalg.matrix_norm(w, ord=2))).float()
    xs = randn((1, T, D), seed + 10)
    norms = check_tensor(run_norms(subject, trusted_cell("rnn_tanh", D, H, True, params), xs), shape=(T,), what="gradient_norms")
    for t in range(T - 1):
        near, far = float(norms[t + 1]), float(norms[t])
        if not far <= 0.5 * near * (1 + 1e-3) + 1e-7:
            raise AssertionError(
                f"with ||W_hh||_2 = 0.5, ||d h_T / d h_t|| must at least halve per step back, but entry {t + 1} "
                f"(t = {t + 1}) is {far:.4g} and entry {t + 2} is {near:.4g}."
                + (" Hint: the norms grow with distance: are they reversed?" if far > near else "")
            )


# -- dtypes, devices ------------------------------------------------------------

def roughly(got, expected, what):
    """``assert_roughly`` on the values: a tensor holding as many numbers as ``expected`` is compared in
    ``expected``'s shape (shapes are the value properties' to judge)."""
    if isinstance(got, torch.Tensor) and got.numel() == expected.numel():
        got = got.reshape(expected.shape)
    assert_roughly(got, expected, what=what)


def as_float32(value):
    """``value`` (a tensor, a tuple of them, or None) in float32."""
    if isinstance(value, (tuple, list)):
        return tuple(as_float32(v) for v in value)
    return None if value is None else value.float()


@pytest.mark.points(2)
@pytest.mark.aspect("dtype")
@settings(max_examples=12)
@given(kind=st.sampled_from(KINDS), D=st.integers(1, 4), H=st.integers(1, 4), batch=batches, given_state=st.booleans(),
       T=st.integers(1, 4), dtype=st.sampled_from([torch.float64, torch.bfloat16]), seed=seeds)
def test_dtype_is_preserved(subject, kind, D, H, batch, given_state, T, dtype, seed):
    """float64 and bfloat16 give results of the same dtype (cells, unroll and gradient_norms) equal to the float32 ones within that dtype's precision (cell outputs in float64 computed in float64), and the last gradient norm is the float32 one"""
    # Checks: G3, G4, G7.
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float64 else dict(atol=2e-2, rtol=2e-2)
    params = cell_params(kind, D, H, True, seed)
    args = step_args(kind, batch, D, H, seed + 10, given_state, dtype=dtype)
    # The plain path: float32, with the parameters and inputs this dtype holds (bfloat16 rounds them).
    rounded = {k: v.to(dtype).float() for k, v in params.items()}
    plain = subject.run(Call(subject.unit, student_cell(kind, D, H, True, rounded), as_float32(args))).output
    roughly(flat(plain)[0], flat(cell_reference(kind, rounded, as_float32(args))[0])[0], f"{CLASS[kind]}'s h' in float32")
    cell = student_cell(kind, D, H, True, params)
    call = Call(subject.unit, cell, args, dtype=dtype)
    given = Call(subject.unit, cell, (args[0], make_state(kind, (*lead(batch), H), seed, dtype=dtype)), dtype=dtype)
    got = (subject.run(call) if given_state else run_with_default_state(subject, call, given)).output
    for g in flat(got):
        check_tensor(g, dtype=dtype, what=f"{CLASS[kind]}'s output for {dtype} inputs")
    assert_cell_output(kind, got, plain, what=f" in {dtype} against float32", **tol)
    if dtype == torch.float64:
        right = cell_reference(kind, params, args)[0]
        for name, g, r in zip(("h'", "c'"), flat(got), flat(right)):
            assert_computed_in_float64(g, r, f"{name} in {dtype}")
    # unroll and gradient_norms, with torch's cell made in the dtype.
    xs = randn((1, T, D), seed + 30, dtype=dtype)
    outputs, final = run_unroll(subject, trusted_cell(kind, D, H, True, params, dtype=dtype), xs)
    check_tensor(outputs, shape=(1, T, H), dtype=dtype, what=f"unroll's outputs for {dtype} inputs")
    norms = run_norms(subject, trusted_cell(kind, D, H, True, params, dtype=dtype), xs)
    try:
        check_tensor(norms, shape=(T,), dtype=dtype, what=f"gradient_norms for {dtype} inputs")
    except AssertionError as error:
        if isinstance(norms, torch.Tensor) and norms.dtype == torch.float32 and norms.shape == (T,):
            raise hinted(error, NORMS_DTYPE) from None
        raise
    plain_norms = check_tensor(run_norms(subject, trusted_cell(kind, D, H, True, params), xs.float()), shape=(T,),
                               what="gradient_norms in float32")
    assert_roughly(plain_norms, jacobian_norms64(kind, params, xs.float()), what="gradient_norms in float32")
    assert_close(norms[-1], plain_norms[-1], what=f"the last entry of gradient_norms in {dtype} against float32", **tol)


@pytest.mark.points(2)
@pytest.mark.aspect("device")
@settings(max_examples=5)
@given(kind=st.sampled_from(KINDS), D=sizes, H=sizes, B=st.integers(1, 3), T=st.integers(1, 4), seed=seeds)
def test_runs_on_meta_device(subject, kind, D, H, B, T, seed):
    """the whole unit runs on the meta device (zero states are created on the input's device), giving the shapes of the CPU calls"""
    # Checks: G3, G4.
    meta = dict(device="meta")
    params = cell_params(kind, D, H, True, seed)
    cell = student_cell(kind, D, H, True, params)
    for batch in (B, None):
        for given_state in (False, True):
            args = step_args(kind, batch, D, H, seed + 10, given_state)
            plain = subject.run(Call(subject.unit, cell, args)).output
            roughly(flat(plain)[0], flat(cell_reference(kind, params, args)[0])[0], f"{CLASS[kind]}'s h' on the CPU")
            call = Call(subject.unit, cell, args, **meta)
            given = Call(subject.unit, cell, step_args(kind, batch, D, H, seed + 10, True), **meta)
            out = (subject.run(call) if given_state else run_with_default_state(subject, call, given)).output
            for name, g, p in zip(("h'", "c'"), flat(out), flat(plain)):
                check_tensor(g, shape=p.shape, device_type="meta",
                             what=f"{CLASS[kind]}'s {name} on meta ({'unbatched' if batch is None else 'batched'}, state {'given' if given_state else 'None'})")
    xs = randn((1, T, D), seed + 20)
    plain, _ = run_unroll(subject, cell, xs)
    outputs, _ = run_unroll(subject, cell, xs, **meta)
    check_tensor(outputs, shape=check_tensor(plain, what="unroll's outputs on the CPU").shape, device_type="meta",
                 what="unroll's outputs on meta")
    plain = check_tensor(run_norms(subject, cell, xs), what="gradient_norms on the CPU")
    norms = run_norms(subject, cell, xs, **meta)
    check_tensor(norms, shape=plain.shape, device_type="meta", what="gradient_norms on meta")


@pytest.mark.points(0)
@pytest.mark.aspect("device")
@settings(max_examples=5)
@given(kind=st.sampled_from(KINDS), D=sizes, H=sizes, B=st.integers(1, 3), T=st.integers(1, 4), seed=seeds)
def test_cpu_and_cuda_agree(subject, kind, D, H, B, T, seed):
    """CPU and CUDA give the same result (TF32 off); informational, worth no points"""
    # Checks: G4.
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    params = cell_params(kind, D, H, True, seed)
    cell = student_cell(kind, D, H, True, params)
    args = step_args(kind, B, D, H, seed + 10, True)
    cpu = subject.run(Call(subject.unit, cell, args)).output
    roughly(flat(cpu)[0], flat(cell_reference(kind, params, args)[0])[0], f"{CLASS[kind]}'s h' on the CPU")
    cuda = subject.run(Call(subject.unit, cell, args, device="cuda")).output
    check_tensor(flat(cuda)[0], device_type="cuda", what=f"{CLASS[kind]}'s output of a CUDA call")
    assert_cell_output(kind, tuple(t.cpu() for t in cuda) if kind == "lstm" else cuda.cpu(), cpu, what=" on CUDA")
    xs = randn((1, T, D), seed + 20)
    out_cpu, _ = run_unroll(subject, cell, xs)
    out_cuda, _ = run_unroll(subject, cell, xs, device="cuda")
    assert_close(out_cuda.cpu(), out_cpu, what="unroll's outputs on CUDA")
    norms_cpu = run_norms(subject, cell, xs)
    norms_cuda = run_norms(subject, cell, xs, device="cuda")
    assert_close(norms_cuda.cpu(), norms_cpu, what="gradient_norms on CUDA")


# -- contract and gradients --------------------------------------------------------

@pytest.mark.points(2)
@pytest.mark.aspect("errors")
@given(kind=st.sampled_from(KINDS), D=sizes, H=sizes, B=st.integers(1, 3), extra=st.integers(1, 3), seed=seeds)
def test_bad_shapes_raise_value_error(subject, kind, D, H, B, extra, seed):
    """a wrong input or state width or a state of another batch size raises ValueError naming both sizes; an x of the wrong rank, an unknown nonlinearity, and xs of the wrong rank for unroll or gradient_norms raise ValueError"""
    # Checks: G8, R3.
    cell = student_cell(kind, D, H, True, cell_params(kind, D, H, True, seed))

    def call(*args):
        return Call(subject.unit, cell, args)

    x = randn((B, D), seed)
    raises_with_advice(subject, call(randn((B, D + extra), seed)), INPUT_WIDTH, call(x), mentions=(D, D + extra))
    assert_raises(subject.run, call(randn((B, 2, D), seed)), "ValueError")
    wide = randn((B, H + extra), seed + 1)
    good = randn((B, H), seed + 2)
    if kind == "lstm":
        assert_raises(subject.run, call(x, (wide, good)), "ValueError", mentions=(H, H + extra))
        assert_raises(subject.run, call(x, (good, wide)), "ValueError", mentions=(H, H + extra))
    else:
        assert_raises(subject.run, call(x, wide), "ValueError", mentions=(H, H + extra))
    assert_raises(subject.run, call(x, make_state(kind, (B + extra, H), seed + 3)), "ValueError", mentions=(B, B + extra))
    if kind.startswith("rnn"):
        bad = New("RNNCell", (D, H), {"nonlinearity": "sigmoid"})
        assert_raises(subject.run, Call(subject.unit, bad, (x,)), "ValueError")
    trusted = trusted_cell(kind, D, H, True, cell_params(kind, D, H, True, seed))
    xs = randn((1, 2, D), seed)
    for function in ("unroll", "gradient_norms"):
        raises_with_advice(subject, Call(subject.unit, function, (trusted, randn((3,), seed))), SEQUENCE_RANK,
                           Call(subject.unit, function, (trusted, xs)))
    raises_with_advice(subject, Call(subject.unit, "unroll", (trusted, randn((1, 1, 2, D), seed))), SEQUENCE_RANK,
                       Call(subject.unit, "unroll", (trusted, xs)))


@pytest.mark.points(2)
@settings(max_examples=5)
@given(D=st.integers(1, 4), H=st.integers(1, 4), batch=batches, bias=st.booleans(), seed=seeds)
def test_cell_gradients_match_finite_differences(subject, D, H, batch, bias, seed):
    """each cell's float64 output is right to float64 precision, and its gradients with respect to x (and h, for RNNCell and GRUCell) agree with finite differences (float64 gradcheck)"""
    # Checks: R3, R4, R6, G7.
    for kind in KINDS:
        gradcheck_cell(subject, kind, D, H, batch, bias, seed)


def gradcheck_cell(subject, kind, D, H, batch, bias, seed):
    params = cell_params(kind, D, H, bias, seed)
    x, state = step_args(kind, batch, D, H, seed + 10, True, dtype=torch.float64)
    cell = student_cell(kind, D, H, bias, params)
    if kind == "lstm":
        # The engine's gradcheck takes flat tensors: vary x (the state's gradients are checked against torch).
        def build(tensors, grad_outputs):
            return Call(subject.unit, cell, (*tensors, state), dtype=torch.float64, grad_outputs=grad_outputs)
        tensors = [x]
    else:
        def build(tensors, grad_outputs):
            return Call(subject.unit, cell, tuple(tensors), dtype=torch.float64, grad_outputs=grad_outputs)
        tensors = [x, state]
    try:
        expected = cell_reference(kind, params, (x, state))[0]
        check_gradients_of(subject, build, tensors, seed=seed, expect=lambda base: assert_cell_output(
            kind, base, expected, **tolerance(torch.float64)))
    except AssertionError as error:
        name = CLASS[kind] + (f"(nonlinearity={kind.removeprefix('rnn_')!r})" if kind.startswith("rnn") else "")
        raise AssertionError(f"{name}: {error}") from None


@pytest.mark.points(1)
@pytest.mark.aspect("layout")
@given(kind=st.sampled_from(KINDS), D=sizes, H=sizes, B=st.integers(1, 3), T=st.integers(1, 4), seed=seeds)
def test_noncontiguous_inputs_left_unmodified(subject, kind, D, H, B, T, seed):
    """non-contiguous inputs give the contiguous inputs' results, and no input (x, h, c, xs) is modified in place"""
    # Checks: G6.
    params = cell_params(kind, D, H, True, seed)
    args = step_args(kind, B, D, H, seed + 10, True)
    cell = student_cell(kind, D, H, True, params)
    plain = subject.run(Call(subject.unit, cell, args)).output
    roughly(flat(plain)[0], flat(cell_reference(kind, params, args)[0])[0], f"{CLASS[kind]}'s h' for contiguous inputs")
    result = subject.run(Call(subject.unit, cell, args, noncontiguous=True))
    try:
        assert_unmodified(result)
    except AssertionError as error:
        raise hinted(error, IN_PLACE) from None
    assert_cell_output(kind, result.output, plain, what=" for non-contiguous inputs against contiguous ones")
    xs = randn((B, T, D), seed + 20)
    state = make_state(kind, (B, H), seed + 30)
    plain, _ = run_unroll(subject, trusted_cell(kind, D, H, True, params), xs, state)
    assert_roughly(plain, unroll64(torch_cell(kind, params), xs, state)[0], what="unroll's outputs for contiguous inputs")
    result = subject.run(Call(subject.unit, "unroll", (trusted_cell(kind, D, H, True, params), xs, state), noncontiguous=True))
    assert_unmodified(result)
    assert_close(result.output[0], plain, what="unroll's outputs for non-contiguous inputs against contiguous ones")
