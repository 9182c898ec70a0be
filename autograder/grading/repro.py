"""Rebuild a failed check from the case its message carries (``<command> repro UNIT PROPERTY --example JSON``).

The case (:mod:`autograder.core.cases`) holds the call's inputs as literals and the values the
grader expected, nothing of the hidden test. :func:`rerun` runs the call on a folder's own
code, in this process as ``check`` does, and returns got beside expected; :func:`snippet` writes
the same case as a Python script to paste into a notebook. It is a student's debugging tool:
the code runs unsandboxed, as the student's own code on their own machine.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import torch

from autograder.core import cases
from autograder.core.manifest import Course
from autograder.core.protocol import Call, New, StudentError, leaves_of, map_nested
from autograder.core.subject import InProcessSubject
from autograder.testing.compare import mismatch


def rerun(course: Course, folder: Path, case: dict) -> tuple[str, bool]:
    """(the report, whether the call now gives the expected value)."""
    call: Call = case["call"]
    subject = InProcessSubject(course, folder, isolate=False)
    lines = [f"the call: {cases.describe(call)}", *(f"  {name} =\n{_show(value)}" for name, value in _inputs(call))]
    problem = subject.status(call.unit)
    if problem:
        return "\n".join(lines + [f"{call.unit} does not load: {problem}"]), False
    try:
        result = subject.run(call)
    except StudentError as error:
        lines.append(error.describe())
        if case["expected"] is not None:
            lines.append(f"expected {case['what']}:\n{_show(case['expected'])}")
        return "\n".join(lines), False
    got = dict(cases.parts(result)).get(case["part"]) if case["part"] else None
    if case["expected"] is None:
        shown = [f"{path} = {_show(t)}" for path, t in cases.parts(result)] or [f"output = {result.output!r}"]
        return "\n".join(lines + ["what your code returns (the property's verdict needs the hidden test):", *shown]), True
    expected = case["expected"]
    got = got if got is not None else _same_shape(result, expected)
    lines += [f"{case['what']}, yours:", _show(got), "expected:", _show(expected)]
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        found = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return "\n".join(lines + [f"expected shape {tuple(expected.shape)}, got {found}"]), False
    problem = mismatch(got, expected, atol=case["atol"], rtol=case["rtol"])
    verdict = problem or f"equal within atol={case['atol']:g}, rtol={case['rtol']:g}"
    return "\n".join(lines + [verdict]), problem is None


def _same_shape(result, expected):
    """The checked value when the case does not say which part it was: the first shaped like it."""
    return next((t for _, t in cases.parts(result) if t.shape == expected.shape), result.output)


def _inputs(call: Call) -> list[tuple[str, torch.Tensor]]:
    """The call's input tensors, named as a student finds them in the call line."""
    named = [(f"arg{i + 1}", a) for i, a in enumerate(call.args)] + list(call.kwargs.items())
    named += [("the object", call.target), ("grad_outputs", call.grad_outputs)]
    return [found for name, value in named for found in cases.named_tensors(name, value)]


def _show(value) -> str:
    if isinstance(value, torch.Tensor):
        torch.set_printoptions(precision=10)  # enough digits to see a float64 difference
        try:
            return textwrap.indent(repr(value), "    ")
        finally:
            torch.set_printoptions(profile="default")
    return repr(value)


# -- the same case as a script --------------------------------------------------------------------

def snippet(course: Course, case: dict) -> str:
    """A Python script that rebuilds the case with the student's own module (the stubs' package,
    which the installed bundle makes importable from anywhere), and compares."""
    call: Call = case["call"]
    # The stubs are a package (a unit imports its siblings relatively), importable once the bundle is installed.
    package = ".".join(course.assignments.relative_to(course.root).parts)
    module = f"{package}.{Path(course.units[call.unit].file).stem}"
    lines = ["import torch", ""]
    recipes = [x for x in [call.target, *leaves_of((call.args, call.kwargs))] if isinstance(x, New)]
    names = [call.target] if isinstance(call.target, str) else []
    names += [r.target for r in recipes if not r.target.startswith("torch.nn.")]
    if names:
        lines.insert(0, f"from {module} import {', '.join(dict.fromkeys(names))}  # your {module.replace('.', '/')}.py")
    if any(isinstance(a, New) for a in leaves_of((call.args, call.kwargs))):
        lines += ["def built(obj, state):", "    obj.load_state_dict(state)", "    return obj", ""]
    lines.append(f"torch.manual_seed({0 if call.seed is None else call.seed})")
    want_grad = call.grad_outputs is not None
    args = [_literal(a, grad=want_grad) for a in call.args]
    kwargs = [f"{k}={_literal(v, grad=want_grad)}" for k, v in call.kwargs.items()]
    for i, a in enumerate(args):
        lines.append(f"arg{i + 1} = {a}")
    if isinstance(call.target, New):
        recipe = call.target
        ctor = ", ".join([_literal(a) for a in recipe.args] + [f"{k}={_literal(v)}" for k, v in recipe.kwargs.items()])
        lines.append(f"obj = {recipe.target}({ctor})")
        if recipe.state is not None:
            lines.append(f"obj.load_state_dict({_literal(recipe.state)})")
        if call.dtype is not None:
            lines.append(f"obj = obj.to({call.dtype})")
        lines.append(f"obj.train({call.train})")
        fn = f"obj.{call.method}" if call.method else "obj"
    else:
        fn = call.target
    call_args = ", ".join([f"arg{i + 1}" for i in range(len(args))] + kwargs)
    lines.append(f"out = {fn}({call_args})")
    if want_grad:
        lines.append(f"grads = {_literal(call.grad_outputs)}")
        lines.append("pairs = [(o, g) for o, g in zip(torch.utils._pytree.tree_leaves(out), "
                     "torch.utils._pytree.tree_leaves(grads)) if g is not None]")
        lines.append("torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])")
    lines.append(f"got = {_part_expression(case['part'])}")
    lines.append("print(got)")
    if case["expected"] is not None:
        lines.append(f"expected = {_literal(case['expected'])}")
        lines.append("print(expected)")
        lines.append(f"torch.testing.assert_close(got, expected, atol={case['atol']!r}, rtol={case['rtol']!r}, "
                     "check_dtype=False)")
    return "\n".join(lines) + "\n"


def _part_expression(part: str | None) -> str:
    if not part or part == "output":
        return "out"
    head, _, rest = part.partition("[")
    keys = [k for k in rest.rstrip("]").split("][")] if rest else []
    if head == "output":
        return "out" + "".join(f"[{k}]" for k in keys)
    if head == "arg_grads":
        return f"arg{int(keys[0]) + 1}.grad"
    if head == "param_grads":
        return f"dict(obj.named_parameters())[{keys[0]!r}].grad"
    return f"out  # {part}"


def _literal(value, *, grad: bool = False) -> str:
    def leaf(x):
        if isinstance(x, torch.Tensor):
            dtype = str(x.dtype)
            if x.device.type == "meta":
                return f"torch.empty({tuple(x.shape)}, dtype={dtype}, device='meta')"
            needs = ", requires_grad=True" if grad and x.is_floating_point() else ""
            return f"torch.tensor({_join(map_nested(x.tolist(), _number))}, dtype={dtype}{needs})"
        if isinstance(x, New):
            ctor = ", ".join([_literal(a) for a in x.args] + [f"{k}={_literal(v)}" for k, v in x.kwargs.items()])
            built = f"{x.target}({ctor})"
            return f"built({built}, {_literal(x.state)})" if x.state is not None else built
        if isinstance(x, torch.dtype):
            return str(x)
        return _number(x)

    return _join(map_nested(value, leaf))


def _number(x) -> str:
    """A value as Python source; infinities and NaN as float('inf') and float('nan')."""
    if isinstance(x, float) and not math.isfinite(x):
        return f"float({str(x)!r})"
    return repr(x)


def _join(value) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_join(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_join(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_join(v)}" for k, v in value.items()) + "}"
    return value
