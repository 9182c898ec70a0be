"""The in-process subject: serve a submission folder's units from this very process.

The sandbox's workers serve their unit with one of these; ``--no-sandbox``
grading and the notebook's public tests use it directly.
"""
from __future__ import annotations

import contextlib
import signal
import traceback
import types
from pathlib import Path
from typing import cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autograder.trust import enforce, loader
from autograder.trust.source import safe_str
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
              if f.filename.startswith(prefix) and not Path(f.filename).name.startswith("<")]
    return N_("{file} line {line}").format(file=Path(frames[-1].filename).name, line=frames[-1].lineno) if frames else ""


_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device)

# The C functions the worker reads a student's values with, captured before any student code loads:
# it never looks up an attribute on a student value, so no method, property or instance attribute of
# the submission's runs while it exports (`t.detach = partial(...)` is never called).
_ELEMENT_SIZE = torch._C.TensorBase.element_size
_STORAGE = torch._C.TensorBase.untyped_storage
_NBYTES = torch._C.StorageBase.nbytes  # type: ignore[attr-defined]  # torch's stubs leave it out; it is there
_DETACH = torch._C.TensorBase.detach
_CLONE = torch._C.TensorBase.clone
_EQUAL = torch.equal
_IS_META = torch._C.TensorBase.is_meta.__get__  # type: ignore[attr-defined]
_INSTANCE_DICT = vars(torch.Tensor)["__dict__"].__get__
_TUPLE_LEN, _TUPLE_ITEM = tuple.__len__, tuple.__getitem__
_LIST_LEN, _LIST_ITEM = list.__len__, list.__getitem__
_DICT_ITEMS = dict.items
_TENSORS = (torch.Tensor, torch.nn.Parameter)
_MODULE = types.SimpleNamespace(**{name: getattr(torch.nn.Module, name) for name in (
    "to", "train", "load_state_dict", "state_dict", "named_parameters", "named_buffers")})


def export(value, what: str = "output"):
    """Detached copies of the tensors in ``value``, read through C functions only: tensors of
    exactly ``torch.Tensor`` (or ``Parameter``) with no attributes of their own; tuples, lists and
    dicts (subclasses read as the builtin they are: their methods are not called); plain data."""

    def leaf(x, depth: int):
        kind = type(x)
        if depth > 32:
            raise StudentError(Failure.BAD_OUTPUT, N_("the {what} is nested too deeply").format(what=what))
        if kind in _TENSORS:
            if _INSTANCE_DICT(x):
                raise StudentError(Failure.BAD_OUTPUT, N_("the {what} is a tensor carrying attributes of its own; "
                                                          "return a plain tensor").format(what=what))
            return _CLONE(_DETACH(x))
        if isinstance(x, torch.Tensor):
            raise StudentError(Failure.BAD_OUTPUT, N_("the {what} is a {type}, a tensor subclass; return a plain "
                                                      "torch.Tensor").format(what=what, type=kind.__name__))
        if kind in _PLAIN:
            return x
        if isinstance(x, tuple):
            return tuple(leaf(_TUPLE_ITEM(x, i), depth + 1) for i in range(_TUPLE_LEN(x)))
        if isinstance(x, list):
            return [leaf(_LIST_ITEM(x, i), depth + 1) for i in range(_LIST_LEN(x))]
        if isinstance(x, dict):
            items = list(_DICT_ITEMS(x))
            if not all(type(k) is str for k, _ in items):
                raise StudentError(Failure.BAD_OUTPUT, N_("the {what} is a dict whose keys are not all "
                                                          "strings").format(what=what))
            return {k: leaf(v, depth + 1) for k, v in items}
        raise StudentError(Failure.BAD_OUTPUT, N_("the {what} holds a {type}; expected tensors, numbers or "
                                                  "None").format(what=what, type=kind.__name__))

    return leaf(value, 0)


class _LargestStorage(TorchDispatchMode):
    """The most elements any storage an operator makes during the block holds (views share
    their base's storage, so an ``expand`` costs nothing, as in memory)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in leaves_of(out):
            if isinstance(t, torch.Tensor) and (size := _ELEMENT_SIZE(t)):
                self.largest = max(self.largest, _NBYTES(_STORAGE(t)) // size)
        return out


class InProcessSubject:
    """Serve a submission folder from this very process (no sandbox).

    In a sandbox worker the unit's families and forbidden functions were removed before this
    subject was made (``enforce.remove``, ``enforce.erase``); here, each load and call of the
    student's code refuses them too (``enforce.calling``), so both give the same verdicts."""

    def __init__(self, course: CourseUnits, folder: Path, *, isolate: bool = True, timeout: float | None = None):
        timeout = course.limits.call_timeout if timeout is None else timeout
        self.course, self.folder, self.isolate, self.timeout = course, Path(folder).resolve(), isolate, timeout
        self.failure: str | None = None  # nothing here can break apart from the student's code
        self._modules: dict[str, object] = {}
        self._handed: dict[str, types.ModuleType | None] = {}  # unit -> its handed classes (the worker's)
        self._errors: dict[str, str] = {}
        enforce.install(course.kernels)
        self._refused: dict[str, set[str]] = {name: set() for name in course.units}  # kernel families refused
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
                with enforce.calling(spec.kernels, None), time_limit(self.timeout):
                    self._modules[unit] = loader.load_unit(self.course, spec, self.folder, isolate=self.isolate,
                                                           trusted=gate, rules=self.course.rules)
            except loader.LoadError as error:
                self._errors[unit] = str(error)
            except enforce.Forbidden as refused:
                self._refused[unit].add(refused.family)
                self._errors[unit] = N_("importing {file}: {problem}").format(file=spec.file, problem=refused.message)
        return self._errors.get(unit)

    def _handed_classes(self, unit: str) -> types.ModuleType | None:
        """The unit's handed classes, where the torch modules they stand in for are removed (a worker)."""
        if unit not in self._handed:
            spec = self.course.units[unit]
            self._handed[unit] = None
            if spec.handed and enforce.removed():
                module = loader.load_handed(self.course, spec)
                enforce.gate_handed(module)
                self._handed[unit] = module
        return self._handed[unit]

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
        spec = self.course.units[call.unit]
        try:
            # The whole request, export and backward included (a custom autograd.Function runs its code there),
            # inside one refusal and, with ``measure``, one storage count.
            entry = call.target.target if isinstance(call.target, New) else call.target
            sizes = _LargestStorage() if call.measure else contextlib.nullcontext()
            with enforce.calling(spec.kernels, entry), time_limit(self.timeout):
                with sizes:
                    result = self._run(module, call)
                if call.measure:
                    result.largest = cast(_LargestStorage, sizes).largest
                return result
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
            raise StudentError(type(error).__name__, safe_str(error), _where(error, self.folder)) from None

    def _build(self, module, recipe: New, call: Call, handed: list):
        if recipe.target.startswith("torch.nn."):
            # A torch module the test hands to the student's code (unroll a trusted cell). In a worker, where
            # torch's own is removed, the course's equal class written from allowed primitives; in process,
            # torch's, with the families lifted while its forward runs. Either works for this call only.
            name = recipe.target.removeprefix("torch.nn.")
            classes = self._handed_classes(call.unit)
            if classes is not None and isinstance(vars(classes).get(name), type):
                obj = vars(classes)[name](*recipe.args, **recipe.kwargs)
            else:
                obj = enforce.lifted(getattr(torch.nn, name)(*recipe.args, **recipe.kwargs))
            handed.append(obj)
            if recipe.state is not None:
                _MODULE.load_state_dict(obj, recipe.state, strict=True)
            return _MODULE.to(obj, call.device)
        obj = getattr(module, recipe.target)(*recipe.args, **recipe.kwargs)
        if recipe.state is not None:
            _MODULE.load_state_dict(obj, recipe.state, strict=True)
        return _MODULE.to(obj, call.device) if isinstance(obj, torch.nn.Module) else obj

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
        handed: list = []  # the torch modules this call hands to the student's code

        def prepare(x):
            if isinstance(x, New):
                return self._build(module, x, call, handed)
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

        obj = self._build(module, call.target, call, handed) if isinstance(call.target, New) else getattr(module, call.target)
        is_module = issubclass(type(obj), torch.nn.Module)
        if is_module:
            if call.dtype is not None:
                obj = _MODULE.to(obj, call.dtype)
            _MODULE.train(obj, call.train)
        fn = getattr(obj, call.method) if call.method else obj
        with enforce.handing(handed):
            output = fn(*args, **kwargs)
            result = Result(output=export(output))
            result.mutated = [
                N_("input {number}").format(number=i + 1) for i, (old, new) in enumerate(zip(before, inputs))
                if not _IS_META(old) and not _EQUAL(old, _DETACH(new))
            ]
            params = dict(_MODULE.named_parameters(obj)) if is_module else {}
            if want_grad:
                self._backward(output, call.grad_outputs, leaves, params, args, kwargs, result, call.device)
        if call.return_state and is_module:
            result.state = export(_MODULE.state_dict(obj), "state_dict")
            result.buffers = export(dict(_MODULE.named_buffers(obj)), "buffers")
        return result

    @staticmethod
    def _backward(output, grad_outputs, leaves, params, args, kwargs, result, device):
        outs, grads = [], []
        for out, grad in zip(_tensor_leaves(output), leaves_of(grad_outputs)):
            if isinstance(grad, torch.Tensor):
                if not (type(out) in _TENSORS and out.requires_grad):
                    raise StudentError(Failure.BAD_OUTPUT, N_("an output carries no gradient: was it detached or made "
                                                              "with torch.no_grad()?"))
                outs.append(out)
                grads.append(grad.to(device=device, dtype=out.dtype))
        params = {name: p for name, p in params.items() if type(p) in _TENSORS}  # a subclass: no gradient of it
        wrt = list(leaves.values()) + list(params.values())
        # Backward runs the student's hooks and custom Functions, inside the call's refusal.
        raw = torch.autograd.grad(outs, wrt, grads, allow_unused=True) if outs and wrt else [None] * len(wrt)
        found = [torch.zeros_like(w) if g is None else g.detach() for w, g in zip(wrt, raw)]
        by_passed = dict(zip(leaves, found))

        def grad_of(x):
            return by_passed.get(id(x)) if isinstance(x, torch.Tensor) else None

        result.arg_grads = tuple(map_nested(a, grad_of) for a in args)
        result.kwarg_grads = {k: map_nested(v, grad_of) for k, v in kwargs.items()}
        result.param_grads = dict(zip(params, found[len(leaves):]))


def _tensor_leaves(value) -> list:
    """The leaves of a student's output, read as :func:`export` reads them (C functions only)."""
    found: list = []

    def walk(x, depth: int) -> None:
        if depth > 32:
            return
        if isinstance(x, tuple):
            for i in range(_TUPLE_LEN(x)):
                walk(_TUPLE_ITEM(x, i), depth + 1)
        elif isinstance(x, list):
            for i in range(_LIST_LEN(x)):
                walk(_LIST_ITEM(x, i), depth + 1)
        elif isinstance(x, dict):
            for _, v in list(_DICT_ITEMS(x)):
                walk(v, depth + 1)
        else:
            found.append(x)

    walk(value, 0)
    return found
