"""Assertions whose failure messages a student can act on.

Every check validates the type, shape and dtype of what came back before it
compares any value, and names the first differing index with got/expected.
"""
from __future__ import annotations

import torch

from autograder.core.cases import attach
from autograder.core.subject import Result, StudentError


def check_tensor(got, *, shape=None, dtype=None, device_type=None, what="output") -> torch.Tensor:
    problem = None
    if type(got) is not torch.Tensor:
        problem = f"{what}: expected a torch.Tensor, got {type(got).__name__}"
    elif shape is not None and tuple(got.shape) != tuple(shape):
        problem = f"{what}: expected shape {tuple(shape)}, got {tuple(got.shape)}"
    elif dtype is not None and got.dtype != dtype:
        problem = f"{what}: expected dtype {dtype}, got {got.dtype}"
    elif device_type is not None and got.device.type != device_type:
        problem = f"{what}: expected a tensor on {device_type}, got one on {got.device.type}"
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
    where = f"index {index}" if index else "the value"
    return (
        f"{bad.shape[0]} of {ok.numel()} entries differ; first at {where}: got {g[index].item():.6g}, "
        f"expected {e[index].item():.6g} (largest error {worst:.3g})"
    )


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
    shape = f" of shape {tuple(expected.shape)}" if expected.dim() else ""
    message = f"{what}{shape}: {problem}"
    raise attach(AssertionError(message + (f". Hint: {advice}" if advice else "")),
                 got=got, expected=expected, atol=atol, rtol=rtol, what=what)


def assert_raises(run, call, kind: str, *, mentions=()):
    """The call raises ``kind`` and its message mentions every string in ``mentions``."""
    try:
        run(call)
    except StudentError as error:
        if error.kind != kind:
            raise attach(AssertionError(f"expected {kind}, but {error.describe()}"), call=call) from None
        missing = [m for m in mentions if str(m) not in error.message]
        if missing:
            raise attach(AssertionError(
                f"the {kind} message should name {', '.join(map(str, mentions))}; it was: {error.message!r}"
            ), call=call) from None
        return error
    raise attach(AssertionError(f"expected {kind} for {call_summary(call)}, but nothing was raised"), call=call)


def call_summary(call) -> str:
    """``target(...)`` with tensors shown by shape, so a student can replay the call."""
    def show(value) -> str:
        return f"tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else repr(value)

    target = call.target if isinstance(call.target, str) else call.target.target
    args = [show(a) for a in call.args] + [f"{k}={show(v)}" for k, v in call.kwargs.items()]
    return f"{target}({', '.join(args)})"


def assert_unmodified(result: Result) -> None:
    if result.mutated:
        raise AssertionError(f"{', '.join(result.mutated)} was modified in place; inputs must be left unchanged")
