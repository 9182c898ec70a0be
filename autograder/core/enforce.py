"""Enforce each unit's forbidden kernel families in torch's dispatcher, frame by frame.

A unit names kernel *families* (course.toml ``[kernels]``): each family is a list of
substrings, and every dispatcher operator whose name holds one (``backward`` kernels
excepted: they compute gradients, never a forward answer, and the grader's own backward
needs them) is enforced. A variant a later torch adds is enforced without a new entry.

Decisions, each for a measured hole (docs/trust-design.md, sections 3 and 4):

- **Every runtime key.** A kernel that checks its caller is registered for each overload
  at every runtime key holding a computed kernel: the backend keys (CPU, CUDA, Meta, the
  Sparse*, SparseCsr*, NestedTensor*, Quantized*, Mkldnn keys), which inference mode and
  autocast reach as well, and, for a composite operator (one that decomposes into basic
  operators, like ``lstm_cell`` or ``rms_norm``), its Autograd keys too, where it decomposes
  when autograd is on. A non-composite kernel calls the original through
  ``torch.library.get_kernel(op, key).call_boxed``, the route torch documents for wrapping
  a kernel; a composite one decomposes as torch would.
- **Per frame, not per period.** The check walks out from the kernel: frames of torch, the
  standard library, other installed packages and ``<...>`` pseudo-files are skipped; the
  first frame left decides. The submission's files refuse; the engine's own files and the
  unit's stand-ins allow; anything else refuses (nothing else runs during a student's call).
  So student code a stand-in calls back (a ``__radd__``, a ``.to()``) is the nearest frame,
  and is refused: no period of "trusted" time exists to hide in.
- **Entries called through the student's own frame.** The grader calls each entry point
  through :func:`student_caller`, a function compiled under the submission's folder, so an
  entry that is itself a C function (``forward = torch.softmax``) has a student frame
  nearest, not the grader's.
- **Handed torch modules** (a ``torch.nn.LSTMCell`` a test gives ``unroll``) are trusted
  through :func:`handed`, only while the call they were built for runs.
- **Stand-ins by entry.** A unit may restrict which of its entry points may use the
  stand-ins (course.toml ``stand_ins_for``); :func:`gate` makes every stand-in function
  refuse, from any other entry (``flash_attention`` cannot hand its tiles to the attention
  stand-in), even one built by a permitted class.

A refusal raises :class:`Forbidden`, a ``BaseException`` (an ``except Exception`` in the
student's code does not swallow it); code that catches it anyway has only lost the result
it asked for. The grader turns it into a failure of kind ``Forbidden``, which costs the unit
its points; a worker that forges one only lowers its own grade.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import sysconfig
import types
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from autograder.core.forbidden import STAND_INS
from autograder.core.i18n import N_

# Keys a tensor's computation ends at (whatever mode or wrapper it went through).
BACKEND_KEYS = (
    "CPU", "CUDA", "Meta", "MPS", "XPU", "SparseCPU", "SparseCUDA", "SparseMeta", "SparseCsrCPU", "SparseCsrCUDA",
    "SparseCsrMeta", "NestedTensorCPU", "NestedTensorCUDA", "NestedTensorMeta", "QuantizedCPU", "QuantizedCUDA",
    "MkldnnCPU",
)
# Where a composite operator decomposes when autograd is on, and under vmap (both of its keys).
AUTOGRAD_KEYS = (
    "AutogradCPU", "AutogradCUDA", "AutogradMeta", "AutogradMPS", "AutogradXPU", "AutogradNestedTensor",
    "AutogradOther", "FuncTorchBatched", "FuncTorchVmapMode",
)

ENGINE = str(Path(__file__).resolve().parents[1]) + os.sep
# Library code: skipped when looking for who asked for a kernel.
LIBRARIES = tuple(sorted({str(Path(p).resolve()) + os.sep for p in (
    os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(torch.__file__)), sysconfig.get_paths()["stdlib"],
    sysconfig.get_paths()["platstdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
)}))
# The engine's code that runs kernels on another's behalf (a dispatch mode's __torch_dispatch__): skipped too.
_transparent: set[types.CodeType] = set()


class Forbidden(BaseException):
    """A forbidden kernel (or a stand-in outside its entries) was asked for by the submission."""

    def __init__(self, family: str, message: str):
        super().__init__(message)
        self.family, self.message = family, message


def family_of(op: str, families: dict[str, tuple[str, ...]]) -> str | None:
    """The first family whose substrings name the operator ``ns::name[.overload]``."""
    name = op.split("::", 1)[-1]
    if "backward" in name:
        return None
    return next((f for f, parts in families.items() if any(p in name for p in parts)), None)


def operators(families: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Every operator of this torch in one of ``families``: qualified name -> family."""
    found = {}
    for op in torch._C._dispatch_get_all_op_names():
        family = family_of(op, families)
        if family:
            found[op] = family
    return found


@dataclass
class Guard:
    """What the running student call may not do."""

    families: frozenset[str]  # enforced family names
    student: str  # the submission's folder, with a trailing separator
    stand_ins: frozenset[str] = frozenset()  # stand-in files: trusted frames
    entry: str | None = None  # the entry point being called (None while the unit loads)
    token: object = field(default_factory=object)  # this call; handed modules check it

    def frame_kind(self, filename: str) -> str:
        if filename.startswith(self.student):
            return "student"
        if filename in self.stand_ins or filename.startswith(ENGINE):
            return "trusted"
        if filename.startswith("<") or filename.startswith(LIBRARIES):
            return "library"
        return "student"  # nothing but the grader and the submission runs during a call

    def caller(self, frame: types.FrameType | None) -> tuple[str, types.FrameType | None]:
        """The kind of the nearest frame that is not library code, and that frame."""
        while frame is not None:
            kind = "library" if frame.f_code in _transparent else self.frame_kind(frame.f_code.co_filename)
            if kind != "library":
                return kind, frame
            frame = frame.f_back
        return "student", None


_guard: Guard | None = None
_families: dict[str, str] = {}  # enforced operator -> family, for every family installed
_libraries: dict[str, torch.library.Library] = {}  # namespace -> the torch.library.Library holding our kernels
_installed: set[tuple] = set()  # the family tables installed


def _where(frame: types.FrameType | None) -> str:
    if frame is None:
        return ""
    return " (" + N_("{file} line {line}").format(file=Path(frame.f_code.co_filename).name, line=frame.f_lineno) + ")"


def _check(op: str) -> None:
    guard = _guard
    if guard is None:
        return
    family = _families[op]
    if family not in guard.families:
        return
    kind, frame = guard.caller(sys._getframe(2))
    if kind == "student":
        raise Forbidden(family, N_("{operator} is in the kernel family '{family}', which this unit may not "
                                   "use").format(operator=f"{op}{_where(frame)}", family=family))


def _kernels(op: str, overload, composite: bool):
    if composite:
        def decomposed(*args, **kwargs):
            _check(op)
            return overload._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, *args, **kwargs)

        return decomposed, False

    def make(original):
        def kernel(keyset, *args, **kwargs):
            _check(op)
            return original.call_boxed(keyset, *args, **kwargs)

        return kernel

    return make, True


def install(families: dict[str, tuple[str, ...]]) -> None:
    """Put a checking kernel in front of every operator of ``families`` (once per process)."""
    key: tuple | str  # the family table, then a dispatch key in the loop below
    key = tuple(sorted(families.items()))
    if key in _installed:  # every subject of a worker, or of an in-process grade, asks again
        return
    _installed.add(key)
    for op, family in operators(families).items():
        if op in _families:
            continue
        _families[op] = family
        namespace, name = op.split("::", 1)
        base, _, overload_name = name.partition(".")
        packet = getattr(getattr(torch.ops, namespace), base, None)
        if packet is None:
            continue
        overload = getattr(packet, overload_name or "default")
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        composite = has(op, "CompositeImplicitAutograd")
        library = _libraries.get(namespace) or _libraries.setdefault(namespace, torch.library.Library(namespace, "IMPL"))
        kernel, boxed = _kernels(op, overload, composite)
        for key in BACKEND_KEYS + (AUTOGRAD_KEYS if composite else ()):
            if not torch._C._dispatch_has_computed_kernel_for_dispatch_key(op, key):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
                try:
                    impl = kernel(torch.library.get_kernel(overload, key)) if boxed else kernel
                    library.impl(name, impl, key, with_keyset=boxed)
                except (RuntimeError, ValueError):
                    # Torch refuses a Meta kernel for a composite operator (its meta tensors decompose into
                    # enforced or harmless kernels, and hold no values) and keys this build lacks.
                    continue


def transparent(function):
    """Mark ``function`` (engine code that runs kernels for whoever called it) as library code."""
    _transparent.add(function.__code__)
    return function


def enforced(op: str) -> bool:
    """Whether ``op`` has checking kernels in this process."""
    return op in _families


@contextlib.contextmanager
def guarding(guard: Guard | None) -> Iterator[Guard | None]:
    """Enforce ``guard`` while the block runs (the student's load or call)."""
    global _guard
    previous, _guard = _guard, guard
    try:
        yield guard
    finally:
        _guard = previous


def student_caller(folder: Path):
    """``call(fn, *args, **kwargs)``, compiled as a file of the submission's folder: the
    grader calls the student's entries through it, so their nearest frame is the student's."""
    namespace: dict = {"__builtins__": {}}
    source = "def call(fn, /, *args, **kwargs):\n    return fn(*args, **kwargs)\n"
    exec(compile(source, str(Path(folder) / "<call>"), "exec"), namespace)
    return namespace["call"]


def handed(function):
    """``function`` (a torch module's forward the grader hands to the student's code), trusted
    only during the call it was built for: the engine's frame is nearest to its kernels."""
    token = _guard.token if _guard is not None else None

    @functools.wraps(function)
    def trusted_forward(*args, **kwargs):
        if _guard is not None and _guard.token is not token:
            raise RuntimeError("a torch module a test hands in may be used only during the call it was given to")
        return function(*args, **kwargs)

    return trusted_forward


def gate(module: types.ModuleType, entries: Iterable[str]) -> None:
    """Make every function and method ``module`` (a stand-in) defines refuse to run, while a
    guard is on, from any entry point but ``entries``."""
    entries = frozenset(entries)
    sibling = module.__name__.rsplit(".", 1)[-1]

    def gated(function):
        @functools.wraps(function)
        def entry_checked(*args, **kwargs):
            guard = _guard
            if guard is not None and guard.entry not in entries:
                name = guard.entry or "the unit's import-time code"
                raise Forbidden(STAND_INS, N_("{name} may not use the {sibling} sibling (only {entries} may)").format(
                    name=name, sibling=sibling, entries=", ".join(sorted(entries))))
            return function(*args, **kwargs)

        return entry_checked

    for attr, value in list(vars(module).items()):
        if getattr(value, "__module__", None) != module.__name__:
            continue
        if isinstance(value, type):
            for name, member in list(vars(value).items()):
                if isinstance(member, types.FunctionType):
                    setattr(value, name, gated(member))
        elif isinstance(value, types.FunctionType):
            setattr(module, attr, gated(value))

