"""Public tests for unit 2: run them with `attn-course check attention`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.testing.compare import assert_close, assert_raises, assert_roughly, check_tensor
from autograder.core.protocol import Call

pytestmark = pytest.mark.unit("attention")


@pytest.mark.points(1)
def test_softmax_small_example(subject):
    """softmax([0, ln 2, ln 3]) is [1/6, 2/6, 3/6]"""
    # Checks: A1.
    x = torch.tensor([0.0, math.log(2.0), math.log(3.0)])
    assert_close(subject.call("softmax", x), torch.tensor([1.0, 2.0, 3.0]) / 6, what="softmax([0, ln 2, ln 3])")


@pytest.mark.points(1)
def test_causal_mask_three_by_three(subject):
    """causal_mask(3) is the lower triangle"""
    # Checks: A3, A4.
    got = check_tensor(subject.call("causal_mask", 3), shape=(3, 3), dtype=torch.bool, what="causal_mask(3)")
    assert torch.equal(got, torch.ones(3, 3, dtype=torch.bool).tril()), f"causal_mask(3) gave\n{got}"


@pytest.mark.points(1)
@pytest.mark.aspect("shape")
def test_attention_shapes(subject):
    """attention returns output (B, L, Ev) and weights (B, L, S)"""
    # Checks: A5.
    gen = torch.Generator().manual_seed(0)  # the same inputs on every run, so the same message
    q, k, v = torch.randn(2, 3, 4, generator=gen), torch.randn(2, 5, 4, generator=gen), torch.randn(2, 5, 6, generator=gen)
    out, weights = subject.call("scaled_dot_product_attention", q, k, v)
    check_tensor(out, shape=(2, 3, 6), what="output")
    check_tensor(weights, shape=(2, 3, 5), what="weights")


@pytest.mark.points(1)
def test_attention_hand_example(subject):
    """one query, two keys: the weights are softmax of the scaled scores"""
    # Checks: A5, A6.
    q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2, 2)
    v = torch.tensor([[[10.0, 1.0, 0.0], [20.0, 2.0, 0.0]]])  # (1, 2, 3): Ev = 3 is not E = 2, so the scale shows its width
    w = torch.softmax(torch.tensor([1.0, 0.0]) / math.sqrt(2.0), dim=0)
    out, weights = subject.call("scaled_dot_product_attention", q, k, v)
    # The hidden grade's advice for the bugs this case shows (its texts, word for word: test_hints).
    scaled = [(torch.softmax(torch.tensor([1.0, 0.0]) * s, dim=0).reshape(1, 1, 2), advice) for s, advice in (
        (1.0, "did you forget to divide the scores by sqrt(d_k)?"), (0.5, "the scale is 1/sqrt(E), not 1/E."),
        (1 / math.sqrt(3.0), "the scale is 1/sqrt(E), E the width of query and key, not Ev, the width of value."))]
    # A softmax over the queries: each key's one score normalized on its own.
    over_queries = (torch.ones(1, 1, 2), "softmax must normalize over the keys (the last dim), not over the queries.")
    assert_close(weights, w.reshape(1, 1, 2), what="weights", hints=[*scaled, over_queries])
    assert_close(out, (w @ v[0]).reshape(1, 1, 3), what="output")


# In the cases below the query is zero, so every score is 0 and each query
# spreads its weight evenly over the keys it may attend: the weights show
# exactly which keys each query sees.
def zero_query_case(L: int, S: int):
    """q = 0 (B=1, L, E=2); the values of key j are 10^j, so an output names its keys."""
    q, k = torch.zeros(1, L, 2), torch.arange(2.0 * S).reshape(1, S, 2)
    v = (10.0 ** torch.arange(float(S))).reshape(1, S, 1)
    return q, k, v


def check_even_weights(subject, L, S, expected_rows, hints=(), **kwargs):
    """``hints``: [(the weights' rows of a known bug, its advice)]."""
    q, k, v = zero_query_case(L, S)
    expected = torch.tensor(expected_rows).unsqueeze(0)  # (1, L, S)
    out, weights = subject.call("scaled_dot_product_attention", q, k, v, **kwargs)
    assert_close(weights, expected, what="weights", hints=[(torch.tensor(rows).unsqueeze(0), advice) for rows, advice in hints])
    assert_close(out, expected @ v, what="output")


@pytest.mark.points(1)
def test_bool_mask_true_means_may_attend(subject):
    """a bool attn_mask: True = may attend, False keys get zero weight"""
    # Checks: A7.
    mask = torch.tensor([[True, False, True], [False, True, False]])  # (L=2, S=3)
    reversed_polarity = ([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]], "True in a boolean mask means 'may attend', not 'masked out'.")
    check_even_weights(subject, 2, 3, [[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]], [reversed_polarity], attn_mask=mask)


@pytest.mark.points(1)
def test_float_mask_is_added_to_the_scores(subject):
    """a float attn_mask is added to the scores: adding [0, ln 2, ln 3] gives weights [1, 2, 3] / 6"""
    # Checks: A7.
    mask = torch.tensor([[0.0, math.log(2.0), math.log(3.0)]])  # (L=1, S=3)
    check_even_weights(subject, 1, 3, [[1 / 6, 2 / 6, 3 / 6]], attn_mask=mask)


@pytest.mark.points(1)
def test_causal_with_fewer_queries_than_keys_aligns_bottom_right(subject):
    """is_causal with L=2 queries and S=3 keys aligns bottom-right: query 0 sees keys 0-1, query 1 sees all 3"""
    # Checks: A8.
    want = torch.tensor([[True, True, False], [True, True, True]])
    got = check_tensor(subject.call("causal_mask", 2, 3), shape=(2, 3), dtype=torch.bool, what="causal_mask(2, 3)")
    assert torch.equal(got, want), f"causal_mask(2, 3) gave\n{got}\nexpected (query i sits at position i + S - L)\n{want}"
    check_even_weights(subject, 2, 3, [[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]], is_causal=True)


@pytest.mark.points(1)
def test_causal_and_mask_both_apply(subject):
    """is_causal and attn_mask combine: a key must be allowed by both"""
    # Checks: A8.
    mask = torch.tensor([[True, False, True]])  # (1, S=3): key 1 hidden from every query
    rows = [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.0, 0.5]]
    check_even_weights(subject, 3, 3, rows, attn_mask=mask, is_causal=True)


@pytest.mark.points(1)
def test_fully_masked_row_gives_zeros(subject):
    """a query with no key it may attend gets zero weights and a zero output (not NaN, not uniform)"""
    # Checks: A9.
    # Masking with a large finite number such as -1e9 instead of -inf gives
    # this row uniform weights [1/2, 1/2].
    mask = torch.tensor([[False, False], [True, False]])  # query 0 may attend nothing
    check_even_weights(subject, 2, 2, [[0.0, 0.0], [1.0, 0.0]], attn_mask=mask)


@pytest.mark.points(1)
def test_dropout_zero_is_deterministic(subject):
    """with dropout_p=0 nothing random happens: every seed gives softmax(q k^T / sqrt(E)) v"""
    # Checks: A11.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 8, 4, generator=gen) for _ in range(3))
    weights = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)  # sqrt(E) = 2
    for seed in (0, 1):
        call = Call(subject.unit, "scaled_dot_product_attention", (q, k, v), {"dropout_p": 0.0}, seed=seed)
        out, got = subject.run(call).output
        assert_close(got, weights, what=f"weights with dropout_p=0 (seed {seed})")
        assert_close(out, weights @ v, what=f"output with dropout_p=0 (seed {seed})")


@pytest.mark.points(1)
@pytest.mark.aspect("mode")
def test_dropout_zeroes_weights_and_rescales_the_rest(subject):
    """dropout_p=0.25 zeroes about a quarter of the weights and multiplies the others by 1 / (1 - 0.25), against your weights without dropout"""
    # Checks: A10.
    q, k, v = zero_query_case(40, 10)  # 400 weights, each 1/10 before dropout
    _, plain = subject.call("scaled_dot_product_attention", q, k, v)
    assert_roughly(plain, torch.full((1, 40, 10), 0.1), what="weights without dropout")
    _, weights = subject.run(Call(subject.unit, "scaled_dot_product_attention", (q, k, v),
                                  {"dropout_p": 0.25}, seed=0)).output
    weights = check_tensor(weights, shape=(1, 40, 10), what="weights")
    dropped = weights == 0
    assert 0.15 < dropped.float().mean() < 0.35, f"{dropped.float().mean():.0%} of the weights are zero, expected about 25%"
    assert_close(weights[~dropped], plain[~dropped] / 0.75, what="the surviving weights")


@pytest.mark.points(1)
def test_softmax_large_inputs_and_other_dims(subject):
    """softmax is finite for inputs of 1e4 and normalizes along the dim it is given"""
    # Checks: A1.
    x = torch.tensor([1e4, 1e4 + math.log(3.0)])
    assert_close(subject.call("softmax", x), torch.tensor([0.25, 0.75]), what="softmax([1e4, 1e4 + ln 3])")
    columns = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    assert_close(subject.call("softmax", columns, dim=0), torch.tensor([[0.25, 0.5], [0.75, 0.5]]),
                 what="softmax([[0, 0], [ln 3, 0]], dim=0)",
                 hints=[(torch.softmax(columns, dim=-1), "normalize along the `dim` argument, not always the last dim.")])


@pytest.mark.points(1)
def test_scale_argument_replaces_one_over_sqrt_e(subject):
    """scale=2 multiplies the scores by 2 instead of 1 / sqrt(E) (multiplies: dividing by it differs)"""
    # Checks: A6.
    q, k = torch.tensor([[[1.0, 0.0]]]), torch.tensor([[[math.log(3.0) / 2, 0.0], [0.0, 1.0]]])
    _, weights = subject.call("scaled_dot_product_attention", q, k, torch.zeros(1, 2, 1), scale=2.0)
    scores = torch.tensor([math.log(3.0) / 2, 0.0])
    ignored = torch.softmax(scores / math.sqrt(2.0), dim=0).reshape(1, 1, 2)  # 1/sqrt(E) kept
    assert_close(weights, torch.tensor([[[0.75, 0.25]]]), what="weights with scale=2",
                 hints=[(ignored, "the `scale` argument was ignored.")])


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
def test_wrong_widths_raise_value_error(subject):
    """query and key of different widths raise ValueError naming both sizes"""
    # Checks: G8.
    call = Call(subject.unit, "scaled_dot_product_attention", (torch.zeros(1, 2, 3), torch.zeros(1, 4, 5), torch.zeros(1, 4, 1)))
    assert_raises(subject.run, call, "ValueError", mentions=(3, 5))
