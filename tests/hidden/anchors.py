"""Anchoring relative properties to the oracles (issue 13, "nothing for nothing").

A relative check (the gradients agree with finite differences, the output is
unchanged under some change of input) holds for a constant answer too, so each
such property also compares one answer it already has with its oracle.

Every comparison of the five suites also goes through ``assert_close`` here
(issue 16): one precision policy, values printed with enough digits, and a
hint only when the answer is proven to be that of one catalogued bug.
"""
from __future__ import annotations

import torch

from autograder.core.cases import attach
from autograder.core.protocol import StudentError
from autograder.testing.compare import (N_, assert_raises, check_tensor, close_failure, differ_text, matching_advice, mismatch,
                                        with_hint, wrong_dtype)
from autograder.testing.gradcheck import check_gradients


def check_gradients_of(subject, build, tensors, *, expect, **options):
    """``check_gradients`` on ``subject``, after ``expect(output)`` has checked the output at
    ``tensors`` (its first call) against the oracle: a wrong value, float64 computed in lower
    precision included, is then reported as such, before any finite difference."""
    checked = []

    def run(call):
        result = subject.run(call)
        if not checked:
            expect(result.output)
            checked.append(True)
        return result

    check_gradients(run, build, tensors, **options)


# -- one precision policy, and hints that are proven ------------------------------
#
# The API page: a computation may upcast (bfloat16 to float32) but never downcast, so
# float64 inputs are computed in float64 and their results compared at float64
# tolerance. Every suite takes its float64 tolerance from ``tolerance`` and compares
# through ``assert_close`` below, so the rule and its hint are written once.

FLOAT64 = dict(atol=1e-10, rtol=1e-9)
DOWNCAST = N_("float64 input computed in lower precision? A computation may upcast but never downcast "
              "(API page): compute float64 inputs in float64.")


def tolerance(dtype, **lower) -> dict:
    """``atol``/``rtol`` for results of ``dtype``: float64 tolerance for float64, else ``lower``."""
    return dict(FLOAT64) if dtype == torch.float64 else lower


def differ(got, expected, atol, rtol) -> bool:
    """``got`` and ``expected`` are both tensors of one shape that are not close."""
    return (isinstance(got, torch.Tensor) and got.shape == expected.shape
            and mismatch(got, expected, atol=atol, rtol=rtol) is not None)


def proven_hint(got, expected, hints, *, atol, rtol) -> str | None:
    """The advice of the one catalogued bug whose answer ``got`` matches, else None.

    ``hints`` is [(wrong answer, advice)]; a wrong answer that also matches
    ``expected`` shows nothing on this input and is skipped. When two different
    bugs match, the counterexample cannot tell them apart and no hint is given.
    The downcast of float64 (see ``DOWNCAST``) is one of the catalogued bugs, proven by
    :func:`computed_in_float32`, not guessed from the size of the error.
    """
    found = matching_advice(got, expected, hints, atol=atol, rtol=rtol)  # (the engine's rule, the downcast added)
    if computed_in_float32(got, expected):
        found.add(DOWNCAST)
    return found.pop() if len(found) == 1 else None


def computed_in_float32(got, expected) -> bool:
    """A float64 answer close to the right one whose every entry is a float32 number, one at least
    needing more digits than float16 has, where the right answer is no float32 number: the work was
    done in float32 and cast up at the end. (A float64 computation lands on a float32 number by
    chance about once in 2**29; a small error alone, such as a slightly wrong scale, proves nothing,
    and an answer far off, which may repeat float32 inputs, has another bug.)"""
    def held_by(t, dtype):
        return torch.eq(t.to(dtype).double(), t)

    if not (got.dtype == expected.dtype == torch.float64 and got.shape == expected.shape):
        return False
    finite = got.isfinite()
    return (bool(finite.any()) and bool(held_by(got[finite], torch.float32).all())
            and not bool(held_by(got[finite], torch.float16).all())
            and not bool(held_by(expected[expected.isfinite()], torch.float32).all())
            and mismatch(got, expected, atol=1e-6, rtol=1e-5) is None)


def _digits(g: float, e: float) -> int:
    """Enough significant digits that ``g`` and ``e`` print differently."""
    for digits in range(6, 18):
        if f"{g:.{digits}g}" != f"{e:.{digits}g}":
            return digits
    return 17


def describe(got, expected, *, atol, rtol) -> str:
    """Where and how ``got`` differs from ``expected`` (as ``compare.mismatch`` says it), with the
    first differing pair printed with enough digits to tell them apart (2.08e-08 apart in float64)."""
    g, e = got.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)
    ok = ((g - e).abs() <= atol + rtol * e.abs()) | (g == e) | (g.isnan() & e.isnan())
    ok &= ~(g.isnan() ^ e.isnan())
    bad = (~ok).nonzero()
    index = tuple(int(i) for i in bad[0])
    worst = (g - e).abs().nan_to_num(float("inf"))[~ok].max().item()
    gi, ei = g[index].item(), e[index].item()
    digits = _digits(gi, ei)
    return differ_text(bad.shape[0], ok.numel(), index, f"{gi:.{digits}g}", f"{ei:.{digits}g}", f"{worst:.3g}")


def assert_close(got, expected, *, atol=1e-5, rtol=1e-4, what="output", dtype=None, hints=None):
    """``compare.assert_close`` under the course's rules: values printed with enough digits,
    and a hint only when it is proven (``proven_hint``).

    ``hints`` is [(wrong answer, advice)] or a function returning it, called only on failure.
    """
    if dtype == torch.float64 and isinstance(got, torch.Tensor) and got.dtype in (torch.float32, torch.bfloat16,
                                                                                 torch.float16):
        check_tensor(got, shape=expected.shape, what=what)  # a float64 answer held in fewer bits: proven
        raise attach(AssertionError(with_hint(wrong_dtype(what, dtype, got.dtype), DOWNCAST)), got=got, what=what)
    check_tensor(got, shape=expected.shape, dtype=dtype, what=what)
    if mismatch(got, expected, atol=atol, rtol=rtol) is None:
        return
    advice = proven_hint(got, expected, hints() if callable(hints) else hints or (), atol=atol, rtol=rtol)
    raise attach(AssertionError(close_failure(what, expected, describe(got, expected, atol=atol, rtol=rtol), advice)),
                 got=got, expected=expected, atol=atol, rtol=rtol, what=what)


# -- proven advice for what no tensor shows ----------------------------------------------------
#
# ``proven_hint``'s rule for outcomes that are no tensor (an exception's kind, the names a module
# holds, the size of a tensor a call made): the advice of the one catalogued wrong outcome, else none.

def told(outcome, known) -> str | None:
    """The advice of the one catalogued wrong outcome that ``outcome`` is, else None. ``known`` is
    [(test of an outcome, advice)]."""
    found = {text for test, text in known if test(outcome)}
    return found.pop() if len(found) == 1 else None


def known_answer(got, known) -> str | None:
    """:func:`told` for answers compared by equality: ``known`` is [(wrong answer, advice)]."""
    return told(got, [(lambda outcome, wrong=wrong: outcome == wrong, text) for wrong, text in known])


def hinted(error: BaseException, advice: str | None) -> BaseException:
    """``error`` with ``advice`` (when there is one) after its message: the same exception, so that it
    keeps the case that rebuilds it."""
    if advice:
        error.args = (with_hint(str(error), advice),)
    return error


def raises_with_advice(subject, call, advice, fine, *, mentions=()):
    """``assert_raises(..., "ValueError")``; its failure is followed by ``advice`` when ``fine``, the same
    call with the argument made good, runs: the bad argument is then what went unchecked."""
    try:
        assert_raises(subject.run, call, "ValueError", mentions=mentions)
    except AssertionError as error:
        try:
            subject.run(fine)
        except StudentError:
            raise error from None
        raise hinted(error, advice) from None
