"""Assertions whose failure messages a student can act on.

Every check validates the type, shape and dtype of what came back before it
compares any value, and names the first differing index with got/expected.
"""
from __future__ import annotations

import math

import torch

from autograder.core.cases import attach
from autograder.core.i18n import N_, _, translate_text
from autograder.core.protocol import Result, StudentError

__all__ = ["N_", "ROUGHLY", "assert_close", "assert_raises", "assert_roughly", "assert_unmodified", "call_summary", "check_tensor", "close_failure",
           "differ_text", "matching_advice", "mismatch", "proven_advice", "with_hint", "wrong_dtype"]


def check_tensor(got, *, shape=None, dtype=None, device_type=None, what="output") -> torch.Tensor:
    problem = None
    if type(got) is not torch.Tensor:
        problem = _("{what}: expected a torch.Tensor, got {type}").format(what=translate_text(what), type=type(got).__name__)
    elif shape is not None and tuple(got.shape) != tuple(shape):
        problem = _("{what}: expected shape {expected}, got {got}").format(what=translate_text(what), expected=tuple(shape),
                                                                           got=tuple(got.shape))
    elif dtype is not None and got.dtype != dtype:
        problem = wrong_dtype(what, dtype, got.dtype)
    elif device_type is not None and got.device.type != device_type:
        problem = _("{what}: expected a tensor on {expected}, got one on {got}").format(
            what=translate_text(what), expected=device_type, got=got.device.type)
    if problem:
        raise attach(AssertionError(problem), got=got, what=what)
    return got


def mismatch(got: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float) -> str | None:
    """``None`` when close; else where and how they differ."""
    g = got.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    ok = (g - e).abs() <= atol + rtol * e.abs()
    if bool(ok.all()):  # most checks pass: no NaN on either side then (a NaN compares False)
        return None
    ok |= (g == e)  # equal infinities
    ok &= ~(g.isnan() ^ e.isnan())
    ok |= g.isnan() & e.isnan()
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()
    index = tuple(int(i) for i in bad[0])
    worst = (g - e).abs().nan_to_num(float("inf"))[~ok].max().item()
    return differ_text(bad.shape[0], ok.numel(), index, f"{g[index].item():.6g}", f"{e[index].item():.6g}",
                       f"{worst:.3g}")


def wrong_dtype(what: str, expected, got) -> str:
    """What a check says of a tensor of the wrong dtype."""
    return _("{what}: expected dtype {expected}, got {got}").format(what=translate_text(what), expected=expected, got=got)


def differ_text(count: int, total: int, index: tuple, got: str, expected: str, worst: str) -> str:
    """How two tensors differ, their values already written: ``count`` of ``total`` entries, the first
    at ``index`` (``()`` for a single value)."""
    where = _("index {index}").format(index=index) if index else _("the value")
    return _("{count} of {total} entries differ; first at {where}: got {got}, expected {expected} (largest error "
             "{worst})").format(count=count, total=total, where=where, got=got, expected=expected, worst=worst)


def with_hint(message: str, advice: str | None) -> str:
    """``message``, and the advice (a suite's English text, shown in the student's language) after it."""
    return message + _(". Hint: {advice}").format(advice=translate_text(advice)) if advice else message


def close_failure(what: str, expected: torch.Tensor, problem: str, advice: str | None) -> str:
    """The message of a value that is not close to ``expected``: what, its shape, how it differs, the advice."""
    shape = _(" of shape {shape}").format(shape=tuple(expected.shape)) if expected.dim() else ""
    # The label a suite gives the value (what=...) is English, like its advice: shown in the student's language.
    return with_hint(_("{what}{shape}: {problem}").format(what=translate_text(what), shape=shape, problem=problem), advice)


def matching_advice(got, expected: torch.Tensor, hints, *, atol: float, rtol: float) -> set[str]:
    """The advice of every known-wrong answer ``got`` (shaped like ``expected``) matches.

    ``hints`` is [(wrong answer, advice)]. A wrong answer that matches ``expected`` too shows
    nothing on this input and is skipped."""
    return {text for wrong, text in hints or ()
            if isinstance(wrong, torch.Tensor) and wrong.shape == expected.shape
            and mismatch(wrong, expected, atol=atol, rtol=rtol) is not None
            and mismatch(got, wrong, atol=atol, rtol=rtol) is None}


def proven_advice(got, expected: torch.Tensor, hints, *, atol: float, rtol: float) -> str | None:
    """The advice of the one known-wrong answer ``got`` matches, else None: when the answers of
    two different pieces of advice match, the input cannot tell the bugs apart and none is given
    (a hint is proven, never a guess)."""
    found = matching_advice(got, expected, hints, atol=atol, rtol=rtol)
    return found.pop() if len(found) == 1 else None


def assert_close(got, expected: torch.Tensor, *, atol=1e-5, rtol=1e-4, what="output", dtype=None, hints=None):
    """``got`` is a plain tensor shaped like ``expected`` whose values match.

    ``hints`` is a list of ``(wrong_answer, advice)``: the advice is printed when ``got`` is the
    one known-wrong answer it matches (:func:`proven_advice`).
    """
    check_tensor(got, shape=expected.shape, dtype=dtype, what=what)
    problem = mismatch(got, expected, atol=atol, rtol=rtol)
    if problem is None:
        return
    advice = proven_advice(got, expected, hints, atol=atol, rtol=rtol)
    raise attach(AssertionError(close_failure(what, expected, problem, advice)),
                 got=got, expected=expected, atol=atol, rtol=rtol, what=what)


# How far off an anchor of a side-aspect property may be: the relative error, in norm.
ROUGHLY = 0.5


def assert_roughly(got, expected: torch.Tensor, *, what="output"):
    """The anchor of a property about a side aspect (a device, a dtype, a layout, a mode): ``got``,
    the answer on the plain path, is a tensor shaped like ``expected`` whose distance from it is at
    most ``ROUGHLY`` of its norm.

    Such a property compares the code with itself, and this anchor keeps an answer that computes
    nothing (zeros, a constant, an input handed back: all a whole norm off) from earning it, while
    a numerical bug, which the value properties report and name, keeps it. Entries where
    ``expected`` is not finite are not compared. A plain answer of the wrong type or shape fails
    the anchor in the same words: the value properties name that too.
    """
    try:
        check_tensor(got, shape=expected.shape, what=what)
    except AssertionError as error:
        raise attach(AssertionError(_(
            "{problem}: this property compares your code with itself, and it counts once that answer is roughly "
            "right; the properties about values say what is wrong").format(problem=error)), got=got, what=what) from None
    g, e = got.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)
    kept = e.isfinite()
    g, e = g[kept], e[kept]
    scale = e.norm().item()
    off = (g - e).norm().item() / scale if scale > 0 else (0.0 if g.norm().item() == 0 else float("inf"))
    if off <= ROUGHLY:  # a NaN is never <= (and is shown as such)
        return
    raise attach(AssertionError(_(
        "{what} is {off} off the right answer in norm: this property compares your code with itself, and it "
        "counts once that answer is roughly right (within {rough:.0%}); the properties about values say what is "
        "wrong").format(what=translate_text(what), off=f"{off:.0%}" if math.isfinite(off) else off, rough=ROUGHLY)),
        got=got, expected=expected, what=what)


def assert_raises(run, call, kind: str, *, mentions=()):
    """The call raises ``kind`` and its message mentions every string in ``mentions``."""
    try:
        run(call)
    except StudentError as error:
        if error.kind != kind:
            raise attach(AssertionError(_("expected {kind}, but {problem}").format(kind=kind, problem=error.describe())),
                         call=call) from None
        missing = [m for m in mentions if str(m) not in error.message]
        if missing:
            raise attach(AssertionError(_("the {kind} message should name {names}; it was: {message!r}").format(
                kind=kind, names=", ".join(map(str, mentions)), message=error.message)), call=call) from None
        return error
    raise attach(AssertionError(_("expected {kind} for {call}, but nothing was raised").format(
        kind=kind, call=call_summary(call))), call=call)


def call_summary(call) -> str:
    """``target(...)`` with tensors shown by shape, so a student can replay the call."""
    def show(value) -> str:
        return _("tensor of shape {shape}").format(shape=tuple(value.shape)) if isinstance(value, torch.Tensor) \
            else repr(value)

    target = call.target if isinstance(call.target, str) else call.target.target
    args = [show(a) for a in call.args] + [f"{k}={show(v)}" for k, v in call.kwargs.items()]
    return f"{target}({', '.join(args)})"


def assert_unmodified(result: Result) -> None:
    if result.mutated:
        raise AssertionError(_("{inputs} was modified in place; inputs must be left unchanged").format(
            inputs=", ".join(translate_text(m) for m in result.mutated)))
