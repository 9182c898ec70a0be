"""Public tests for unit 4: run them with `attn-course check positional_encoding`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.compare import assert_close, check_tensor
from autograder.subject import Call, New

pytestmark = pytest.mark.unit("positional_encoding")


def run(subject, target, *args, **kwargs):
    return subject.run(Call("positional_encoding", target, args, kwargs)).output


@pytest.mark.points(1)
def test_sinusoidal_table_two_by_four(subject):
    """sinusoidal_encoding(2, 4) is [[0, 1, 0, 1], [sin 1, cos 1, sin 0.01, cos 0.01]]"""
    # dim = 4: pair 0 turns at 10000^0 = 1, pair 1 at 10000^(-2/4) = 1/100.
    expected = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                             [math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)]])
    got = check_tensor(run(subject, "sinusoidal_encoding", 2, 4), shape=(2, 4), dtype=torch.float32,
                       what="sinusoidal_encoding(2, 4)")
    assert_close(got, expected, what="sinusoidal_encoding(2, 4)")


@pytest.mark.points(1)
def test_module_adds_the_table_to_zeros(subject):
    """SinusoidalPositionalEncoding(4)(zeros) is the table, and offset=1 starts one row later"""
    zeros = torch.zeros(1, 2, 4)
    table = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                          [math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)]])
    got = subject.run(Call("positional_encoding", New("SinusoidalPositionalEncoding", (4,)), (zeros,))).output
    assert_close(got, table.unsqueeze(0), what="SinusoidalPositionalEncoding(4)(zeros(1, 2, 4))")
    shifted = subject.run(Call("positional_encoding", New("SinusoidalPositionalEncoding", (4,)), (zeros[:, :1],),
                               {"offset": 1})).output
    assert_close(shifted, table[1:].unsqueeze(0), what="SinusoidalPositionalEncoding(4)(zeros(1, 1, 4), offset=1)")


@pytest.mark.points(1)
def test_rope_rotates_the_first_pair(subject):
    """apply_rope turns (1, 0) at position 1 to (cos 1, sin 1), and leaves position 0 alone"""
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # (L=3, D=2)
    expected = torch.tensor([[1.0, 0.0], [math.cos(1.0), math.sin(1.0)], [-math.sin(2.0), math.cos(2.0)]])
    assert_close(run(subject, "apply_rope", x), expected, what="apply_rope(x) with D = 2")


@pytest.mark.points(1)
def test_rope_pairs_are_interleaved(subject):
    """apply_rope pairs features (0, 1) and (2, 3), not (0, 2) and (1, 3)"""
    x = torch.tensor([[[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]]])  # (1, L=2, D=4): e_2 twice
    t = 10000.0 ** (-2 / 4)  # pair 1 at position 1
    expected = torch.tensor([[[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, math.cos(t), math.sin(t)]]])
    got = check_tensor(run(subject, "apply_rope", x), shape=(1, 2, 4), what="apply_rope(x)")
    assert_close(got, expected, what="apply_rope of e_2 at positions 0 and 1")
