"""A failed check as plain JSON that rebuilds it: the call that made the value, and what it should be.

While a test runs, :class:`~autograder.core.protocol.UnitSubject` tells :func:`remember` every
call and its result. When a check fails, :func:`attach` finds the call whose result holds the
value that was checked (by identity: the last call is often not the one checked) and records
it on the error with the expected value and the tolerance. The grader's message then ends with
a command carrying :func:`dumps` of that case, so a student can rebuild it anywhere: the JSON
holds the inputs as literals and the expected values as the grader computed them, nothing of
the test's source. It is written only when every tensor is small (:data:`MAX_ELEMENTS`).

The format: tensors are ``{"tensor": nested list, "dtype": "float64"}``, tuples
``{"tuple": [...]}``, dicts ``{"dict": {...}}``, object recipes ``{"new": target, ...}``, dtypes
``{"dtype": name}``; infinities and NaN are written as Python's ``json`` writes them.
"""
from __future__ import annotations

import dataclasses
import json

import torch

from autograder.core.protocol import Call, New, Result, leaves_of

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
        error.case = {"call": call, "part": part, "expected": expected, "atol": atol, "rtol": rtol, "what": what}
    return error


def last_call() -> Call | None:
    """The call of this test that ran last (the one that raised, if one did)."""
    return _recent[-1][0] if _recent else None


def describe(call: Call) -> str:
    """The call in one line, tensors by shape and dtype: ``f(<tensor (2, 3) float32>, is_causal=True)``."""
    def arg(value) -> str:
        if isinstance(value, torch.Tensor):
            return f"<tensor {tuple(value.shape)} {_dtype_name(value.dtype)}>"
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

def _encode(value):
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta":
            return {"tensor": None, "shape": list(value.shape), "dtype": _dtype_name(value.dtype)}
        return {"tensor": value.detach().cpu().tolist(), "dtype": _dtype_name(value.dtype)}
    if isinstance(value, New):
        out = {"new": value.target, "args": _encode(value.args), "kwargs": _encode(value.kwargs)}
        if value.state is not None:
            out["state"] = _encode(value.state)
        return out
    if isinstance(value, torch.dtype):
        return {"dtype": _dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(v) for k, v in value.items()}}
    return value


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "tensor" in value:
        dtype = getattr(torch, value["dtype"])
        if value["tensor"] is None:
            return torch.empty(value["shape"], dtype=dtype, device="meta")
        return torch.tensor(value["tensor"], dtype=dtype)
    if "new" in value:
        state = value.get("state")
        return New(value["new"], _decode(value["args"]), _decode(value["kwargs"]),
                   None if state is None else _decode(state))
    if "dtype" in value:
        return getattr(torch, value["dtype"])
    if "device" in value:
        return torch.device(value["device"])
    if "tuple" in value:
        return tuple(_decode(v) for v in value["tuple"])
    if "dict" in value:
        return {k: _decode(v) for k, v in value["dict"].items()}
    raise ValueError(f"not a case value: {value!r}")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


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


def loads(text: str) -> dict:
    """A case written by :func:`dumps`: ``call`` is a :class:`Call` again."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("call"), dict):
        raise ValueError("the example is not a case written by the grader (it has no 'call')")
    raw = dict(data["call"])
    args, kwargs = raw.pop("args", []), raw.pop("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError("the example's args must be a list and its kwargs an object")
    call = {k: _decode(v) for k, v in raw.items()}
    call["args"] = tuple(_decode(a) for a in args)
    call["kwargs"] = {k: _decode(v) for k, v in kwargs.items()}
    known = {f.name for f in dataclasses.fields(Call)}
    unknown = set(call) - known
    if unknown:
        raise ValueError(f"the example's call has unknown fields: {', '.join(sorted(unknown))}")
    if "unit" not in call or "target" not in call:
        raise ValueError("the example's call names no unit or target")
    return {"unit": data.get("unit", call["unit"]), "call": Call(**call), "part": data.get("part"),
            "what": data.get("what", "output"), "expected": _decode(data.get("expected")),
            "atol": float(data.get("atol", 0.0)), "rtol": float(data.get("rtol", 0.0))}
