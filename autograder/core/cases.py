"""A failed check as plain JSON that rebuilds it: the call that made the value, and what it should be.

While a test runs, :class:`UnitSubject` tells :func:`remember` every
call and its result. When a check fails, :func:`attach` finds the call whose result holds the
value that was checked (by identity: the last call is often not the one checked) and records
it on the error with the expected value and the tolerance. The grader's message then ends with
a command carrying :func:`dumps` of that case, so a student can rebuild it anywhere: the JSON
holds the inputs as literals and the expected values as the grader computed them, nothing of
the test's source. It is written only when every tensor is small (:data:`MAX_ELEMENTS`).

The format (:mod:`autograder.core.value_codec`'s, which the sandbox's wire shares): tensors are
``{"tensor": nested list, "dtype": "float64"}``, tuples ``{"tuple": [...]}``, dicts
``{"dict": {...}}``, object recipes ``{"new": target, ...}``, dtypes ``{"dtype": name}``;
infinities and NaN are written as Python's ``json`` writes them.
:data:`SCHEMA` is that format: :func:`loads` refuses any text it does not describe, since
examples are shared between students and ``repro`` runs them.
"""
from __future__ import annotations

import dataclasses
import json
import keyword

import torch

from autograder.core.errors import UsageError
from autograder.core import value_codec
from autograder.core.i18n import N_, _, translate_text
from autograder.core.protocol import Call, New, Result, Subject, leaves_of
from autograder.core.value_codec import dtype_name

MAX_ELEMENTS = 64  # per tensor: what a student can read in a message
MAX_TOTAL = 512  # all tensors of one case together
_KEPT = 16  # calls remembered per test: identity look-up needs only the recent ones

_recent: list[list] = []  # [call, result or None], oldest first


def forget() -> None:
    """A new test starts."""
    _recent.clear()


def remember(call: Call) -> list:
    """Record ``call`` before it runs (a call that raises is still the case); returns the entry
    whose second item the caller sets to the result."""
    entry = [call, None]
    _recent.append(entry)
    del _recent[:-_KEPT]
    return entry


def named_tensors(name: str, value) -> list[tuple[str, torch.Tensor]]:
    """Every tensor in ``value`` (nested tuples, lists, dicts, an object recipe's state), with its
    path from ``name``: ``output[1]``, ``param_grads[w]``, ``arg1.state[w]``."""
    if isinstance(value, torch.Tensor):
        return [(name, value)]
    if isinstance(value, (tuple, list)):
        return [found for i, v in enumerate(value) for found in named_tensors(f"{name}[{i}]", v)]
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in named_tensors(f"{name}[{k}]", v)]
    if isinstance(value, New) and value.state:
        return named_tensors(f"{name}.state", value.state)
    return []


def parts(result: Result) -> list[tuple[str, torch.Tensor]]:
    """Every tensor of ``result`` with its path: ``output``, ``output[1]``, ``arg_grads[0]``, ``param_grads[w]``."""
    return [found for name in ("output", "arg_grads", "kwarg_grads", "param_grads")
            for found in named_tensors(name, getattr(result, name))]


def attach(error: BaseException, *, got=None, expected: torch.Tensor | None = None, atol: float = 0.0,
           rtol: float = 0.0, what: str = "output", call: Call | None = None) -> BaseException:
    """Record on ``error`` the case that rebuilds it (see the module's docstring); returns ``error``."""
    part = None
    if call is None:
        for entry in reversed(_recent):
            hit = next((p for p, t in parts(entry[1]) if t is got), None) if entry[1] is not None else None
            if hit is not None:
                call, part = entry[0], hit
                break
    if call is None and _recent:
        call = _recent[-1][0]
    if call is not None:
        # The case rides on the exception itself, whatever its class: an attribute no stub declares.
        error.case = {"call": call, "part": part, "expected": expected, "atol": atol, "rtol": rtol, "what": what}  # type: ignore[attr-defined]
    return error


def last_call() -> Call | None:
    """The call of this test that ran last (the one that raised, if one did)."""
    return _recent[-1][0] if _recent else None


def describe(call: Call) -> str:
    """The call in one line, tensors by shape and dtype: ``f(<tensor (2, 3) float32>, is_causal=True)``."""
    def arg(value) -> str:
        if isinstance(value, torch.Tensor):
            return f"<tensor {tuple(value.shape)} {dtype_name(value.dtype)}>"
        if isinstance(value, New):
            return f"{value.target}({arguments(value.args, value.kwargs)})"
        if isinstance(value, (tuple, list)):
            inner = ", ".join(arg(v) for v in value)
            return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else (
                f"({inner})" if isinstance(value, tuple) else f"[{inner}]")
        return repr(value)

    def arguments(args, kwargs) -> str:
        return ", ".join([arg(a) for a in args] + [f"{k}={arg(v)}" for k, v in kwargs.items()])

    target = arg(call.target) + (f".{call.method}" if call.method else "") if isinstance(call.target, New) else call.target
    extras = [f"{name}={getattr(call, name)!r}" for name in ("train", "device", "dtype", "seed", "noncontiguous")
              if getattr(call, name) != _CALL_DEFAULTS[name]]
    return f"{target}({arguments(call.args, call.kwargs)})" + (f"   [{', '.join(extras)}]" if extras else "")


# -- JSON ---------------------------------------------------------------------------------------
# The structure is autograder.core.value_codec's (as the sandbox's wire has it), written for a
# reader; a tensor is its numbers.

class _Encoder(value_codec.Encoder):
    exact = False

    def tensor(self, t: torch.Tensor) -> dict:
        if t.device.type == "meta":
            return {"tensor": None, "shape": list(t.shape), "dtype": dtype_name(t.dtype)}
        return {"tensor": t.detach().cpu().tolist(), "dtype": dtype_name(t.dtype)}


class _Decoder(value_codec.Decoder):
    """What :data:`SCHEMA` admitted, rebuilt (torch may still refuse it: ragged lists...)."""

    exact = False
    dtypes = {dtype_name(v): v for v in vars(torch).values() if isinstance(v, torch.dtype)}  # every dtype torch names

    def device(self, name) -> torch.device:
        return torch.device(name)

    def tensor(self, x: dict) -> torch.Tensor:
        if not x.keys() <= _TENSOR_FIELDS:
            raise UsageError(_("unexpected fields in a tensor"))
        dtype = self.dtype(x.get("dtype"))
        if x["tensor"] is None:
            return torch.empty(x["shape"], dtype=dtype, device="meta")
        return torch.tensor(x["tensor"], dtype=dtype)


_TENSOR_FIELDS = frozenset(("tensor", "dtype", "shape"))
_encode, _decode = _Encoder().value, _Decoder().value


_CALL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Call) if f.default is not dataclasses.MISSING}


def dumps(unit: str, case: dict) -> str | None:
    """The case as one line of JSON, or None when a tensor in it is too big to print."""
    call: Call = case["call"]
    fields = {f.name: getattr(call, f.name) for f in dataclasses.fields(Call)}
    kept = {k: v for k, v in fields.items() if k in ("unit", "target") or v != _CALL_DEFAULTS.get(k)}
    kept.pop("measure", None)  # a storage count is not something to rebuild by hand
    sizes = [t.numel() for t in leaves_of(_tensors([kept, case["expected"]])) if isinstance(t, torch.Tensor)]
    if any(n > MAX_ELEMENTS for n in sizes) or sum(sizes) > MAX_TOTAL:
        return None
    call_data = {k: _encode(v) for k, v in kept.items()}
    # The call's own args and kwargs are always a tuple and a dict: written plainly, for the reader.
    call_data["args"] = [_encode(a) for a in call.args]
    call_data["kwargs"] = {k: _encode(v) for k, v in call.kwargs.items()}
    data = {"unit": unit, "call": call_data, "part": case["part"], "what": case["what"]}
    if case["expected"] is not None:
        data.update(expected=_encode(case["expected"]), atol=case["atol"], rtol=case["rtol"])
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _tensors(value):
    """``value`` with object recipes opened up, so their states count towards the size."""
    if isinstance(value, New):
        return (value.args, value.kwargs, value.state or {})
    if isinstance(value, (tuple, list)):
        return [_tensors(v) for v in value]
    if isinstance(value, dict):
        return [_tensors(v) for v in value.values()]
    return value


# -- the format, as a JSON schema --------------------------------------------------------------

# jsonschema matches a pattern with Python's re.search, whose `$` also matches before a final
# newline: every pattern here ends with `\Z`, the end of the text.
_NAME = r"^[A-Za-z_][A-Za-z0-9_]*\Z"  # an ASCII Python name: what the snippet may write unquoted
_KEYWORD = {"type": "string", "pattern": _NAME, "not": {"enum": keyword.kwlist}}  # a name `k=` can take
_DTYPES = sorted(_Decoder.dtypes)
_PLAIN = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*\Z"  # printed as it is: no terminal control sequences
_DEVICE = {"type": "string", "pattern": r"^[a-z]+(:[0-9]+)?\Z"}
_REF = {name: {"$ref": f"#/$defs/{name}"} for name in ("value", "numbers", "tensor", "new", "dtype", "tuple", "dict")}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["unit", "call"],
    "additionalProperties": False,
    "properties": {
        "unit": {"type": "string", "pattern": _NAME},
        "call": {
            "type": "object",
            "required": ["unit", "target"],
            "additionalProperties": False,  # exactly Call's fields
            "properties": {
                "unit": {"type": "string", "pattern": _NAME},
                "target": {"anyOf": [{"type": "string", "pattern": _NAME}, _REF["new"]]},
                "args": {"type": "array", "items": _REF["value"]},
                "kwargs": {"type": "object", "propertyNames": _KEYWORD, "additionalProperties": _REF["value"]},
                "method": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": _NAME}]},
                "train": {"type": "boolean"},
                "device": _DEVICE,
                "dtype": {"anyOf": [{"type": "null"}, _REF["dtype"]]},
                "seed": {"type": ["integer", "null"]},
                "grad_outputs": _REF["value"],
                "noncontiguous": {"type": "boolean"},
                "return_state": {"type": "boolean"},
                "measure": {"type": "boolean"},
            },
        },
        # Where the checked value sits in the result: output[1], param_grads[q_proj.weight]...
        "part": {"anyOf": [{"type": "null"}, {"type": "string", "pattern":
                                               r"^(output|arg_grads|kwarg_grads|param_grads)(\[[A-Za-z0-9_.]+\])*\Z"}]},
        "what": {"type": "string", "pattern": _PLAIN, "maxLength": 1000},
        "expected": {"anyOf": [{"type": "null"}, _REF["tensor"]]},
        "atol": {"type": "number", "minimum": 0},
        "rtol": {"type": "number", "minimum": 0},
    },
    "$defs": {
        "value": {"anyOf": [
            {"type": ["null", "boolean", "number", "string"]},
            {"type": "array", "items": _REF["value"]},
            _REF["tensor"], _REF["new"], _REF["dtype"], _REF["tuple"], _REF["dict"],
            {"type": "object", "required": ["device"], "additionalProperties": False,
             "properties": {"device": _DEVICE}},
        ]},
        "numbers": {"anyOf": [{"type": ["number", "boolean"]}, {"type": "array", "items": _REF["numbers"]}]},
        "tensor": {
            "type": "object", "required": ["tensor", "dtype"], "additionalProperties": False,
            "properties": {"tensor": {"anyOf": [{"type": "null"}, _REF["numbers"]]}, "dtype": {"enum": _DTYPES},
                           "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
            # A meta tensor is its shape alone.
            "if": {"properties": {"tensor": {"type": "null"}}}, "then": {"required": ["shape"]},
        },
        "new": {
            "type": "object", "required": ["new", "args", "kwargs"], "additionalProperties": False,
            "properties": {
                "new": {"type": "string", "pattern": r"^(torch\.nn\.)?[A-Za-z_][A-Za-z0-9_]*\Z"},
                "args": _REF["tuple"],
                "kwargs": {"type": "object", "required": ["dict"], "additionalProperties": False,
                           "properties": {"dict": {"type": "object", "propertyNames": _KEYWORD,
                                                   "additionalProperties": _REF["value"]}}},
                "state": _REF["dict"],
            },
        },
        "dtype": {"type": "object", "required": ["dtype"], "additionalProperties": False,
                  "properties": {"dtype": {"enum": _DTYPES}}},
        "tuple": {"type": "object", "required": ["tuple"], "additionalProperties": False,
                  "properties": {"tuple": {"type": "array", "items": _REF["value"]}}},
        "dict": {"type": "object", "required": ["dict"], "additionalProperties": False,
                 "properties": {"dict": {"type": "object", "additionalProperties": _REF["value"]}}},
    },
}


def loads(text: str) -> dict:
    """A case written by :func:`dumps`: ``call`` is a :class:`Call` again. Raises ValueError,
    naming the first place that differs, for any text :data:`SCHEMA` does not describe."""
    import jsonschema  # here, not at the top: only repro reads cases, and no sandboxed worker has it

    try:
        data = json.loads(text)
        problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMA).iter_errors(data))
    except RecursionError:
        raise UsageError(_("the example is nested too deeply to be a case the grader wrote")) from None
    except json.JSONDecodeError as error:
        raise UsageError(_("the example is not JSON ({problem} at character {position})").format(
            problem=translate_text(error.msg), position=error.pos)) from None
    if problem is not None:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in problem.absolute_path).lstrip(".")
        # The validator's words in the student's language (SCHEMA_PROBLEMS), then clipped.
        raise UsageError(_("the example is not a case the grader wrote ({where}: {problem})").format(
            where=where or _("the whole example"), problem=_clip(translate_text(problem.message))))
    raw = dict(data["call"])
    args, kwargs = raw.pop("args", []), raw.pop("kwargs", {})
    try:  # well formed, yet torch may refuse it: ragged lists, an unknown device, an int past int64
        call = {k: _decode(v) for k, v in raw.items()}
        call["args"] = tuple(_decode(a) for a in args)
        call["kwargs"] = {k: _decode(v) for k, v in kwargs.items()}
        expected = _decode(data.get("expected"))
    except (RuntimeError, TypeError, OverflowError) as error:
        raise UsageError(_("the example's values cannot be rebuilt: {problem}").format(problem=_clip(str(error)))) from None
    return {"unit": data["unit"], "call": Call(**call), "part": data.get("part"), "what": data.get("what", "output"),
            "expected": expected, "atol": float(data.get("atol", 0.0)), "rtol": float(data.get("rtol", 0.0))}


# What jsonschema and json say of a text that is not a case (the validators SCHEMA uses), for the
# catalogue: a student reads them, in their language, inside the messages above.
SCHEMA_PROBLEMS = (
    N_("{value} is a required property"), N_("{value} is not of type {types}"),
    N_("Additional properties are not allowed ({names} was unexpected)"),
    N_("Additional properties are not allowed ({names} were unexpected)"), N_("{value} does not match {pattern}"),
    N_("{value} is not valid under any of the given schemas"), N_("{value} is less than the minimum of {minimum}"),
    N_("{value} is too long"), N_("{value} is not one of {values}"),
    N_("Expecting value"), N_("Expecting property name enclosed in double quotes"), N_("Expecting ':' delimiter"),
    N_("Expecting ',' delimiter"), N_("Extra data"), N_("Unterminated string starting at"),
    N_("Invalid control character at"), N_("Invalid \\escape"), N_("Invalid \\uXXXX escape"),
)


def _clip(text: str, limit: int = 160) -> str:
    """A validator's message quotes the offending value: enough of it to recognise."""
    return text if len(text) <= limit else text[:limit] + "..."


class UnitSubject:
    """A subject as one unit's tests see it (the suites' ``subject`` argument): the unit comes
    from the test module's ``unit`` marker, so a suite writes ``subject.call("softmax", x)``
    for the output of ``softmax(x)``, or ``subject.run(Call(subject.unit, ...))`` for a whole
    :class:`Result` (gradients, state)."""

    def __init__(self, subject: Subject, unit: str):
        self.subject, self.unit = subject, unit

    def run(self, call: Call) -> Result:
        entry = remember(call)  # what a failed check's message rebuilds
        entry[1] = self.subject.run(call)
        return entry[1]

    def call(self, target: str | New, *args, **kwargs):
        """The output of ``target(*args, **kwargs)`` in this unit."""
        return self.run(Call(self.unit, target, args, kwargs)).output
