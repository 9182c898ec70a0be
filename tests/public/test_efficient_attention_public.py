"""Public tests for unit 6: run them with `attn-course check efficient_attention`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch

from autograder.testing.compare import assert_close, assert_raises, check_tensor
from autograder.core.protocol import Call, New

pytestmark = pytest.mark.unit("efficient_attention")


@pytest.mark.points(1)
def test_flash_one_query_two_tiles(subject):
    """one query, two keys in two tiles of one key: the output is softmax of the scaled scores times the values"""
    q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2, 2)
    v = torch.tensor([[[10.0], [20.0]]])  # (1, 2, 1)
    w = torch.softmax(torch.tensor([1.0, 0.0]) / math.sqrt(2.0), dim=0)
    got = subject.call("flash_attention", q, k, v, block_size=1)
    assert_close(got, (w @ torch.tensor([10.0, 20.0])).reshape(1, 1, 1), what="flash_attention(block_size=1)")


@pytest.mark.points(1)
def test_flash_equals_plain_attention(subject):
    """with is_causal and tiles of 2 that do not divide the lengths, the output is softmax(q k^T / sqrt(E)) v"""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, generator=gen) for _ in range(3))
    scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    expected = torch.softmax(scores, dim=-1) @ v  # sqrt(E) = 2
    assert_close(subject.call("flash_attention", q, k, v, is_causal=True, block_size=2), expected, what="output")


@pytest.mark.points(1)
def test_flash_fully_masked_row_gives_zeros(subject):
    """is_causal with L=2 queries and S=1 key: query 0 sees no key (zeros, not NaN), query 1 sees key 0"""
    q, k, v = torch.zeros(1, 2, 2), torch.zeros(1, 1, 2), torch.tensor([[[3.0, 4.0]]])
    got = subject.call("flash_attention", q, k, v, is_causal=True, block_size=1)
    assert_close(got, torch.tensor([[[0.0, 0.0], [3.0, 4.0]]]), what="output")


@pytest.mark.points(1)
def test_repeat_kv_groups_consecutive_heads(subject):
    """repeat_kv of heads [a, b] with 2 groups is [a, a, b, b]"""
    x = torch.tensor([1.0, 2.0]).reshape(1, 2, 1, 1)  # (B=1, Hkv=2, S=1, Dh=1)
    got = subject.call("repeat_kv", x, 2)
    assert_close(got, torch.tensor([1.0, 1.0, 2.0, 2.0]).reshape(1, 4, 1, 1), what="repeat_kv(x, 2)")


@pytest.mark.points(1)
def test_kv_cache_first_append(subject):
    """appending to an empty KVCache returns what was appended: the whole cache"""
    gen = torch.Generator().manual_seed(0)  # the same inputs on every run, so the same message
    k, v = torch.randn(1, 2, 3, 4, generator=gen), torch.randn(1, 2, 3, 5, generator=gen)
    keys, values = subject.run(Call(subject.unit, New("KVCache"), (k, v), method="append")).output
    assert_close(keys, k, what="keys")
    assert_close(values, v, what="values")


@pytest.mark.points(1)
def test_shapes(subject):
    """multi-query attention (1 kv head): output (B, L, E), and the cache holds (B, 1, L, Dh)"""
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    attn = New("GroupedQueryAttention", (8, 4, 1))
    check_tensor(subject.call(attn, x), shape=(2, 5, 8), what="output")
    out, keys, values = subject.call("decode_in_chunks", attn, x, [3, 1, 1])
    check_tensor(out, shape=(2, 5, 8), what="decoded output")
    check_tensor(keys, shape=(2, 1, 5, 2), what="the cache's keys")
    check_tensor(values, shape=(2, 1, 5, 2), what="the cache's values")


@pytest.mark.points(1)
def test_decode_token_by_token_equals_full_pass(subject):
    """with rotary positions, a prompt of 2 then 3 single tokens gives the outputs of one full causal pass"""
    x = torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(1))
    attn = New("GroupedQueryAttention", (8, 4, 2), {"rope_base": 10000.0})
    full = subject.call(attn, x)  # the same seeded weights in both calls
    out, _, _ = subject.call("decode_in_chunks", attn, x, [2, 1, 1, 1])
    # Equal to each other proves nothing if both are constant: the tokens must differ.
    assert (full - full[:, :1]).abs().max() > 1e-4, "the full pass gives every token the same output"
    assert_close(out, full, what="decoded output against the full pass")


@pytest.mark.points(1)
def test_bad_sizes_raise_value_error(subject):
    """num_heads=4 with num_kv_heads=3 raises ValueError naming both"""
    call = Call(subject.unit, New("GroupedQueryAttention", (8, 4, 3)), (torch.zeros(1, 2, 8),))
    assert_raises(subject.run, call, "ValueError", mentions=(4, 3))
