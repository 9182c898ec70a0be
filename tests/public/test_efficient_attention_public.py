"""Public tests for unit 6: run them with `attn-course check efficient_attention`.

They check a few hand-computed cases. Passing them is a good sign, not a
guarantee: the hidden properties test much more.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from autograder.testing.compare import assert_close, assert_raises, check_tensor
from autograder.core.protocol import Call, New

pytestmark = pytest.mark.unit("efficient_attention")
# The advice of the hidden grade, word for word, for the classic mistakes these cases show.
ACC_RESCALE = ("when a tile raises a row's running maximum from m_old to m_new, the running output acc must be rescaled "
               "by exp(m_old - m_new) before the tile's weights @ v are added to it: acc was not rescaled.")
SUM_RESCALE = ("when a tile raises a row's running maximum from m_old to m_new, the running sum l must be rescaled "
               "by exp(m_old - m_new) before the tile's exp(score - m_new) are added to it: l was not rescaled.")
NO_RESCALE = ("when a tile raises a row's running maximum from m_old to m_new, the running sum l and the running output "
              "acc must both be rescaled by exp(m_old - m_new) before the tile's terms are added: neither l nor acc was "
              "rescaled.")
RESTART = "positions continue after the cache: the new tokens sit at cache.length + arange(L), not at arange(L)."


@pytest.mark.points(1)
def test_flash_one_query_two_tiles(subject):
    """one query, two keys in two tiles of one key, the second scoring far higher (it raises the running max from 0 to 4.24): the output is softmax of the scaled scores times the values"""
    # Checks: E2.
    # Scaled scores 0 and 6 / sqrt(2): the second tile raises the running max m, so l and acc from the
    # first tile count only after they are rescaled by r = exp(m_old - m_new). The right answer is 19.86;
    # without that rescale it is 15.0 (neither), 10.1 (l alone) or 29.6 (acc alone).
    q = torch.tensor([[[2.0, 0.0]]])  # (1, 1, 2)
    k = torch.tensor([[[0.0, 1.0], [3.0, 0.0]]])  # (1, 2, 2)
    v = torch.tensor([[[10.0], [20.0]]])  # (1, 2, 1)
    w = torch.softmax(torch.tensor([0.0, 6.0]) / math.sqrt(2.0), dim=0)
    r = math.exp(-6.0 / math.sqrt(2.0))
    # After the second tile, without a rescale: acc = 10 + 20 (or 10 r + 20), l = 1 + 1 (or r + 1).
    wrong = [(30.0 / 2.0, NO_RESCALE), ((10.0 * r + 20.0) / 2.0, SUM_RESCALE), (30.0 / (r + 1.0), ACC_RESCALE)]
    got = subject.call("flash_attention", q, k, v, block_size=1)
    assert_close(got, (w @ torch.tensor([10.0, 20.0])).reshape(1, 1, 1), what="flash_attention(block_size=1)",
                 hints=[(torch.tensor(answer).reshape(1, 1, 1), text) for answer, text in wrong])


@pytest.mark.points(1)
def test_flash_equals_plain_attention(subject):
    """with is_causal and tiles of 2 that do not divide the lengths, the output is softmax(q k^T / sqrt(E)) v"""
    # Checks: E2.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, generator=gen) for _ in range(3))
    scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    expected = torch.softmax(scores, dim=-1) @ v  # sqrt(E) = 2
    assert_close(subject.call("flash_attention", q, k, v, is_causal=True, block_size=2), expected, what="output")


@pytest.mark.points(1)
def test_flash_fully_masked_row_gives_zeros(subject):
    """is_causal with L=2 queries and S=1 key: query 0 sees no key (zeros, not NaN), query 1 sees key 0"""
    # Checks: E3.
    q, k, v = torch.zeros(1, 2, 2), torch.zeros(1, 1, 2), torch.tensor([[[3.0, 4.0]]])
    got = subject.call("flash_attention", q, k, v, is_causal=True, block_size=1)
    assert_close(got, torch.tensor([[[0.0, 0.0], [3.0, 4.0]]]), what="output")


@pytest.mark.points(1)
def test_flash_very_negative_scores(subject):
    """one query whose two scores are -65536 and -65537 (float64, scale 1): the output is their softmax times the values, not zeros"""
    # Checks: E2.
    q = torch.tensor([[[256.0]]], dtype=torch.float64)  # (1, 1, 1)
    k = torch.tensor([[[-256.0], [-256.0 - 1 / 256]]], dtype=torch.float64)  # (1, 2, 1): scores -65536, -65537
    v = torch.tensor([[[10.0], [20.0]]], dtype=torch.float64)  # (1, 2, 1)
    w = 1 / (1 + math.exp(-1.0))  # the first key's weight: exp(0) / (exp(0) + exp(-1))
    got = subject.call("flash_attention", q, k, v, scale=1.0, block_size=1)
    assert_close(got, torch.tensor([[[10.0 * w + 20.0 * (1 - w)]]], dtype=torch.float64), dtype=torch.float64,
                 what="flash_attention of scores below -5e4 (start the running maximum at -inf)")


@pytest.mark.points(1)
def test_repeat_kv_groups_consecutive_heads(subject):
    """repeat_kv of heads [a, b] with 2 groups is [a, a, b, b]"""
    # Checks: E9.
    x = torch.tensor([1.0, 2.0]).reshape(1, 2, 1, 1)  # (B=1, Hkv=2, S=1, Dh=1)
    got = subject.call("repeat_kv", x, 2)
    assert_close(got, torch.tensor([1.0, 1.0, 2.0, 2.0]).reshape(1, 4, 1, 1), what="repeat_kv(x, 2)")


@pytest.mark.points(1)
def test_rotate_pairs_turns_interleaved_pairs(subject):
    """rotate_pairs turns the pair (x[0], x[1]) of a token at position 1 by 1 radian, and (x[2], x[3]) at position 2 by 2 / 100"""
    # Checks: E10.
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])  # (L=2, D=4): e_0, then e_2
    got = subject.call("rotate_pairs", x, torch.tensor([1, 2]))
    t = 2 * 10000.0 ** (-2 / 4)  # pair 1 turns at 10000^(-2i/D) = 1/100 per position
    expected = torch.tensor([[math.cos(1.0), math.sin(1.0), 0.0, 0.0], [0.0, 0.0, math.cos(t), math.sin(t)]])
    assert_close(got, expected, what="rotate_pairs(x, positions=[1, 2]) (interleaved pairs, as unit 4's apply_rope)")


@pytest.mark.points(1)
@pytest.mark.aspect("cache")
def test_kv_cache_buffers_stay_out_of_state_dict(subject):
    """a new KVCache holds no tensor (keys and values are None); after an append it returns them and its state_dict stays empty"""
    # Checks: E11, E12, E14.
    new = subject.run(Call(subject.unit, New("KVCache"), method="state_dict", return_state=True))
    held = sorted(name for name in (new.buffers or {}) if name in ("keys", "values"))
    assert not held, f"a new KVCache holds {held}: keys and values are None until the first append"
    gen = torch.Generator().manual_seed(2)
    k, v = torch.randn(1, 1, 2, 3, generator=gen), torch.randn(1, 1, 2, 3, generator=gen)
    result = subject.run(Call(subject.unit, New("KVCache"), (k, v), method="append", return_state=True))
    assert_close(result.output[0], k, what="keys")
    assert_close(result.output[1], v, what="values")
    assert not result.state, (f"state_dict should be empty (keys and values are non-persistent buffers), "
                              f"got {sorted(result.state)}")


@pytest.mark.points(1)
@pytest.mark.aspect("cache")
def test_kv_cache_first_append(subject):
    """appending to an empty KVCache returns what was appended: the whole cache"""
    # Checks: E14.
    gen = torch.Generator().manual_seed(0)  # the same inputs on every run, so the same message
    k, v = torch.randn(1, 2, 3, 4, generator=gen), torch.randn(1, 2, 3, 5, generator=gen)
    keys, values = subject.run(Call(subject.unit, New("KVCache"), (k, v), method="append")).output
    assert_close(keys, k, what="keys")
    assert_close(values, v, what="values")


@pytest.mark.points(1)
@pytest.mark.aspect("shape")
def test_shapes(subject):
    """multi-query attention (1 kv head): output (B, L, E), and the cache holds (B, 1, L, Dh)"""
    # Checks: E18, E25, E28.
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    attn = New("GroupedQueryAttention", (8, 4, 1))
    check_tensor(subject.call(attn, x), shape=(2, 5, 8), what="output")
    out, keys, values = subject.call("decode_in_chunks", attn, x, [3, 1, 1])
    check_tensor(out, shape=(2, 5, 8), what="decoded output")
    check_tensor(keys, shape=(2, 1, 5, 2), what="the cache's keys")
    check_tensor(values, shape=(2, 1, 5, 2), what="the cache's values")


def rotated(x, positions, base=10000.0):
    """Unit 4's rotary embedding of x (B, H, L, D): pair (2i, 2i+1) turns by positions * base**(-2i/D)."""
    D = x.shape[-1]
    angles = positions.double()[:, None] * base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (L, D/2)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], dim=-1).flatten(-2)


def restarted_decode(state, x, chunks, H, Hkv):
    """A known wrong decoding, in float64: every chunk's positions start again at 0 (the cache's offset forgotten)."""
    def project(t, name, heads):  # (B, T, E) -> (B, heads, T, Dh)
        y = F.linear(t.double(), state[f"{name}.weight"].double(), state[f"{name}.bias"].double())
        return y.unflatten(-1, (heads, -1)).transpose(1, 2)

    keys, values, outs, start = [], [], [], 0
    for size in chunks:
        part, positions = x[:, start:start + size], torch.arange(size)  # the bug: not start + arange(size)
        q = rotated(project(part, "q_proj", H), positions)
        keys.append(rotated(project(part, "k_proj", Hkv), positions))
        values.append(project(part, "v_proj", Hkv))
        k, v = (torch.cat(t, dim=2).repeat_interleave(H // Hkv, dim=1) for t in (keys, values))  # (B, H, S, Dh)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
            ~torch.ones(size, k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - size), float("-inf"))  # bottom-right
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        out = (weights / weights.sum(dim=-1, keepdim=True)) @ v  # (B, H, size, Dh)
        outs.append(F.linear(out.transpose(1, 2).flatten(2), state["out_proj.weight"].double(),
                             state["out_proj.bias"].double()))
        start += size
    return torch.cat(outs, dim=1).float()


@pytest.mark.points(1)
@pytest.mark.aspect("cache")
def test_decode_token_by_token_equals_full_pass(subject):
    """with rotary positions, a prompt of 2 then 3 single tokens gives the outputs of one full causal pass"""
    # Checks: E20, E27.
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 5, 8, generator=gen)
    sizes = {"q_proj": (8, 8), "k_proj": (4, 8), "v_proj": (4, 8), "out_proj": (8, 8)}  # 2 kv heads of width 2
    state = {}
    for name, shape in sizes.items():
        state[f"{name}.weight"] = torch.randn(shape, generator=gen) / math.sqrt(8)
        state[f"{name}.bias"] = torch.randn(shape[0], generator=gen) / 2
    attn = New("GroupedQueryAttention", (8, 4, 2), {"rope_base": 10000.0}, state=state)
    full = subject.call(attn, x)
    out, _, _ = subject.call("decode_in_chunks", attn, x, [2, 1, 1, 1])
    # Equal to each other proves nothing if both are constant: the tokens must differ.
    assert (full - full[:, :1]).abs().max() > 1e-4, "the full pass gives every token the same output"
    assert_close(out, full, what="decoded output against the full pass",
                 hints=[(restarted_decode(state, x, [2, 1, 1, 1], 4, 2), RESTART)])


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
def test_bad_sizes_raise_value_error(subject):
    """ValueError for num_heads=4 with num_kv_heads=3 (naming both), an odd head dim with rope_base, a 1-D key or unequal widths in flash_attention, disagreeing key and value in KVCache.append, chunk sizes [2, 0, 1] or [2, 2] for L = 3"""
    # Checks: E8, E15, E17, E29.
    call = Call(subject.unit, New("GroupedQueryAttention", (8, 4, 3)), (torch.zeros(1, 2, 8),))
    assert_raises(subject.run, call, "ValueError", mentions=(4, 3))
    odd = New("GroupedQueryAttention", (6, 2, 1), {"rope_base": 10000.0})  # head dim 3: no pairs to rotate
    assert_raises(subject.run, Call(subject.unit, odd, (torch.zeros(1, 2, 6),)), "ValueError")
    q, v = torch.zeros(1, 2, 4), torch.zeros(1, 3, 5)
    assert_raises(subject.run, Call(subject.unit, "flash_attention", (q, torch.zeros(4), v)), "ValueError")
    assert_raises(subject.run, Call(subject.unit, "flash_attention", (q, torch.zeros(1, 3, 6), v)), "ValueError")
    k4, v4 = torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4)  # 3 keys, 2 values
    assert_raises(subject.run, Call(subject.unit, New("KVCache"), (k4, v4), method="append"), "ValueError")
    x = torch.zeros(1, 3, 8)
    for sizes in ([2, 0, 1], [2, 2]):
        call = Call(subject.unit, "decode_in_chunks", (New("GroupedQueryAttention", (8, 4, 2)), x, sizes))
        assert_raises(subject.run, call, "ValueError")
