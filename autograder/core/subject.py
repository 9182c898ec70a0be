"""The in-process subject: serve a submission folder's units from this very process.

The sandbox's workers serve their unit with one of these; ``--no-sandbox``
grading and the notebook's public tests use it directly.
"""
from __future__ import annotations

import contextlib
import os
import signal
import traceback
import types
from pathlib import Path
from typing import cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode  # the engine's own, trusted use

from autograder.core import enforce, loader
from autograder.core.i18n import N_
from autograder.core.manifest import CourseUnits, Unit
from autograder.core.protocol import Call, Failure, New, Result, StudentError, leaves_of, map_nested
from autograder.core.settings import DEFAULTS


class CallTimeout(BaseException):
    """Raised inside student code when a call runs past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the block with :class:`CallTimeout` after ``seconds`` (main thread, POSIX)."""

    def expire(signum, frame):
        raise CallTimeout(N_("timed out after {seconds:g} s").format(seconds=seconds))

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Timeouts:
    """The calls of each unit that ran past the time limit; both subjects keep one, so a
    submission gets the same failures sandboxed or not.

    After ``allowed`` such calls of one unit (the course's ``timeouts_per_unit``, two by default)
    its further calls fail at once: an endless loop, the commonest student bug, then costs two
    limits per unit instead of one per test. Code that never hits the limit is never affected,
    however slow."""

    def __init__(self, seconds: float, allowed: int = DEFAULTS.timeouts_per_unit):
        self.seconds, self.allowed = seconds, allowed
        self._first: dict[str, str] = {}  # unit -> the first call that timed out, for the message
        self._count: dict[str, int] = {}

    def record(self, call: Call, where: str) -> None:
        entry = call.target.target if isinstance(call.target, New) else call.target
        name = f"{entry}.{call.method}" if call.method else entry
        self._first.setdefault(call.unit, N_("{name}, at {where}").format(name=name, where=where) if where else name)
        self._count[call.unit] = self._count.get(call.unit, 0) + 1

    def exhausted(self, unit: str) -> str | None:
        """Why every further call of ``unit`` fails at once, or None."""
        if self._count.get(unit, 0) < self.allowed:
            return None
        return N_("time budget exhausted: an endless loop? {count} calls ran past the {seconds:g} s limit (the first: "
                  "{first}), so this unit's remaining calls fail without running: make that code return within the "
                  "limit").format(count=self._count[unit], seconds=self.seconds, first=self._first[unit])


def _where(error: BaseException, folder: Path) -> str:
    """The last line of the submission's own code in the traceback."""
    prefix = str(folder.resolve())
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if f.filename.startswith(prefix) and not Path(f.filename).name.startswith("<")]  # not enforce's <call>
    return N_("{file} line {line}").format(file=Path(frames[-1].filename).name, line=frames[-1].lineno) if frames else ""


_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device)


def export(value, what: str = "output"):
    """Detached copies of the tensors in ``value``; anything else but plain data is refused."""

    def leaf(x):
        if type(x) in (torch.Tensor, torch.nn.Parameter):
            return x.detach().clone()
        if isinstance(x, torch.Tensor):
            raise StudentError(Failure.BAD_OUTPUT, N_("the {what} is a {type}, a tensor subclass; return a plain "
                                                      "torch.Tensor").format(what=what, type=type(x).__name__))
        if isinstance(x, _PLAIN):
            return x
        raise StudentError(Failure.BAD_OUTPUT, N_("the {what} holds a {type}; expected tensors, numbers or "
                                                  "None").format(what=what, type=type(x).__name__))

    return map_nested(value, leaf)


# The C methods themselves, for what the worker reports beside answers (memory, inputs changed): a unit
# may patch torch's Python classes in its worker (`type(x).element_size = ...` is an attribute store
# no scan can pin to a class), never these.
_ELEMENT_SIZE = torch._C.TensorBase.element_size
_STORAGE = torch._C.TensorBase.untyped_storage
_NBYTES = torch._C.StorageBase.nbytes  # type: ignore[attr-defined]  # torch's stubs leave it out; it is there
_DETACH = torch._C.TensorBase.detach
_CLONE = torch._C.TensorBase.clone


class _LargestStorage(TorchDispatchMode):
    """The most elements any storage an operator makes during the block holds (views share
    their base's storage, so an ``expand`` costs nothing, as in memory)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    @enforce.transparent  # the kernels it runs are the caller's
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in leaves_of(out):
            if isinstance(t, torch.Tensor) and (size := _ELEMENT_SIZE(t)):
                self.largest = max(self.largest, _NBYTES(_STORAGE(t)) // size)
        return out


class InProcessSubject:
    """Serve a submission folder from this very process (no sandbox)."""

    def __init__(self, course: CourseUnits, folder: Path, *, isolate: bool = True, timeout: float | None = None):
        timeout = course.limits.call_timeout if timeout is None else timeout
        self.course, self.folder, self.isolate, self.timeout = course, Path(folder).resolve(), isolate, timeout
        self.failure: str | None = None  # nothing here can break apart from the student's code
        self._modules: dict[str, object] = {}
        self._errors: dict[str, str] = {}
        enforce.install(course.kernels)
        self._refused: dict[str, set[str]] = {name: set() for name in course.units}  # kernel families refused
        self._call = enforce.student_caller(self.folder)
        self._timed_out: str | None = None
        self._timeouts = Timeouts(timeout, course.limits.timeouts_per_unit)
        # One thread: the same reduction order on every machine, so even an ill-conditioned
        # (buggy) computation gets the same score everywhere, sandboxed or not.
        torch.set_num_threads(1)

    def begin(self, test_id: str) -> None:
        """A new test starts: a time-out in the previous one no longer stops its calls (it still
        counts towards the unit's ``timeouts_per_unit``)."""
        self._timed_out = None

    def close(self) -> None:
        """Nothing to release: the units are modules of this process."""

    def provide(self, unit: str, namespace: dict) -> None:
        """Serve ``unit`` from ``namespace`` (a notebook's own definitions) instead of loading its file."""
        self._modules[unit] = types.SimpleNamespace(**{k: v for k, v in namespace.items() if isinstance(k, str)})

    # -- loading -----------------------------------------------------------
    def status(self, unit: str) -> str | None:
        """``None`` when ``unit`` loads, else a message for the student."""
        if unit not in self._modules and unit not in self._errors:
            spec: Unit = self.course.units[unit]

            def gate(module):
                sibling = module.__name__.rsplit(".", 1)[-1]
                if sibling in spec.stand_ins_for:  # a sibling not named there: every entry may use it
                    enforce.gate(module, spec.stand_ins_for[sibling])

            try:
                with enforce.guarding(self._guard(spec, None)), time_limit(self.timeout):
                    self._modules[unit] = loader.load_unit(self.course, spec, self.folder, isolate=self.isolate,
                                                           trusted=gate, rules=self.course.rules)
            except loader.LoadError as error:
                self._errors[unit] = str(error)
            except enforce.Forbidden as refused:
                self._refused[unit].add(refused.family)
                self._errors[unit] = N_("importing {file}: {problem}").format(file=spec.file, problem=refused.message)
        return self._errors.get(unit)

    def _guard(self, spec: Unit, entry: str | None) -> enforce.Guard:
        stand_ins = frozenset(str(self.course.root / rel) for rel in spec.stand_ins.values()) if self.isolate else frozenset()
        return enforce.Guard(frozenset(spec.kernels), str(self.folder) + os.sep, stand_ins, entry)

    def runtime_uses(self, unit: str) -> set[str]:
        """The kernel families the unit's code asked for and was refused, so far."""
        return set(self._refused[unit])

    # -- running -----------------------------------------------------------
    def run(self, call: Call) -> Result:
        problem = self.status(call.unit)
        if problem:
            raise StudentError(Failure.UNAVAILABLE, problem)
        exhausted = self._timeouts.exhausted(call.unit)
        if exhausted:
            raise StudentError(Failure.TIMEOUT, exhausted)
        if self._timed_out:
            # One time-out per test: hypothesis would otherwise wait again for every example.
            raise StudentError(Failure.TIMEOUT, N_("{problem} earlier in this test").format(problem=self._timed_out))
        module = self._modules[call.unit]
        try:
            # The student's whole call, backward included (a custom autograd.Function runs its code there).
            entry = call.target.target if isinstance(call.target, New) else call.target
            with enforce.guarding(self._guard(self.course.units[call.unit], entry)), time_limit(self.timeout):
                return self._run(module, call)
        except StudentError:
            raise
        except enforce.Forbidden as refused:
            self._refused[call.unit].add(refused.family)
            raise StudentError(Failure.FORBIDDEN, refused.message, _where(refused, self.folder)) from None
        except CallTimeout as error:
            self._timed_out, where = str(error), _where(error, self.folder)
            self._timeouts.record(call, where)
            raise StudentError(Failure.TIMEOUT, str(error), where) from None
        except (Exception, SystemExit, KeyboardInterrupt) as error:
            raise StudentError(type(error).__name__, loader.safe_str(error), _where(error, self.folder)) from None

    def _build(self, module, recipe: New, call: Call):
        trusted = recipe.target.startswith("torch.nn.")
        if trusted:
            obj = getattr(torch.nn, recipe.target.removeprefix("torch.nn."))(*recipe.args, **recipe.kwargs)
            if recipe.state is not None:
                obj.load_state_dict(recipe.state, strict=True)
            # torch's own module, handed to the student's code (unroll a trusted cell): its kernels are
            # the engine's, during this call only.
            obj.forward = enforce.handed(obj.forward)
            return obj.to(call.device)
        # The student's class, built, loaded and moved through the student's own frame.
        obj = self._call(getattr(module, recipe.target), *recipe.args, **recipe.kwargs)
        if recipe.state is not None:
            self._call(obj.load_state_dict, recipe.state, strict=True)
        return self._call(obj.to, call.device)

    def _run(self, module, call: Call) -> Result:
        # Every call starts from a known RNG state (seed 0 unless given), so a module's
        # random init or dropout never depends on what ran before: grades are deterministic.
        # Only the generators the call can use: torch.manual_seed also queues a lazy CUDA seeding
        # with a formatted stack trace on every call when CUDA is not initialized (a third of
        # a whole grade's time, and a queue that only grows).
        seed = 0 if call.seed is None else call.seed
        torch.random.default_generator.manual_seed(seed)
        if call.device.startswith("cuda"):
            torch.cuda.manual_seed_all(seed)
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
        before = [_CLONE(_DETACH(t)) for t in inputs]

        obj = self._build(module, call.target, call) if isinstance(call.target, New) else getattr(module, call.target)
        if isinstance(obj, torch.nn.Module):
            if call.dtype is not None:
                obj = obj.to(call.dtype)
            obj.train(call.train)
        fn = getattr(obj, call.method) if call.method else obj
        sizes = _LargestStorage() if call.measure else contextlib.nullcontext()
        with sizes:
            output = self._call(fn, *args, **kwargs)

        result = Result(output=export(output), largest=cast(_LargestStorage, sizes).largest if call.measure else None)
        result.mutated = [
            N_("input {number}").format(number=i + 1) for i, (old, new) in enumerate(zip(before, inputs))
            if old.device.type != "meta" and not torch.equal(old, _DETACH(new))
        ]
        params = dict(obj.named_parameters()) if isinstance(obj, torch.nn.Module) else {}
        if want_grad:
            self._backward(output, call.grad_outputs, leaves, params, args, kwargs, result, call.device, self._call)
        if call.return_state and isinstance(obj, torch.nn.Module):
            result.state = export(dict(obj.state_dict()), "state_dict")
            result.buffers = export(dict(obj.named_buffers()), "buffers")
        return result

    @staticmethod
    def _backward(output, grad_outputs, leaves, params, args, kwargs, result, device, call):
        outs, grads = [], []
        for out, grad in zip(leaves_of(output), leaves_of(grad_outputs)):
            if isinstance(grad, torch.Tensor):
                if not (isinstance(out, torch.Tensor) and out.requires_grad):
                    raise StudentError(Failure.BAD_OUTPUT, N_("an output carries no gradient: was it detached or made "
                                                              "with torch.no_grad()?"))
                outs.append(out)
                grads.append(grad.to(device=device, dtype=out.dtype))
        wrt = list(leaves.values()) + list(params.values())
        # Through the student's frame: backward runs the student's hooks and custom Functions.
        found = call(torch.autograd.grad, outs, wrt, grads, allow_unused=True) if outs and wrt else [None] * len(wrt)
        found = [torch.zeros_like(w) if g is None else g.detach() for w, g in zip(wrt, found)]
        by_passed = dict(zip(leaves, found))

        def grad_of(x):
            return by_passed.get(id(x)) if isinstance(x, torch.Tensor) else None

        result.arg_grads = tuple(map_nested(a, grad_of) for a in args)
        result.kwarg_grads = {k: map_nested(v, grad_of) for k, v in kwargs.items()}
        result.param_grads = dict(zip(params, found[len(leaves):]))
