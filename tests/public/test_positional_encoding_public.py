"""Public tests for unit 4: run them with `attn-course check positional_encoding`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.testing.compare import assert_close, assert_raises, assert_roughly, check_tensor
from autograder.core.protocol import Call, New

pytestmark = pytest.mark.unit("positional_encoding")


@pytest.mark.points(1)
def test_sinusoidal_table_two_by_four(subject):
    """sinusoidal_encoding(2, 4) is [[0, 1, 0, 1], [sin 1, cos 1, sin 0.01, cos 0.01]]"""
    # Checks: P1.
    # dim = 4: pair 0 turns at 10000^0 = 1, pair 1 at 10000^(-2/4) = 1/100.
    expected = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                             [math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)]])
    got = check_tensor(subject.call("sinusoidal_encoding", 2, 4), shape=(2, 4), dtype=torch.float32,
                       what="sinusoidal_encoding(2, 4)")
    assert_close(got, expected, what="sinusoidal_encoding(2, 4)")


@pytest.mark.points(1)
@pytest.mark.aspect("dtype")
def test_bfloat16_table_at_position_1001(subject):
    """in bfloat16, row 1001 of sinusoidal_encoding(1002, 2) is the float32 table's row within bfloat16 tolerance"""
    # Checks: G4, G7.
    # bfloat16 holds 1000 and 1008 but not 1001: an angle computed in bfloat16 is sin(1000), far off.
    # Compared with your own float32 table (whose values the other tests check), anchored to [sin 1001, cos 1001].
    plain = check_tensor(subject.call("sinusoidal_encoding", 1002, 2), shape=(1002, 2),
                         what="sinusoidal_encoding(1002, 2)")[1001]
    assert_roughly(plain, torch.tensor([math.sin(1001.0), math.cos(1001.0)]), what="row 1001 of the float32 table")
    table = check_tensor(subject.call("sinusoidal_encoding", 1002, 2, dtype=torch.bfloat16), shape=(1002, 2),
                         dtype=torch.bfloat16, what="sinusoidal_encoding(1002, 2, dtype=torch.bfloat16)")
    angle = float(torch.tensor(1001.0, dtype=torch.bfloat16))
    assert_close(table[1001], plain, atol=2e-2, rtol=0.0,
                 what="row 1001 of the bfloat16 table against the float32 table's",
                 hints=[(torch.tensor([math.sin(angle), math.cos(angle)]),
                         "the angle position * frequency was computed in bfloat16, which cannot even hold position "
                         "1001: compute the angles in float32 (an upcast) and cast only the result.")])


@pytest.mark.points(1)
def test_module_adds_the_table_to_zeros(subject):
    """SinusoidalPositionalEncoding(4)(zeros) is the table, and offset=1 starts one row later"""
    # Checks: P2.
    zeros = torch.zeros(1, 2, 4)
    table = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                          [math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)]])
    got = subject.run(Call(subject.unit, New("SinusoidalPositionalEncoding", (4,)), (zeros,))).output
    assert_close(got, table.unsqueeze(0), what="SinusoidalPositionalEncoding(4)(zeros(1, 2, 4))")
    shifted = subject.run(Call(subject.unit, New("SinusoidalPositionalEncoding", (4,)), (zeros[:, :1],),
                               {"offset": 1})).output
    assert_close(shifted, table[1:].unsqueeze(0), what="SinusoidalPositionalEncoding(4)(zeros(1, 1, 4), offset=1)")


@pytest.mark.points(1)
def test_rope_rotates_the_first_pair(subject):
    """apply_rope turns (1, 0) at position 1 to (cos 1, sin 1), and leaves position 0 alone"""
    # Checks: P5.
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # (L=3, D=2)
    expected = torch.tensor([[1.0, 0.0], [math.cos(1.0), math.sin(1.0)], [-math.sin(2.0), math.cos(2.0)]])
    assert_close(subject.call("apply_rope", x), expected, what="apply_rope(x) with D = 2")


@pytest.mark.points(1)
def test_rope_pairs_are_interleaved(subject):
    """apply_rope pairs features (0, 1) and (2, 3), not (0, 2) and (1, 3)"""
    # Checks: P5.
    # Pair 0 turns at 10000^0 = 1 whatever the frequency formula, so only the pairing matters here.
    x = torch.tensor([[[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]])  # (1, L=2, D=4): e_1 twice
    expected = torch.tensor([[[0.0, 1.0, 0.0, 0.0], [-math.sin(1.0), math.cos(1.0), 0.0, 0.0]]])
    # The rotate-half layout pairs feature 1 with feature 3 (pair 1 of the halves, frequency 0.01).
    rotate_half = torch.tensor([[[0.0, 1.0, 0.0, 0.0], [0.0, math.cos(0.01), 0.0, math.sin(0.01)]]])
    got = check_tensor(subject.call("apply_rope", x), shape=(1, 2, 4), what="apply_rope(x)")
    assert_close(got, expected, what="apply_rope of e_1 at positions 0 and 1", hints=[
        (rotate_half, "pairs are interleaved, (x[2i], x[2i+1]) as in RoFormer and LLaMA; not (x[i], x[i + D/2]) "
                      "(the rotate-half layout).")])


@pytest.mark.points(1)
def test_rope_pair_frequency(subject):
    """apply_rope turns pair i at frequency 10000^(-2i/D): pair 1 of D = 4 turns by 0.01 per position"""
    # Checks: P5.
    x = torch.tensor([[[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]]])  # (1, L=2, D=4): e_2 twice
    t = 10000.0 ** (-2 / 4)  # pair 1 at position 1; the exponent i/D instead of 2i/D would give 0.1
    expected = torch.tensor([[[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, math.cos(t), math.sin(t)]]])
    got = check_tensor(subject.call("apply_rope", x), shape=(1, 2, 4), what="apply_rope(x)")
    assert_close(got, expected, what="apply_rope of e_2 at positions 0 and 1")


@pytest.mark.points(1)
def test_rope_explicit_positions(subject):
    """apply_rope with positions=[5, 0] turns the first token by 5 and leaves the second alone"""
    # Checks: P6.
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    expected = torch.tensor([[math.cos(5.0), math.sin(5.0)], [1.0, 0.0]])
    assert_close(subject.call("apply_rope", x, torch.tensor([5, 0])), expected, what="apply_rope(x, positions=[5, 0])")


@pytest.mark.points(1)
def test_base_argument(subject):
    """base=100 makes pair 1 of dim 4 turn at 100^(-2/4) = 0.1, in the table, the module and apply_rope"""
    # Checks: P1, P2, P5.
    row1 = torch.tensor([math.sin(1.0), math.cos(1.0), math.sin(0.1), math.cos(0.1)])
    table = check_tensor(subject.call("sinusoidal_encoding", 2, 4, base=100.0), shape=(2, 4), what="the table")
    assert_close(table[1], row1, what="sinusoidal_encoding(2, 4, base=100)[1]")
    module = New("SinusoidalPositionalEncoding", (4,), {"base": 100.0})
    got = subject.run(Call(subject.unit, module, (torch.zeros(1, 2, 4),))).output
    assert_close(got[0, 1], row1, what="SinusoidalPositionalEncoding(4, base=100)(zeros)[0, 1]")
    x = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    assert_close(subject.call("apply_rope", x, base=100.0)[1], torch.tensor([0.0, 0.0, math.cos(0.1), math.sin(0.1)]),
                 what="apply_rope(e_2, base=100) at position 1")


@pytest.mark.points(1)
def test_module_adds_to_x_and_keeps_the_table_out_of_state_dict(subject):
    """SinusoidalPositionalEncoding returns x + PE (x unscaled), and its table is not in state_dict"""
    # Checks: P2, P4.
    x = torch.full((1, 1, 4), 2.0)
    result = subject.run(Call(subject.unit, New("SinusoidalPositionalEncoding", (4,)), (x,), return_state=True))
    assert_close(result.output, torch.tensor([[[2.0, 3.0, 2.0, 3.0]]]), what="SinusoidalPositionalEncoding(4)(2 * ones(1, 1, 4))")
    assert not result.state, f"state_dict should be empty (the table is a non-persistent buffer), got {sorted(result.state)}"


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
def test_max_len_limits_the_positions(subject):
    """with max_len=3, offset + L = 3 fits and offset + L = 4 raises ValueError naming max_len"""
    # Checks: P3.
    module = New("SinusoidalPositionalEncoding", (2, 3))
    fits = subject.run(Call(subject.unit, module, (torch.zeros(1, 2, 2),), {"offset": 1})).output
    check_tensor(fits, shape=(1, 2, 2), what="offset=1, L=2 with max_len=3")
    assert_raises(subject.run, Call(subject.unit, module, (torch.zeros(1, 2, 2),), {"offset": 2}),
                  "ValueError", mentions=(3,))


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
def test_odd_dims_raise_value_error(subject):
    """an odd dim raises ValueError naming it, in sinusoidal_encoding and apply_rope"""
    # Checks: G8.
    assert_raises(subject.run, Call(subject.unit, "sinusoidal_encoding", (2, 5)), "ValueError", mentions=(5,))
    assert_raises(subject.run, Call(subject.unit, "apply_rope", (torch.zeros(2, 3),)), "ValueError", mentions=(3,))
