"""Hidden properties of unit 4, positional encodings (sinusoidal table and RoPE).

Each test's docstring is the property students read; its points are marked.
Tests reach the student's code only through ``subject``.

Tolerances admit any correct float32 computation of the angles (course API
page): a float32 angle ``p * w`` is off by about 1e-7 * p, so float32 value checks
scale their ``atol`` with the largest position (``table_atol``). The precision
policy is the API page's, as in every unit: float64 is computed in float64 (a
float32 computation cast up is told so), and bfloat16 is within bfloat16 tolerance
of the code's own float64 results, at positions up to 4000 too (so the angles must
not be computed in bfloat16); the gradients are held to float64 precision.

Decisions where the API page is silent:
  * the module's table buffer may have any name; it is found as the buffer
    holding max_len * dim numbers, shaped (max_len, dim) or (1, max_len, dim);
  * the module is called on 3-D x (B, L, dim) only, as the page writes it;
  * gradients are checked exactly, not by finite differences: both maps are
    linear in x (apply_rope's gradient is the upstream gradient rotated by
    -positions, the module's is the identity).

Side properties (marked ``aspect``: devices, dtypes, layouts, argument checks, the
buffer's structure) compare the code with itself on the plain path (float32 or float64
on the CPU, contiguous inputs) and anchor that path with ``assert_roughly``, so a bug
in the values fails the value properties only.
"""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from autograder.testing.compare import N_, assert_raises, assert_roughly, assert_unmodified, check_tensor, with_hint
from autograder.core.protocol import Call, Failure, New, StudentError
from anchors import assert_close, computed_in_float32, hinted, proven_hint, raises_with_advice, tolerance
from oracles_positional_encoding import rope64, sinusoidal64, table_atol
from tensors import batch_dims, randn, seeds

pytestmark = pytest.mark.unit("positional_encoding")
MODULE = "SinusoidalPositionalEncoding"
# The checks a constant or shape-only answer may pass, and so the only points it may earn
# (tests/project/test_nothing_for_nothing.py): shapes, structure and argument errors;
# the public module check reads position 0 only, whose row [0, 1, 0, 1, ...] is a constant.
SHAPE_CHECKS = (
    "test_positional_encoding_public.py::test_max_len_limits_the_positions",
    "test_positional_encoding_public.py::test_odd_dims_raise_value_error",
    "test_positional_encoding_public.py::test_module_adds_to_x_and_keeps_the_table_out_of_state_dict",
    "test_positional_encoding_properties.py::test_odd_dim_raises_value_error",
    "test_positional_encoding_properties.py::test_module_rejects_wrong_feature_size",
)

# Advice for side bugs, each shown where the failure proves it (not a guess from a wrong value).
ODD_DIM = N_("an odd dim raises ValueError naming it: the features come in pairs (sin and cos, or a rotated pair), "
             "so check that dim is even first.")
PAST_THE_TABLE = N_("a request past the table (offset + L > max_len) raises ValueError naming max_len: check it "
                    "before slicing the table.")
LAST_ROWS_FIT = N_("offset + L == max_len fits: the table holds rows 0 .. max_len - 1, so raise only when "
                   "offset + L > max_len.")
WRONG_WIDTH = N_("forward checks x's last dim against dim and raises ValueError naming both sizes.")
TABLE_DEVICE = N_("sinusoidal_encoding creates the table on its `device` argument: pass device=device to every "
                  "tensor it makes.")
DEFAULT_POSITIONS_DEVICE = N_("the default positions live on x's device: torch.arange(L, device=x.device).")
TABLE_DTYPE = N_("sinusoidal_encoding returns the `dtype` asked for: compute the angles in float32 (or float64) and "
                 "cast the table with .to(dtype).")
ROPE_DTYPE = N_("apply_rope returns x's dtype: compute in float32 (or float64) if you like, then cast the result "
                "with .to(x.dtype).")
NOT_PERSISTENT = N_("register the table with persistent=False: it is computed from the constructor's arguments, so "
                    "state_dict must not hold it.")
NOT_A_BUFFER = N_("register the table with self.register_buffer(name, table, persistent=False): a plain attribute "
                  "does not follow .to(device) or .to(dtype).")
ROPE_IN_PLACE = N_("apply_rope returns a new tensor and leaves its inputs alone: an in-place write (copy_, +=, "
                   "x[...] = ...) changes the caller's tensor.")
MODULE_IN_PLACE = N_("forward returns a new tensor x + PE: an in-place add (x += ..., x.add_) changes the caller's x.")
ROPE_DETACHED = N_("apply_rope's output must depend on x in autograd: rotate x itself, not x.detach() or x.data.")

even_dims = st.integers(1, 12).map(lambda n: 2 * n)
lengths = st.integers(1, 48)
bases = st.sampled_from([10000.0, 100.0, 500.0, 2.0, 1e5])


def encoder(dim, max_len=None, base=None) -> New:
    kwargs = {}
    if max_len is not None:
        kwargs["max_len"] = max_len
    if base is not None:
        kwargs["base"] = base
    return New(MODULE, (dim,), kwargs)


def unmodified(result, advice):
    """No input of ``result``'s call was written in place, else ``advice`` follows the failure."""
    try:
        assert_unmodified(result)
    except AssertionError as error:
        raise hinted(error, advice) from None


def of_dtype(got, dtype, what, advice, *, shape=None):
    """``got`` is a tensor of ``dtype``; one left in float32 (the default) gets ``advice``."""
    try:
        return check_tensor(got, shape=shape, dtype=dtype, what=what)
    except AssertionError as error:
        if isinstance(got, torch.Tensor) and got.dtype == torch.float32 and (shape is None or got.shape == shape):
            raise hinted(error, advice) from None
        raise


def assert_computed_in_float64(got, right, what):
    """A float64 answer near ``right`` that holds float32 numbers only was computed in float32 and cast
    up: shown against ``right`` at float64 tolerance, where the downcast's hint is proven."""
    if computed_in_float32(got, right):
        assert_close(got, right, what=what, dtype=torch.float64, **tolerance(torch.float64))


def on_device(got, shape, what, advice):
    """``got`` is a meta tensor of ``shape``; one left on the CPU gets ``advice``."""
    try:
        check_tensor(got, shape=shape, device_type="meta", what=what)
    except AssertionError as error:
        if isinstance(got, torch.Tensor) and got.device.type == "cpu" and got.shape == shape:
            raise hinted(error, advice) from None
        raise


def table_hints(P: int, dim: int, base: float = 10000.0, *, start: int = 0) -> list:
    """Known wrong tables (rows start .. start + P - 1), each with the advice that fixes it."""
    hints = [
        (sinusoidal64(P, dim, base, start=start, swap=True),
         "sin and cos are swapped: PE[p, 2i] is the sin and PE[p, 2i+1] the cos, so PE[0] = [0, 1, 0, 1, ...]."),
        (sinusoidal64(P, dim, base, start=start, layout="concatenated"),
         "sin and cos are interleaved (sin, cos, sin, cos, ...), not all the sines and then all the cosines."),
        (sinusoidal64(P, dim, base, start=start, exponent="i/dim"),
         "pair i (features 2i and 2i+1) uses the exponent 2i/dim, with i = 0 .. dim/2 - 1; not i/dim."),
        (sinusoidal64(P, dim, base, start=start + 1), "positions start at 0: row 0 is PE(0) = [0, 1, 0, 1, ...]."),
        (sinusoidal64(P, dim, base, start=start, exponent="j/dim"),
         "PE[p, 2i+1] is the cos of the angle whose sin is PE[p, 2i], p / base^(2i/dim): feature 2i+1 uses the "
         "exponent 2i/dim too, not (2i+1)/dim."),
    ]
    if base != 10000.0:
        hints.append((sinusoidal64(P, dim, 10000.0, start=start), "the `base` argument was ignored (10000 was used)."))
    return hints


def known_table_bug(got, P, dim, base=10000.0) -> str:
    """A hint naming the one known bug ``got`` (a (P, dim) table) shows, or ''."""
    if type(got) is not torch.Tensor or tuple(got.shape) != (P, dim):
        return ""
    text = proven_hint(got, sinusoidal64(P, dim, base), table_hints(P, dim, base), atol=table_atol(P), rtol=1e-4)
    return with_hint("", text)


def rope_hints(x, positions=None, base=10000.0) -> list:
    L = x.shape[-2]
    hints = [
        (rope64(x, positions, base, layout="half"),
         "pairs are interleaved, (x[2i], x[2i+1]) as in RoFormer and LLaMA; not (x[i], x[i + D/2]) (the rotate-half layout)."),
        (rope64(x, positions, base, direction=-1.0),
         "rotate counter-clockwise: (a, b) -> (a cos t - b sin t, a sin t + b cos t)."),
        (rope64(x, positions, base, minus=False),
         "a rotation has one minus sign: (a, b) -> (a cos t - b sin t, a sin t + b cos t); with + in both it is no "
         "rotation (norms change)."),
        (rope64(x, positions, base, exponent="i/dim"),
         "pair i uses the frequency base**(-2i/D), i = 0 .. D/2 - 1; not base**(-i/D)."),
    ]
    if positions is not None:
        hints.append((rope64(x, None, base), "the `positions` argument was ignored (arange(L) was used)."))
    else:
        hints.append((rope64(x, torch.arange(1, L + 1), base), "default positions start at 0: arange(L)."))
    if base != 10000.0:
        hints.append((rope64(x, positions, 10000.0), "the `base` argument was ignored (10000 was used)."))
    return hints


def rope_atol(x, max_position) -> float:
    return table_atol(max_position) * max(1.0, float(x.double().abs().max()) if x.numel() else 1.0)


def assert_table(got, P, dim, base):
    """The table a relative property inspected is also the formula's (a constant table passes those)."""
    assert_close(got, sinusoidal64(P, dim, base), atol=table_atol(P), what=f"sinusoidal_encoding({P}, {dim}, base={base:g})",
                 hints=table_hints(P, dim, base))


# -- the sinusoidal table ------------------------------------------------------

@pytest.mark.points(3)
@given(P=st.one_of(lengths, st.sampled_from([512, 4096])), dim=even_dims)
def test_table_matches_formula(subject, P, dim):
    """sinusoidal_encoding matches PE[p, 2i] = sin(p / 10000^(2i/dim)), PE[p, 2i+1] = cos(p / 10000^(2i/dim))"""
    # Checks: P1.
    got = subject.call("sinusoidal_encoding", P, dim)
    assert_close(got, sinusoidal64(P, dim), atol=table_atol(P), what=f"sinusoidal_encoding({P}, {dim})",
                 dtype=torch.float32, hints=table_hints(P, dim))


@pytest.mark.points(2)
@given(dim=even_dims, base=bases)
def test_first_rows_pin_the_interleaved_layout(subject, dim, base):
    """PE[0] = [0, 1, 0, 1, ...], PE[1, 0:2] = [sin 1, cos 1], and the last pair turns slowest"""
    # Checks: P1.
    got = check_tensor(subject.call("sinusoidal_encoding", 3, dim, base=base), shape=(3, dim),
                       what=f"sinusoidal_encoding(3, {dim}, base={base})")
    hint = known_table_bug(got, 3, dim, base)
    row0 = torch.tensor([0.0, 1.0] * (dim // 2))
    assert_close(got[0], row0, what="PE[0] (sin 0 = 0 at even features, cos 0 = 1 at odd ones)",
                 hints=[(row0.flip(0), "sin and cos are swapped: PE[p, 2i] = sin, PE[p, 2i+1] = cos."),
                        (torch.cat([row0[0::2], row0[1::2]]), "sin and cos are interleaved, not concatenated.")])
    first = torch.tensor([math.sin(1.0), math.cos(1.0)])
    try:
        assert_close(got[1, :2], first, what="PE[1, 0:2] (pair 0 turns at frequency 1)")
        slow = 2.0 / base ** ((dim - 2) / dim)  # position 2, the last pair i = dim/2 - 1
        assert_close(got[2, dim - 2:], torch.tensor([math.sin(slow), math.cos(slow)]),
                     what=f"PE[2, {dim - 2}:{dim}] (sin, cos of 2 / base^((dim-2)/dim))")
    except AssertionError as error:
        raise AssertionError(str(error) + hint) from None


@pytest.mark.points(2)
@given(P=lengths, dim=even_dims, k=st.integers(1, 40), base=bases)
def test_shift_is_a_fixed_block_rotation(subject, P, dim, k, base):
    """PE(p + k) = M_k PE(p): shifting by k rotates each (sin, cos) pair by a fixed angle, whatever p is"""
    # Checks: P1.
    got = check_tensor(subject.call("sinusoidal_encoding", P + k, dim, base=base), shape=(P + k, dim),
                       what=f"sinusoidal_encoding({P + k}, {dim})").double()
    # M_k from the table itself: row k holds (sin k w_i, cos k w_i) for each pair i.
    s_k, c_k = got[k, 0::2], got[k, 1::2]  # (dim/2,)
    s, c = got[:P, 0::2], got[:P, 1::2]  # (P, dim/2)
    predicted = torch.stack([s * c_k + c * s_k, c * c_k - s * s_k], dim=-1).reshape(P, dim)  # (P, dim)
    try:
        assert_close(got[k:], predicted, atol=3 * table_atol(P + k),
                     what=f"PE[p + {k}] against the rotation of PE[p] by the angles of row {k}")
    except AssertionError as error:
        raise AssertionError(str(error) + known_table_bug(got, P + k, dim, base)) from None
    assert_table(got, P + k, dim, base)


@pytest.mark.points(2)
@given(P=st.integers(2, 48), dim=even_dims, base=bases)
def test_dot_products_depend_only_on_distance(subject, P, dim, base):
    """PE(p) . PE(q) depends only on |p - q|"""
    # Checks: P1.
    got = check_tensor(subject.call("sinusoidal_encoding", P, dim, base=base), shape=(P, dim),
                       what=f"sinusoidal_encoding({P}, {dim})").double()
    gram = got @ got.T  # (P, P)
    distance = (torch.arange(P).unsqueeze(1) - torch.arange(P).unsqueeze(0)).abs()  # (P, P)
    assert_close(gram, gram[0][distance], atol=2 * dim * table_atol(P),
                 what="PE(p) . PE(q) against PE(0) . PE(|p - q|)")
    assert_table(got, P, dim, base)


@pytest.mark.points(2)
@given(P=st.one_of(lengths, st.sampled_from([1000, 4096])), dim=even_dims, base=bases)
def test_each_pair_lies_on_the_unit_circle(subject, P, dim, base):
    """PE[p, 2i]^2 + PE[p, 2i+1]^2 = 1 for every position and pair"""
    # Checks: P1.
    got = check_tensor(subject.call("sinusoidal_encoding", P, dim, base=base), shape=(P, dim),
                       what=f"sinusoidal_encoding({P}, {dim})").double()
    radii = got[:, 0::2] ** 2 + got[:, 1::2] ** 2  # (P, dim/2)
    try:
        assert_close(radii, torch.ones(P, dim // 2, dtype=torch.float64), atol=2 * table_atol(P),
                     what="PE[p, 2i]^2 + PE[p, 2i+1]^2 (features 2i and 2i+1 are the sin and cos of one angle)")
    except AssertionError as error:
        raise AssertionError(str(error) + known_table_bug(got, P, dim, base)) from None
    assert_table(got, P, dim, base)


@pytest.mark.points(2)
@given(P=lengths, dim=even_dims, base=st.one_of(bases, st.floats(1.5, 1e6)))
def test_base_is_honoured(subject, P, dim, base):
    """the `base` argument sets the frequencies base^(-2i/dim)"""
    # Checks: P1.
    got = subject.call("sinusoidal_encoding", P, dim, base=base)
    assert_close(got, sinusoidal64(P, dim, base), atol=table_atol(P), what=f"sinusoidal_encoding({P}, {dim}, base={base:g})",
                 dtype=torch.float32, hints=table_hints(P, dim, base))


# -- the module ----------------------------------------------------------------

@pytest.mark.points(2)
@given(B=st.integers(1, 3), L=lengths, dim=even_dims, spare=st.integers(1, 20),
       base=st.one_of(st.none(), bases), default_len=st.booleans(), seed=seeds)
def test_module_adds_the_table(subject, B, L, dim, spare, base, default_len, seed):
    """SinusoidalPositionalEncoding(dim, max_len, base=base)(x) = x + PE[:L]"""
    # Checks: P2.
    # (A table just long enough, offset + L == max_len, is the argument checks' property's case.)
    x = randn((B, L, dim), seed)
    max_len = None if default_len else L + spare
    table = sinusoidal64(L, dim, 10000.0 if base is None else base)
    got = subject.run(Call(subject.unit, encoder(dim, max_len, base), (x,))).output
    hints = [(table.expand(B, L, dim), "forward returns x + PE: the input x was dropped."),
             (x * math.sqrt(dim) + table, "forward is x + PE, with no sqrt(dim) scaling of x."),
             *[(x.double() + wrong, text) for wrong, text in table_hints(L, dim, 10000.0 if base is None else base)
               if "`base`" not in text]]  # the module's own wording of that bug follows
    if base is not None and base != 10000.0:
        hints.append((x.double() + sinusoidal64(L, dim), "the `base` was not used (10000 was): the constructor passes it on "
                                                         "to the table, and sinusoidal_encoding uses it."))
    assert_close(got, x.double() + table, atol=table_atol(L), what="x + PE[:L]", dtype=torch.float32, hints=hints)


@pytest.mark.points(2)
@given(B=st.integers(1, 3), L=st.integers(1, 16), dim=even_dims, offset=st.integers(0, 100), seed=seeds)
def test_offset_is_honoured(subject, B, L, dim, offset, seed):
    """forward(x, offset) adds PE[offset : offset + L], the rows of the positions x sits at"""
    # Checks: P2.
    max_len = offset + L + 3
    x = randn((B, L, dim), seed)
    got = subject.run(Call(subject.unit, encoder(dim, max_len), (x,), {"offset": offset})).output
    expected = x.double() + sinusoidal64(L, dim, start=offset)
    hints = [(x.double() + sinusoidal64(L, dim), "the `offset` argument was ignored: rows offset .. offset + L - 1 are added."),
             *[(x.double() + wrong, text) for wrong, text in table_hints(L, dim, start=offset)]]
    assert_close(got, expected, atol=table_atol(max_len), what=f"x + PE[{offset}:{offset + L}]", hints=hints)


def fitting(subject, call):
    """The output of ``call``, whose rows end at max_len exactly: a ValueError there is the off-by-one."""
    try:
        return subject.run(call).output
    except StudentError as error:
        if error.kind != "ValueError":
            raise
        raise AssertionError(with_hint(error.describe(), LAST_ROWS_FIT)) from None


@pytest.mark.points(2)
@pytest.mark.aspect("errors")
@given(dim=even_dims, max_len=st.integers(1, 32), data=st.data(), seed=seeds)
def test_max_len_overflow_raises_value_error(subject, dim, max_len, data, seed):
    """positions up to max_len - 1 work (as in a longer table), the default max_len is 4096, and a request past max_len (by offset or by length) raises ValueError naming max_len"""
    # Checks: P2, P3.
    L = data.draw(st.integers(1, max_len), label="L")
    extra = data.draw(st.integers(1, 4), label="extra")
    x = randn((2, L, dim), seed)
    offset = {"offset": max_len - L}
    fits = check_tensor(fitting(subject, Call(subject.unit, encoder(dim, max_len), (x,), offset)), shape=x.shape,
                        what=f"forward(x, offset={max_len - L}) with L={L}, max_len={max_len} (the last rows of the table)")
    roomy = check_tensor(subject.run(Call(subject.unit, encoder(dim, max_len + extra), (x,), offset)).output,
                         shape=x.shape, what=f"forward(x, offset={max_len - L}) with max_len={max_len + extra}")
    assert_roughly(roomy.double() - x.double(), sinusoidal64(L, dim, start=max_len - L).expand(x.shape),
                   what=f"forward(x, offset={max_len - L}) - x with max_len={max_len + extra}")
    assert_close(fits, roomy, atol=table_atol(max_len),
                 what=f"the last rows of a table of max_len={max_len} against the same rows of max_len={max_len + extra}")
    past = {"offset": max_len - L + extra}
    raises_with_advice(subject, Call(subject.unit, encoder(dim, max_len), (x,), past), PAST_THE_TABLE,
                       Call(subject.unit, encoder(dim, max_len + 2 * extra), (x,), past), mentions=(max_len,))
    longer = randn((1, max_len + extra, dim), seed)
    raises_with_advice(subject, Call(subject.unit, encoder(dim, max_len), (longer,)), PAST_THE_TABLE,
                       Call(subject.unit, encoder(dim, max_len + extra), (longer,)), mentions=(max_len,))
    # The default max_len is 4096: its last row works and the next position raises.
    one = randn((1, 1, dim), seed)
    last = fitting(subject, Call(subject.unit, encoder(dim), (one,), {"offset": 4095}))
    assert_close(last, subject.run(Call(subject.unit, encoder(dim, 4097), (one,), {"offset": 4095})).output,
                 atol=table_atol(4096), what="forward(x, offset=4095) with the default max_len against max_len=4097")
    assert_raises(subject.run, Call(subject.unit, encoder(dim), (one,), {"offset": 4096}), "ValueError", mentions=(4096,))


def table_buffers(result, max_len, dim) -> dict:
    """The buffers holding max_len * dim numbers: the table, however it is shaped."""
    return {name: b for name, b in (result.buffers or {}).items() if b.numel() == max_len * dim}


def the_table(result, max_len, dim, why) -> tuple[str, torch.Tensor]:
    """(name, buffer) of the table among ``result``'s buffers; a missing one fails, ``why`` saying what it is for."""
    found = table_buffers(result, max_len, dim)
    if not found:
        raise AssertionError(with_hint(f"no buffer of {max_len} x {dim} numbers was found: {why}", NOT_A_BUFFER))
    return next(iter(found.items()))


@pytest.mark.points(2)
@pytest.mark.aspect("shape")
@given(dim=even_dims, max_len=st.integers(2, 64), seed=seeds)
def test_table_is_a_non_persistent_buffer(subject, dim, max_len, seed):
    """the table is a buffer (it follows the module) but non-persistent (not in state_dict), and not a parameter"""
    # Checks: P4.
    # (max_len >= 2: a table just long enough for x is the argument checks' property's case.)
    x = randn((1, 1, dim), seed)
    result = subject.run(Call(subject.unit, encoder(dim, max_len), (x,), return_state=True))
    name, buffer = the_table(result, max_len, dim, "the table must be a buffer, so that it follows .to(device) and .to(dtype)")
    assert_roughly(buffer.reshape(max_len, dim), sinusoidal64(max_len, dim), what=f"the table buffer {name!r}")
    stored = [key for key, t in (result.state or {}).items() if t.numel() == max_len * dim]
    if stored:
        raise AssertionError(with_hint(f"state_dict holds the table as {stored[0]!r}", NOT_PERSISTENT))


@pytest.mark.points(2)
@pytest.mark.aspect("dtype")
@given(B=st.integers(1, 2), L=st.integers(1, 8), dim=even_dims, dtype=st.sampled_from([torch.float64, torch.bfloat16]),
       seed=seeds)
def test_table_follows_module_dtype(subject, B, L, dim, dtype, seed):
    """after .to(dtype) (float64, bfloat16) the table buffer has that dtype and the float32 module's values, and the output equals the float32 module's within that dtype's precision (float64 computed in float64)"""
    # Checks: P4, G3, G7.
    max_len = L + 4
    x = randn((B, L, dim), seed, dtype=dtype)
    why = "the table must be a buffer, so that .to(dtype) converts it"
    plain = subject.run(Call(subject.unit, encoder(dim, max_len), (x.float(),), return_state=True))
    _, plain_buffer = the_table(plain, max_len, dim, why)
    plain_table = plain_buffer.reshape(max_len, dim)
    assert_roughly(plain_table, sinusoidal64(max_len, dim), what="the float32 module's table buffer")
    result = subject.run(Call(subject.unit, encoder(dim, max_len), (x,), dtype=dtype, return_state=True))
    name, buffer = the_table(result, max_len, dim, why)
    check_tensor(buffer, dtype=dtype, what=f"the table buffer {name!r} after .to({dtype})")
    # .to(dtype) casts the float32 table (a module may also rebuild it in float64).
    assert_close(buffer.reshape(max_len, dim), plain_table, atol=table_atol(max_len) if dtype == torch.float64 else 5e-2,
                 what=f"the table buffer {name!r} after .to({dtype}) against the float32 module's")
    plain_out = check_tensor(plain.output, shape=x.shape, what="output of a float32 module")
    out = check_tensor(result.output, shape=x.shape, dtype=dtype, what=f"output of a {dtype} module")
    tol = dict(atol=table_atol(max_len), rtol=1e-5) if dtype == torch.float64 else dict(atol=5e-2, rtol=2e-2)
    assert_close(out, plain_out, what=f"output of a {dtype} module against the float32 module's", **tol)
    if dtype == torch.float64:  # x itself is never downcast
        assert_computed_in_float64(out, x.double() + sinusoidal64(L, dim), f"output of a {dtype} module")


# -- apply_rope ----------------------------------------------------------------

@st.composite
def rope_shapes(draw, *, max_len=12, min_dim=2):
    batch = draw(batch_dims)
    L = draw(st.integers(1, max_len))
    D = 2 * draw(st.integers(max(1, min_dim // 2), 8))
    return (*batch, L, D)


@pytest.mark.points(3)
@given(shape=rope_shapes(), seed=seeds, base=st.one_of(st.none(), bases))
def test_rope_matches_reference(subject, shape, seed, base):
    """apply_rope matches a float64 reference: pair (2i, 2i+1) at position p turns by p * base^(-2i/D)"""
    # Checks: P5.
    x = randn(shape, seed)
    kwargs = {} if base is None else {"base": base}
    used = 10000.0 if base is None else base
    got = subject.call("apply_rope", x, **kwargs)
    assert_close(got, rope64(x, None, used), atol=rope_atol(x, shape[-2]), what="apply_rope(x)",
                 dtype=torch.float32, hints=rope_hints(x, None, used))


@pytest.mark.points(2)
@given(D=st.integers(2, 8).map(lambda n: 2 * n), data=st.data(), position=st.integers(1, 50))
def test_rope_pins_pairing_and_direction(subject, D, data, position):
    """apply_rope turns e_2i to (cos t, sin t) and e_2i+1 to (-sin t, cos t) in features 2i, 2i+1, t = p * 10000^(-2i/D)"""
    # Checks: P5.
    i = data.draw(st.integers(0, D // 2 - 1), label="pair")
    x = torch.zeros(2, position + 1, D)
    x[0, :, 2 * i] = 1.0  # e_2i at every position
    x[1, :, 2 * i + 1] = 1.0  # e_2i+1 at every position
    t = position * 10000.0 ** (-2 * i / D)
    expected = torch.zeros(2, D)
    expected[0, 2 * i], expected[0, 2 * i + 1] = math.cos(t), math.sin(t)
    expected[1, 2 * i], expected[1, 2 * i + 1] = -math.sin(t), math.cos(t)
    got = check_tensor(subject.call("apply_rope", x), shape=x.shape, what=f"apply_rope of unit vectors, D={D}")
    assert_close(got[:, position], expected, atol=table_atol(position),
                 what=f"apply_rope(x)[:, {position}] for x = e_{2 * i} (row 0) and e_{2 * i + 1} (row 1)",
                 hints=[(wrong[:, position], text) for wrong, text in rope_hints(x)])


@pytest.mark.points(2)
@given(shape=rope_shapes(), seed=seeds, max_position=st.sampled_from([10, 1000]))
def test_rope_preserves_norms(subject, shape, seed, max_position):
    """apply_rope preserves the norm of every token's vector (it is a rotation)"""
    # Checks: P5.
    x = randn(shape, seed, scale=2.0)
    positions = torch.randint(0, max_position, shape[-2:-1], generator=torch.Generator().manual_seed(seed))
    got = check_tensor(subject.call("apply_rope", x, positions), shape=shape, what="apply_rope(x, positions)")
    assert_close(got.double().norm(dim=-1), x.double().norm(dim=-1), atol=2 * rope_atol(x, max_position),
                 what="the norm of each rotated vector against the norm of x")
    assert_close(got, rope64(x, positions), atol=rope_atol(x, max_position), what="apply_rope(x, positions)",
                 hints=rope_hints(x, positions))  # the identity keeps norms too


@pytest.mark.points(2)
@given(shape=rope_shapes(), seed=seeds)
def test_rope_position_zero_is_identity(subject, shape, seed):
    """position 0 leaves a vector unchanged: explicit zero positions return x, and the default first row is x's"""
    # Checks: P5, P6.
    x = randn(shape, seed)
    L = shape[-2]
    zeros = torch.zeros(L, dtype=torch.long)
    assert_close(subject.call("apply_rope", x, zeros), x, atol=1e-6, what="apply_rope(x, positions=zeros)",
                 hints=[(rope64(x), "the `positions` argument was ignored (arange(L) was used).")])
    default = check_tensor(subject.call("apply_rope", x), shape=shape, what="apply_rope(x)")
    assert_close(default[..., 0, :], x[..., 0, :], atol=1e-6, what="apply_rope(x)[..., 0, :] (default positions start at 0)",
                 hints=[(rope64(x, torch.arange(1, L + 1))[..., 0, :], "default positions are arange(L), starting at 0.")])
    assert_close(default, rope64(x), atol=rope_atol(x, L), what="apply_rope(x)", hints=rope_hints(x))  # not the identity


@pytest.mark.points(2)
@given(shape=rope_shapes(), seed=seeds)
def test_rope_rotations_compose(subject, shape, seed):
    """R_b R_a = R_(a+b): rotating by positions a then b equals rotating by a + b"""
    # Checks: P5, P6.
    x = randn(shape, seed)
    gen = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 200, shape[-2:-1], generator=gen)
    b = torch.randint(0, 200, shape[-2:-1], generator=gen)
    once = check_tensor(subject.call("apply_rope", x, a), shape=shape, what="apply_rope(x, a)")
    # The identity composes too: the rotation must also be right.
    assert_close(once, rope64(x, a), atol=rope_atol(x, 200), what="apply_rope(x, a)", hints=rope_hints(x, a))
    twice = subject.call("apply_rope", once, b)
    direct = subject.call("apply_rope", x, a + b)
    check_tensor(direct, shape=shape, what="apply_rope(x, a + b)")
    assert_close(twice, direct, atol=3 * rope_atol(x, 400), what="apply_rope(apply_rope(x, a), b) against apply_rope(x, a + b)")


@pytest.mark.points(2)
@given(batch=batch_dims, L=st.integers(1, 8), S=st.integers(1, 8), D=st.integers(1, 8).map(lambda n: 2 * n),
       shift=st.integers(1, 300), explicit=st.booleans(), seed=seeds)
def test_rope_scores_depend_only_on_relative_position(subject, batch, L, S, D, shift, explicit, seed):
    """<R_m q, R_n k> depends only on n - m: shifting every position by the same amount keeps every score"""
    # Checks: P5.
    q, k = randn((*batch, L, D), seed), randn((*batch, S, D), seed + 1)
    gen = torch.Generator().manual_seed(seed)
    m = torch.randint(0, 300, (L,), generator=gen) if explicit else None
    n = torch.randint(0, 300, (S,), generator=gen) if explicit else None
    rotated_q = subject.call("apply_rope", q, m) if explicit else subject.call("apply_rope", q)
    rotated_k = subject.call("apply_rope", k, n) if explicit else subject.call("apply_rope", k)
    base_scores = rotated_q @ rotated_k.transpose(-2, -1)
    m_shift, n_shift = (m + shift, n + shift) if explicit else (torch.arange(L) + shift, torch.arange(S) + shift)
    check_tensor(base_scores, shape=(*batch, L, S), what="R_m q @ (R_n k)^T")
    assert_close(rotated_q, rope64(q, m), atol=rope_atol(q, 300), what="apply_rope(q)",
                 hints=rope_hints(q, m))  # the identity keeps every score too
    shifted = subject.call("apply_rope", q, m_shift) @ subject.call("apply_rope", k, n_shift).transpose(-2, -1)
    scale = float(q.norm(dim=-1).max() * k.norm(dim=-1).max())
    assert_close(shifted.double(), base_scores.double(), atol=4 * table_atol(600) * max(1.0, scale),
                 what=f"scores with every position shifted by {shift} against the unshifted scores")


@pytest.mark.points(2)
@given(B=st.integers(1, 3), H=st.integers(1, 3), L=st.integers(1, 8), D=st.integers(1, 8).map(lambda n: 2 * n),
       per_batch=st.booleans(), seed=seeds)
def test_rope_uses_explicit_positions(subject, B, H, L, D, per_batch, seed):
    """explicit `positions`, broadcastable to (..., L), set each token's angle"""
    # Checks: P6.
    x = randn((B, H, L, D), seed)
    gen = torch.Generator().manual_seed(seed)
    shape = (B, 1, L) if per_batch else (L,)  # per sequence (shared by the heads), or shared by all
    positions = torch.randint(0, 2000, shape, generator=gen)
    got = subject.call("apply_rope", x, positions)
    assert_close(got, rope64(x, positions), atol=rope_atol(x, 2000), what=f"apply_rope(x, positions of shape {shape})",
                 dtype=torch.float32, hints=rope_hints(x, positions))


# -- contract, dtypes and devices ----------------------------------------------

@pytest.mark.points(2)
@pytest.mark.aspect("errors")
@given(half=st.integers(0, 8), L=st.integers(1, 5), seed=seeds)
def test_odd_dim_raises_value_error(subject, half, L, seed):
    """an odd dim raises ValueError naming it, in sinusoidal_encoding, the module and apply_rope"""
    # Checks: G8.
    odd = 2 * half + 1
    raises_with_advice(subject, Call(subject.unit, "sinusoidal_encoding", (L, odd)), ODD_DIM,
                       Call(subject.unit, "sinusoidal_encoding", (L, odd + 1)), mentions=(odd,))
    raises_with_advice(subject, Call(subject.unit, encoder(odd, 8)), ODD_DIM, Call(subject.unit, encoder(odd + 1, 8)),
                       mentions=(odd,))
    raises_with_advice(subject, Call(subject.unit, "apply_rope", (randn((2, L, odd), seed),)), ODD_DIM,
                       Call(subject.unit, "apply_rope", (randn((2, L, odd + 1), seed),)), mentions=(odd,))


@pytest.mark.points(1)
@pytest.mark.aspect("errors")
@given(dim=even_dims, extra=st.integers(1, 3), seed=seeds)
def test_module_rejects_wrong_feature_size(subject, dim, extra, seed):
    """the module raises ValueError naming both sizes when x's last dim is not dim"""
    # Checks: G8.
    x = randn((2, 3, dim + 2 * extra), seed)
    raises_with_advice(subject, Call(subject.unit, encoder(dim, 16), (x,)), WRONG_WIDTH,
                       Call(subject.unit, encoder(dim, 16), (randn((2, 3, dim), seed),)), mentions=(dim, dim + 2 * extra))


@pytest.mark.points(2)
@pytest.mark.aspect("dtype")
@given(shape=rope_shapes(max_len=4), seed=seeds, dtype=st.sampled_from([torch.float64, torch.bfloat16]))
def test_dtypes_are_preserved(subject, shape, seed, dtype):
    """float64 and bfloat16 give outputs of that dtype (apply_rope and the table) equal to the float32 ones within that dtype's precision; float64 is computed in float64"""
    # Checks: P1, G3, G4, G7.
    x = randn(shape, seed, dtype=dtype)
    D = shape[-1]
    plain = subject.call("apply_rope", x.float())
    assert_roughly(plain, rope64(x.float()), what="apply_rope of a float32 x")
    got = of_dtype(subject.call("apply_rope", x), dtype, f"apply_rope of a {dtype} tensor", ROPE_DTYPE, shape=x.shape)
    scale = max(1.0, float(x.double().abs().max()))
    tol = dict(atol=rope_atol(x, shape[-2]), rtol=1e-4) if dtype == torch.float64 else dict(atol=5e-2 * scale, rtol=2e-2)
    assert_close(got, plain, what=f"apply_rope of a {dtype} tensor against the float32 one", **tol)
    if dtype == torch.float64:
        assert_computed_in_float64(got, rope64(x), f"apply_rope of a {dtype} tensor")
    plain = subject.call("sinusoidal_encoding", 8, D)
    assert_roughly(plain, sinusoidal64(8, D), what=f"sinusoidal_encoding(8, {D})")
    table = of_dtype(subject.call("sinusoidal_encoding", 8, D, dtype=dtype), dtype,
                     f"sinusoidal_encoding(8, {D}, dtype={dtype})", TABLE_DTYPE, shape=(8, D))
    tol = dict(atol=table_atol(8), rtol=1e-4) if dtype == torch.float64 else dict(atol=5e-2, rtol=0.0)
    assert_close(table, plain, what=f"sinusoidal_encoding(8, {D}, dtype={dtype}) against the float32 table", **tol)
    if dtype == torch.float64:
        assert_computed_in_float64(table, sinusoidal64(8, D), f"sinusoidal_encoding(8, {D}, dtype={dtype})")


BF16_PHASE = ("the angle position * frequency was computed in bfloat16, which cannot even hold position 1001: "
              "compute the angles in float32 (an upcast) and cast only the result.")


@pytest.mark.points(2)
@pytest.mark.aspect("dtype")
@settings(max_examples=20)
@given(D=st.integers(1, 8).map(lambda n: 2 * n), L=st.integers(1, 16), start=st.integers(1000, 4000 - 16), seed=seeds)
def test_bfloat16_far_positions_match_float64(subject, D, L, start, seed):
    """in bfloat16 at positions 1,000 to 4,000, apply_rope, sinusoidal_encoding and the module with an offset are within bfloat16 tolerance of their own float64 results (the angles are not computed in bfloat16)"""
    # Checks: G4, G7.
    # A bfloat16 angle is off by up to 8 radians there; a float32 one by 3e-4.
    bf16, f64 = torch.bfloat16, torch.float64
    x = randn((2, L, D), seed, dtype=bf16)
    scale = max(1.0, float(x.double().abs().max()))
    positions = torch.arange(start, start + L)
    where = f"at positions {start}..{start + L - 1}"
    plain = subject.call("apply_rope", x.double(), positions)
    assert_roughly(plain, rope64(x, positions), what=f"apply_rope of a float64 x {where}")
    got = of_dtype(subject.call("apply_rope", x, positions), bf16, f"apply_rope of a bfloat16 x {where}", ROPE_DTYPE,
                   shape=x.shape)
    assert_close(got, plain, atol=5e-2 * scale, rtol=2e-2, what=f"apply_rope of a bfloat16 x {where} against a float64 x",
                 hints=lambda: [(rope64(x, positions, phase_dtype=bf16), BF16_PHASE)])
    plain = check_tensor(subject.call("sinusoidal_encoding", start + L, D, dtype=f64), shape=(start + L, D),
                         what=f"sinusoidal_encoding({start + L}, {D}, dtype=torch.float64)")[start:]
    assert_roughly(plain, sinusoidal64(L, D, start=start), what=f"rows {start}..{start + L - 1} of the float64 table")
    table = of_dtype(subject.call("sinusoidal_encoding", start + L, D, dtype=bf16), bf16,
                     f"sinusoidal_encoding({start + L}, {D}, dtype=torch.bfloat16)", TABLE_DTYPE, shape=(start + L, D))
    assert_close(table[start:], plain, atol=5e-2, rtol=0.0,
                 what=f"rows {start}..{start + L - 1} of sinusoidal_encoding({start + L}, {D}, dtype=torch.bfloat16) "
                      "against the float64 table's",
                 hints=lambda: [(sinusoidal64(L, D, start=start, phase_dtype=bf16), BF16_PHASE)])
    plain = check_tensor(subject.run(Call(subject.unit, encoder(D), (x.double(),), {"offset": start}, dtype=f64)).output,
                         shape=x.shape, what=f"a float64 module's forward(x, offset={start})")
    assert_roughly(plain.double() - x.double(), sinusoidal64(L, D, start=start).expand(x.shape),
                   what=f"a float64 module's forward(x, offset={start}) - x")
    out = subject.run(Call(subject.unit, encoder(D), (x,), {"offset": start}, dtype=bf16)).output
    assert_close(out, plain, atol=5e-2 * scale, rtol=2e-2, dtype=bf16,
                 what=f"a bfloat16 module's forward(x, offset={start}) against a float64 module's",
                 hints=lambda: [(x.double() + sinusoidal64(L, D, start=start, phase_dtype=bf16), BF16_PHASE)])


@pytest.mark.points(2)
@pytest.mark.aspect("device")
@settings(max_examples=5)
@given(shape=rope_shapes(), seed=seeds)
def test_runs_on_meta_device(subject, shape, seed):
    """the whole unit runs on the meta device (every tensor is created on the input's device), giving the shapes of the CPU calls"""
    # Checks: P1, G3, G4.
    x = randn(shape, seed)
    L, D = shape[-2], shape[-1]
    on_meta = dict(device="meta")
    plain = check_tensor(subject.call("sinusoidal_encoding", L, D), what=f"sinusoidal_encoding({L}, {D})")
    assert_roughly(plain, sinusoidal64(L, D), what=f"sinusoidal_encoding({L}, {D})")
    table = subject.call("sinusoidal_encoding", L, D, device=torch.device("meta"))
    on_device(table, plain.shape, "sinusoidal_encoding(device='meta')", TABLE_DEVICE)
    # Explicit positions first: if they work on meta and the default ones do not, the default ones are at fault.
    plain = check_tensor(subject.call("apply_rope", x, torch.arange(L) + 3), what="apply_rope on the CPU (explicit positions)")
    assert_roughly(plain, rope64(x, torch.arange(L) + 3), what="apply_rope on the CPU (explicit positions)")
    got = subject.run(Call(subject.unit, "apply_rope", (x, torch.arange(L) + 3), **on_meta)).output
    check_tensor(got, shape=plain.shape, device_type="meta", what="apply_rope on meta (explicit positions)")
    try:
        got = subject.run(Call(subject.unit, "apply_rope", (x,), **on_meta)).output
    except StudentError as error:
        if "device" not in error.message:
            raise
        raise AssertionError(with_hint(error.describe(), DEFAULT_POSITIONS_DEVICE)) from None
    on_device(got, plain.shape, "apply_rope on meta (default positions)", DEFAULT_POSITIONS_DEVICE)
    x3 = x.reshape(-1, L, D)
    got = subject.run(Call(subject.unit, encoder(D, L + 2), (x3,), {"offset": 1}, **on_meta)).output
    check_tensor(got, shape=x3.shape, device_type="meta", what="SinusoidalPositionalEncoding on meta")


@pytest.mark.points(0)
@pytest.mark.aspect("device")
@settings(max_examples=5)
@given(shape=rope_shapes(), seed=seeds)
def test_cpu_and_cuda_agree(subject, shape, seed):
    """CPU and CUDA give the same result (TF32 off); informational, worth no points"""
    # Checks: G4.
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    x = randn(shape, seed)
    L, D = shape[-2], shape[-1]
    positions = torch.randint(0, 1000, (L,), generator=torch.Generator().manual_seed(seed))
    assert_roughly(subject.call("apply_rope", x, positions), rope64(x, positions), what="apply_rope on the CPU")
    for call in (Call(subject.unit, "apply_rope", (x,)), Call(subject.unit, "apply_rope", (x, positions)),
                 Call(subject.unit, encoder(D, L + 5), (x.reshape(-1, L, D),), {"offset": 2})):
        cpu = subject.run(call).output
        cuda = subject.run(Call(call.unit, call.target, call.args, call.kwargs, device="cuda")).output
        check_tensor(cuda, device_type="cuda", what="output of a CUDA call")
        assert_close(cuda.cpu(), cpu, atol=rope_atol(x, 1000), what="CUDA output against CPU output")
    table = subject.call("sinusoidal_encoding", 64, D, device=torch.device("cuda"))
    check_tensor(table, device_type="cuda", what="sinusoidal_encoding(device='cuda')")
    assert_close(table.cpu(), subject.call("sinusoidal_encoding", 64, D), atol=table_atol(64), what="CUDA table against CPU table")


@pytest.mark.points(1)
@pytest.mark.aspect("layout")
@given(shape=rope_shapes(), seed=seeds)
def test_noncontiguous_inputs_left_unmodified(subject, shape, seed):
    """non-contiguous inputs give the contiguous inputs' results, and no input is modified in place (apply_rope and the module)"""
    # Checks: G6.
    x = randn(shape, seed)
    L, D = shape[-2], shape[-1]
    positions = torch.randint(0, 100, (L,), generator=torch.Generator().manual_seed(seed))
    plain = subject.call("apply_rope", x, positions)
    assert_roughly(plain, rope64(x, positions), what="apply_rope of a contiguous x")
    result = subject.run(Call(subject.unit, "apply_rope", (x, positions), noncontiguous=True))
    unmodified(result, ROPE_IN_PLACE)
    assert_close(result.output, plain, atol=rope_atol(x, 100), what="apply_rope of a non-contiguous x against a contiguous x")
    x3 = x.reshape(-1, L, D)
    module = encoder(D, L + 3)
    plain = check_tensor(subject.run(Call(subject.unit, module, (x3,), {"offset": 2})).output, shape=x3.shape,
                         what="the module's output for a contiguous x")
    assert_roughly(plain.double() - x3.double(), sinusoidal64(L, D, start=2).expand(x3.shape), what="the module's output for a contiguous x, less x")
    result = subject.run(Call(subject.unit, module, (x3,), {"offset": 2}, noncontiguous=True))
    unmodified(result, MODULE_IN_PLACE)
    assert_close(result.output, plain, atol=table_atol(L + 3),
                 what="the module's output for a non-contiguous x against a contiguous x")


@pytest.mark.points(1)
@settings(max_examples=10)
@given(shape=rope_shapes(max_len=6), seed=seeds, dtype=st.sampled_from([torch.float32, torch.float64]))
def test_gradients_flow_to_the_input(subject, shape, seed, dtype):
    """gradients with respect to x are right (float64 to float64 precision): apply_rope's is the upstream gradient rotated back, the module's is the identity"""
    # Checks: P2, P5, G7.
    # Both maps are linear in x, so their gradients are known exactly: R_p^T = R_(-p) for a rotation,
    # the identity for x + PE; float64 is held to float64 tolerance, as in every unit.
    x = randn(shape, seed, dtype=dtype)
    upstream = randn(shape, seed + 1, dtype=dtype)
    L, D = shape[-2], shape[-1]
    positions = torch.randint(0, 50, (L,), generator=torch.Generator().manual_seed(seed))
    try:
        result = subject.run(Call(subject.unit, "apply_rope", (x, positions), grad_outputs=upstream))
    except StudentError as error:
        if error.kind != Failure.BAD_OUTPUT or "no gradient" not in error.message:
            raise
        raise AssertionError(with_hint(error.describe(), ROPE_DETACHED)) from None
    grad = result.arg_grads[0]
    assert_close(grad, rope64(upstream, -positions), what="the gradient of apply_rope(x) with respect to x",
                 dtype=dtype, **tolerance(dtype, atol=rope_atol(upstream, 50), rtol=1e-4))
    x3, up3 = x.reshape(-1, L, D), upstream.reshape(-1, L, D)
    result = subject.run(Call(subject.unit, encoder(D, L + 2), (x3,), {"offset": 1}, dtype=dtype, grad_outputs=up3))
    assert_close(result.arg_grads[0], up3, what="the gradient of the module's output with respect to x", dtype=dtype,
                 **tolerance(dtype, atol=1e-6, rtol=1e-4))
