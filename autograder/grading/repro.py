"""Rebuild a failed check from the case its message carries (``<command> repro UNIT PROPERTY --example JSON``).

The case (:mod:`autograder.core.cases`) holds the call's inputs as literals and the values the
grader expected, nothing of the hidden test. :func:`rerun` runs the call on a folder's own
code, in this process as ``check`` does, and returns got beside expected; :func:`snippet` writes
the same case as a Python script to paste into a notebook. It is a student's debugging tool:
the code runs unsandboxed, as the student's own code on their own machine.

Examples are shared between students, so an example is data, never code: both run only what
:class:`Api` admits (the unit's own functions, classes and methods, and the torch modules its
tests hand in), and the script writes every value with ``repr`` and a name only once it is a
plain Python name.
"""
from __future__ import annotations

import keyword
import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import torch

from autograder.core.errors import UsageError
from autograder.core import cases
from autograder.core.i18n import _, translate_text
from autograder.core.manifest import Course
from autograder.core.protocol import Call, New, StudentError, leaves_of, map_nested
from autograder.trust.subject import InProcessSubject
from autograder.testing.compare import mismatch

# nn.Module's read-out of its own tensors: the one method besides the object's own call that the
# grader's cases use (a property that checks parameter names reads it).
READ_OUTS = frozenset({"state_dict"})


@dataclass(frozen=True)
class Api:
    """What an example of one unit may name, as the unit's section of the course's API page
    (course.toml ``[paths] api``) declares it: ``functions`` and ``classes`` open a bullet with
    their signature (``- `softmax(x, dim=-1)` `` or ``- `class RNNCell(nn.Module)` ``); a class's
    methods are the signatures with a result in its bullet (``append(key, value) -> ...``);
    ``handed`` are the torch.nn modules the section names in full (``torch.nn.RNNCell``), those a
    test may hand to the unit's code."""

    unit: str
    functions: frozenset[str]
    classes: dict[str, frozenset[str]]  # class -> its methods
    handed: frozenset[str]  # torch.nn class names

    @classmethod
    def parse(cls, unit: str, section: str) -> Api:
        functions, classes = set(), {}
        for bullet in re.split(r"^- ", section, flags=re.M)[1:]:
            head = re.match(r"`(class )?([A-Za-z_]\w*)\(", bullet)
            if head and head.group(1):
                classes[head.group(2)] = frozenset(re.findall(r"`([A-Za-z]\w*)\([^`]*\)\s*->", bullet))
            elif head:
                functions.add(head.group(2))
        named = {n: getattr(torch.nn, n, None) for n in re.findall(r"`torch\.nn\.([A-Za-z]\w*)", section)}
        handed = frozenset(n for n, c in named.items() if isinstance(c, type) and issubclass(c, torch.nn.Module))
        return cls(unit, frozenset(functions), classes, handed)

    def admit(self, call: Call) -> None:
        """Raise ValueError, naming what is not this API, unless ``call`` names only what it admits:
        one of its functions or classes, a method of that class, objects built from its classes or
        from the torch modules handed in."""
        inner: tuple  # where values may hold recipes: the call's, and what builds its object
        target, inner = call.target, (call.args, call.kwargs, call.grad_outputs)
        if isinstance(target, New):
            if target.target not in self.classes:
                raise UsageError(_("the example builds {target!r} to call it, and {unit}'s classes are {classes}").format(
                    target=target.target, unit=self.unit, classes=_listed(self.classes)))
            methods = self.classes[target.target] | READ_OUTS
            if call.method is not None and call.method not in methods:
                raise UsageError(_("the example calls the method {method!r} of {target}, whose methods here are "
                                   "{methods} (or the object itself)").format(method=call.method, target=target.target,
                                                                              methods=_listed(methods)))
            inner += (target.args, target.kwargs, target.state)
        elif target not in self.functions | set(self.classes):
            raise UsageError(_("the example calls {target!r}, which is not in {unit}'s API: {names}").format(
                target=target, unit=self.unit, names=_listed(self.functions | set(self.classes))))
        elif call.method is not None:
            raise UsageError(_("the example calls a method ({method!r}) of {target}; only an object has methods").format(
                method=call.method, target=target))
        for recipe in _recipes(inner):
            torch_class = recipe.target.removeprefix("torch.nn.") if recipe.target.startswith("torch.nn.") else None
            if recipe.target not in self.classes and torch_class not in self.handed:
                raise UsageError(_("the example builds {target!r}, which is neither a class of {unit} ({classes}) nor a "
                                   "torch module its tests hand in ({modules})").format(
                    target=recipe.target, unit=self.unit, classes=_listed(self.classes),
                    modules=_listed(f"torch.nn.{n}" for n in self.handed)))


def _listed(names) -> str:
    return ", ".join(sorted(names)) or _("none")


def _recipes(value):
    """Every object recipe in ``value``, and those in their own arguments and state."""
    for leaf in leaves_of(value):
        if isinstance(leaf, New):
            yield leaf
            yield from _recipes((leaf.args, leaf.kwargs, leaf.state))


def rerun(course: Course, folder: Path, case: dict, api: Api) -> tuple[str, bool]:
    """(the report, whether the call now gives the expected value). Raises ValueError, before
    anything runs, for a case that names what ``api`` does not admit."""
    call: Call = case["call"]
    api.admit(call)
    subject = InProcessSubject(course, folder, isolate=False)
    lines = [_("the call: {call}").format(call=cases.describe(call)),
             *(f"  {name} =\n{_show(value)}" for name, value in _inputs(call))]
    problem = subject.status(call.unit)
    if problem:
        return "\n".join(lines + [_("{unit} does not load: {problem}").format(unit=call.unit,
                                                                              problem=translate_text(problem))]), False
    try:
        result = subject.run(call)
    except StudentError as error:
        lines.append(error.describe())
        if case["expected"] is not None:
            lines.append(_("expected {what}:").format(what=translate_text(case["what"])) + f"\n{_show(case['expected'])}")
        return "\n".join(lines), False
    got = dict(cases.parts(result)).get(case["part"]) if case["part"] else None
    if case["expected"] is None:
        shown = [f"{path} = {_show(t)}" for path, t in cases.parts(result)] or [f"output = {result.output!r}"]
        return "\n".join(lines + [_("what your code returns (the property's verdict needs the hidden test):"),
                                  *shown]), True
    expected = case["expected"]
    got = got if got is not None else _same_shape(result, expected)
    lines += [_("{what}, yours:").format(what=translate_text(case["what"])), _show(got), _("expected:"), _show(expected)]
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        found = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return "\n".join(lines + [_("expected shape {expected}, got {got}").format(expected=tuple(expected.shape),
                                                                                     got=found)]), False
    problem = mismatch(got, expected, atol=case["atol"], rtol=case["rtol"])
    verdict = problem or _("equal within atol={atol:g}, rtol={rtol:g}").format(atol=case["atol"], rtol=case["rtol"])
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

def snippet(course: Course, case: dict, api: Api) -> str:
    """A Python script that rebuilds the case with the student's own module (the stubs' package,
    which the installed bundle makes importable from anywhere), and compares. Raises ValueError
    for a case that names what ``api`` does not admit."""
    call: Call = case["call"]
    api.admit(call)
    # The stubs are a package (a unit imports its siblings relatively), importable once the bundle is installed.
    package = ".".join(course.assignments.relative_to(course.root).parts)
    module = f"{package}.{Path(course.units[call.unit].file).stem}"
    lines = ["import torch", ""]
    recipes = [x for x in [call.target, *leaves_of((call.args, call.kwargs))] if isinstance(x, New)]
    names = [call.target] if isinstance(call.target, str) else []
    names += [r.target for r in recipes if not r.target.startswith("torch.nn.")]
    if names:
        imported = ", ".join(_name(n) for n in dict.fromkeys(names))
        lines.insert(0, f"from {module} import {imported}  # your {module.replace('.', '/')}.py")
    if any(isinstance(a, New) for a in leaves_of((call.args, call.kwargs))):
        lines += ["def built(obj, state):", "    obj.load_state_dict(state)", "    return obj", ""]
    lines.append(f"torch.manual_seed({0 if call.seed is None else int(call.seed)!r})")
    want_grad = call.grad_outputs is not None
    args = [_literal(a, grad=want_grad) for a in call.args]
    kwargs = [f"{_name(k)}={_literal(v, grad=want_grad)}" for k, v in call.kwargs.items()]
    for i, a in enumerate(args):
        lines.append(f"arg{i + 1} = {a}")
    if isinstance(call.target, New):
        recipe = call.target
        lines.append(f"obj = {_constructor(recipe)}")
        if recipe.state is not None:
            lines.append(f"obj.load_state_dict({_literal(recipe.state)})")
        if call.dtype is not None:
            lines.append(f"obj = obj.to({_literal(call.dtype)})")
        lines.append(f"obj.train({bool(call.train)!r})")
        fn = f"obj.{_name(call.method)}" if call.method else "obj"
    else:
        fn = _name(call.target)
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
        lines.append(f"torch.testing.assert_close(got, expected, atol={float(case['atol'])!r}, "
                     f"rtol={float(case['rtol'])!r}, check_dtype=False)")
    return "\n".join(lines) + "\n"


def _name(text: str) -> str:
    """``text`` where the script writes a name: only a plain Python name, which cannot be more code."""
    if not (isinstance(text, str) and text.isascii() and text.isidentifier() and not keyword.iskeyword(text)):
        raise UsageError(_("{text!r} is not a Python name, so the script cannot use it").format(text=text))
    return text


def _constructor(recipe: New) -> str:
    """``Class(args...)`` of a recipe: the unit's class, or torch.nn's."""
    rest = recipe.target.removeprefix("torch.nn.")
    name = _name(rest) if rest == recipe.target else f"torch.nn.{_name(rest)}"
    ctor = ", ".join([_literal(a) for a in recipe.args] + [f"{_name(k)}={_literal(v)}" for k, v in recipe.kwargs.items()])
    return f"{name}({ctor})"


def _part_expression(part: str | None) -> str:
    if not part or part == "output":
        return "out"
    head, _sep, rest = part.partition("[")
    keys = [k for k in rest.rstrip("]").split("][")] if rest else []
    if head == "output":
        return "out" + "".join(f"[{int(k)!r}]" if k.isdigit() else f"[{k!r}]" for k in keys)
    if head == "arg_grads" and keys and keys[0].isdigit():
        return f"arg{int(keys[0]) + 1}.grad"
    if head == "param_grads" and keys:
        return f"dict(obj.named_parameters())[{keys[0]!r}].grad"
    return f"out  # {part!r}"


def _literal(value, *, grad: bool = False) -> str:
    def leaf(x):
        if isinstance(x, torch.Tensor):
            dtype = str(x.dtype)  # torch's own spelling, 'torch.float64'
            if x.device.type == "meta":
                return f"torch.empty({tuple(x.shape)!r}, dtype={dtype}, device='meta')"
            needs = ", requires_grad=True" if grad and x.is_floating_point() else ""
            return f"torch.tensor({_join(map_nested(x.tolist(), _number))}, dtype={dtype}{needs})"
        if isinstance(x, New):
            return f"built({_constructor(x)}, {_literal(x.state)})" if x.state is not None else _constructor(x)
        if isinstance(x, torch.dtype):
            return str(x)
        if isinstance(x, torch.device):
            return f"torch.device({str(x)!r})"
        return _number(x)

    return _join(map_nested(value, leaf))


def _number(x) -> str:
    """A plain value as Python source, its repr (infinities and NaN as float('inf') and float('nan')):
    nothing else has a repr that is surely a literal."""
    if type(x) not in (int, float, bool, str, type(None)):
        raise UsageError(_("a {type} has no literal the script could write").format(type=type(x).__name__))
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
