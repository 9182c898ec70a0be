"""The one interface between a test suite and the code under test.

A suite never imports student code. It describes what to run as a
:class:`Call` (plain data: tensors, numbers, strings and :class:`New` object
recipes) and receives a :class:`Result` (detached tensors, numbers, ``None``).
Because nothing else crosses, the same suite runs against ``solutions/``,
``assignments/`` or any submission folder, in this process or in another one.
"""
from __future__ import annotations

import contextlib
import signal
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from autograder.core import loader
from autograder.core.forbidden import Operators, Traps
from autograder.core.manifest import Course, Unit


@dataclass(frozen=True)
class New:
    """A recipe for an object built inside the subject.

    ``target`` is a class of the call's unit ("MultiHeadAttention") or a class
    of ``torch.nn`` ("torch.nn.RNNCell"); ``state`` is loaded with
    ``load_state_dict(strict=True)`` after construction.
    """

    target: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    state: dict | None = None


@dataclass(frozen=True)
class Call:
    """One thing to run: ``target(*args, **kwargs)`` in ``unit``.

    ``target`` is a function name, or a :class:`New` whose object is called
    (``method`` picks another method than ``__call__``). Tensors are copied to
    ``device`` first (and made non-contiguous views when ``noncontiguous``);
    a constructed object is moved with ``.to(device)`` and, if ``dtype`` is
    given, ``.to(dtype)``. With ``grad_outputs`` (nested like the output,
    ``None`` where no gradient is sent) the result carries the gradients of
    every floating-point input tensor and of every parameter of the object.
    """

    unit: str
    target: str | New
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    method: str | None = None
    train: bool = False
    device: str = "cpu"
    dtype: torch.dtype | None = None
    seed: int | None = None
    grad_outputs: Any = None
    noncontiguous: bool = False
    return_state: bool = False


@dataclass
class Result:
    output: Any
    arg_grads: tuple = ()  # like ``args``: a tensor's gradient, None elsewhere
    kwarg_grads: dict = field(default_factory=dict)
    param_grads: dict = field(default_factory=dict)
    state: dict | None = None  # the object's state_dict after the call
    buffers: dict | None = None  # all its buffers, persistent or not
    mutated: list[str] = field(default_factory=list)  # inputs written in place


class StudentError(Exception):
    """The code under test raised, returned something unusable, or ran too long."""

    def __init__(self, kind: str, message: str, where: str = ""):
        self.kind, self.message, self.where = kind, message, where
        super().__init__(self.describe())

    def describe(self) -> str:
        if self.kind == "NotImplementedError":
            text = "not implemented yet"
        elif self.kind in ("Timeout", "BadOutput", "Unavailable", "Crashed"):  # Crashed: the sandbox lost the worker
            text = self.message
        else:
            text = f"your code raised {self.kind}: {self.message}"
        return f"{text} ({self.where})" if self.where else text


class CallTimeout(BaseException):
    """Raised inside student code when a call runs past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the block with :class:`CallTimeout` after ``seconds`` (main thread, POSIX)."""

    def expire(signum, frame):
        raise CallTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _where(error: BaseException, folder: Path) -> str:
    """The last line of the submission's own code in the traceback."""
    prefix = str(folder.resolve())
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(prefix)]
    return f"{Path(frames[-1].filename).name} line {frames[-1].lineno}" if frames else ""


def map_nested(value, leaf):
    """Apply ``leaf`` to every non-container in a nest of tuples, lists and dicts."""
    if isinstance(value, (tuple, list)):
        return type(value)(map_nested(v, leaf) for v in value)
    if isinstance(value, dict):
        return {k: map_nested(v, leaf) for k, v in value.items()}
    return leaf(value)


def leaves_of(value) -> list:
    out = []
    map_nested(value, out.append)
    return out


_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device)


def export(value, what: str = "output"):
    """Detached copies of the tensors in ``value``; anything else but plain data is refused."""

    def leaf(x):
        if type(x) in (torch.Tensor, torch.nn.Parameter):
            return x.detach().clone()
        if isinstance(x, torch.Tensor):
            raise StudentError("BadOutput", f"the {what} is a {type(x).__name__}, a tensor subclass; return a plain torch.Tensor")
        if isinstance(x, _PLAIN):
            return x
        raise StudentError("BadOutput", f"the {what} holds a {type(x).__name__}; expected tensors, numbers or None")

    return map_nested(value, leaf)


class InProcessSubject:
    """Serve a submission folder from this very process (no sandbox)."""

    def __init__(self, course: Course, folder: Path, *, isolate: bool = True, timeout: float = 10.0):
        self.course, self.folder, self.isolate, self.timeout = course, Path(folder).resolve(), isolate, timeout
        self._modules: dict[str, object] = {}
        self._errors: dict[str, str] = {}
        self._traps = {name: Traps(unit.forbidden, self.folder) for name, unit in course.units.items()}
        self._operators = {name: Operators(unit.forbidden) for name, unit in course.units.items()}
        self._timed_out: str | None = None
        # One thread: the same reduction order on every machine, so even an ill-conditioned
        # (buggy) computation gets the same score everywhere, sandboxed or not.
        torch.set_num_threads(1)

    def begin(self, test_id: str) -> None:
        """A new test starts: a time-out in the previous one no longer applies."""
        self._timed_out = None

    # -- loading -----------------------------------------------------------
    def status(self, unit: str) -> str | None:
        """``None`` when ``unit`` loads, else a message for the student."""
        if unit not in self._modules and unit not in self._errors:
            spec: Unit = self.course.units[unit]
            operators = self._operators[unit]
            try:
                with self._traps[unit].installed(), operators.recording(), time_limit(self.timeout):
                    self._modules[unit] = loader.load_unit(self.course, spec, self.folder, isolate=self.isolate,
                                                           trusted=operators.trust_module)
            except loader.LoadError as error:
                self._errors[unit] = str(error)
        return self._errors.get(unit)

    def runtime_uses(self, unit: str) -> set[str]:
        """Forbidden functions and operators the unit was seen calling so far."""
        return self._traps[unit].seen | self._operators[unit].seen

    # -- running -----------------------------------------------------------
    def run_many(self, calls: list[Call]) -> list[Result | StudentError]:
        out = []
        for call in calls:
            try:
                out.append(self.run(call))
            except StudentError as error:
                out.append(error)
        return out

    def run(self, call: Call) -> Result:
        problem = self.status(call.unit)
        if problem:
            raise StudentError("Unavailable", problem)
        if self._timed_out:
            # One time-out per test: hypothesis would otherwise wait again for every example.
            raise StudentError("Timeout", f"{self._timed_out} earlier in this test")
        module = self._modules[call.unit]
        try:
            # The student's whole call, backward included (a custom autograd.Function runs its code there).
            with self._traps[call.unit].installed(), self._operators[call.unit].recording(), time_limit(self.timeout):
                return self._run(module, call)
        except StudentError:
            raise
        except CallTimeout as error:
            self._timed_out = str(error)
            raise StudentError("Timeout", str(error), _where(error, self.folder)) from None
        except (Exception, SystemExit, KeyboardInterrupt) as error:
            raise StudentError(type(error).__name__, loader.safe_str(error), _where(error, self.folder)) from None

    def _build(self, module, recipe: New, call: Call):
        trusted = recipe.target.startswith("torch.nn.")
        cls = getattr(torch.nn, recipe.target.removeprefix("torch.nn.")) if trusted else getattr(module, recipe.target)
        obj = cls(*recipe.args, **recipe.kwargs)
        if recipe.state is not None:
            obj.load_state_dict(recipe.state, strict=True)
        if trusted:
            # torch's own module, handed to the student's code (unroll a trusted cell): its kernels do not count.
            obj.forward = self._operators[call.unit].trusted(obj.forward)
        return obj.to(call.device)

    def _run(self, module, call: Call) -> Result:
        # Every call starts from a known RNG state (seed 0 unless given), so a module's
        # random init or dropout never depends on what ran before: grades are deterministic.
        torch.manual_seed(0 if call.seed is None else call.seed)
        want_grad = call.grad_outputs is not None
        leaves: dict[int, torch.Tensor] = {}  # id(tensor passed) -> the leaf we differentiate

        def prepare(x):
            if isinstance(x, New):
                return self._build(module, x, call)
            if not isinstance(x, torch.Tensor):
                return x
            leaf = x.detach().clone().to(call.device).requires_grad_(want_grad and x.is_floating_point())
            passed = leaf
            if call.noncontiguous and leaf.dim() >= 2:
                # Same values, transposed storage: .view() over the last dims fails, as on a user's transposed input.
                passed = leaf.mT.contiguous().mT
            elif call.noncontiguous and leaf.dim() == 1:
                passed = torch.stack([leaf, torch.zeros_like(leaf)], dim=-1)[..., 0]  # strided storage
            if leaf.requires_grad:
                leaves[id(passed)] = leaf
            return passed

        args = map_nested(call.args, prepare)
        kwargs = map_nested(call.kwargs, prepare)
        inputs = [t for t in leaves_of((args, kwargs)) if isinstance(t, torch.Tensor)]
        before = [t.detach().clone() for t in inputs]

        obj = self._build(module, call.target, call) if isinstance(call.target, New) else getattr(module, call.target)
        if isinstance(obj, torch.nn.Module):
            if call.dtype is not None:
                obj = obj.to(call.dtype)
            obj.train(call.train)
        fn = getattr(obj, call.method) if call.method else obj
        output = fn(*args, **kwargs)

        result = Result(output=export(output))
        result.mutated = [
            f"input {i + 1}" for i, (old, new) in enumerate(zip(before, inputs))
            if old.device.type != "meta" and not torch.equal(old, new.detach())
        ]
        params = dict(obj.named_parameters()) if isinstance(obj, torch.nn.Module) else {}
        if want_grad:
            self._backward(output, call.grad_outputs, leaves, params, args, kwargs, result, call.device)
        if call.return_state and isinstance(obj, torch.nn.Module):
            result.state = export(dict(obj.state_dict()), "state_dict")
            result.buffers = export(dict(obj.named_buffers()), "buffers")
        return result

    @staticmethod
    def _backward(output, grad_outputs, leaves, params, args, kwargs, result, device):
        outs, grads = [], []
        for out, grad in zip(leaves_of(output), leaves_of(grad_outputs)):
            if isinstance(grad, torch.Tensor):
                if not (isinstance(out, torch.Tensor) and out.requires_grad):
                    raise StudentError("BadOutput", "an output carries no gradient: was it detached or made with torch.no_grad()?")
                outs.append(out)
                grads.append(grad.to(device=device, dtype=out.dtype))
        wrt = list(leaves.values()) + list(params.values())
        found = torch.autograd.grad(outs, wrt, grads, allow_unused=True) if outs and wrt else [None] * len(wrt)
        found = [torch.zeros_like(w) if g is None else g.detach() for w, g in zip(wrt, found)]
        by_passed = dict(zip(leaves, found))

        def grad_of(x):
            return by_passed.get(id(x)) if isinstance(x, torch.Tensor) else None

        result.arg_grads = tuple(map_nested(a, grad_of) for a in args)
        result.kwarg_grads = {k: map_nested(v, grad_of) for k, v in kwargs.items()}
        result.param_grads = dict(zip(params, found[len(leaves):]))
