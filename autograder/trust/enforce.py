"""Remove each unit's forbidden computations from the process that runs its code.

Trust by removal (docs/trust-design.md): the box never asks *who* wants a forbidden
computation, it makes the computation absent.

- **Kernel families.** A unit names families (course.toml ``[kernels]``), each a list of
  substrings: every dispatcher operator whose name holds one (``backward`` kernels excepted:
  they only compute gradients of what ran) gets a kernel that raises :class:`Forbidden`,
  registered at every runtime key holding a computed kernel (backend keys, which inference
  mode and autocast reach; for a composite operator its Autograd and functorch keys, where it
  decomposes). :func:`install` registers them once per process; they raise while their
  family is refused, whoever calls them: the engine, a stand-in, torch's own Python or the
  submission. No frame is looked at.
- **For the worker's whole life.** A sandbox worker serves one unit: :func:`remove` refuses
  its families before the unit loads and nothing takes the refusal back. :func:`erase`
  replaces torch's Python implementations of what the unit may not call (its ``forbidden``
  names) and of the trees of Python-built copies of them (quantizable LSTMs, flex attention,
  ONNX's rotary op...) by functions that raise, and refuses importing those trees anew.
- **In process** (``check``, ``repro``, notebooks, ``--no-sandbox``), where the grader's own
  oracles need torch whole, :func:`calling` refuses the families while a student call runs.
  That process is not a trust boundary (the grade is the sandbox's): it refuses what the
  worker refuses, so honest code gets the same verdict everywhere. There, and only there, a
  torch module a test hands to the student's code (``New("torch.nn.LSTMCell")``) runs with the
  families lifted during its own forward (:func:`lifted`).
- **Nothing trusted needs them.** The stand-ins and the modules the tests hand to student code
  in the worker (course.toml ``handed``) are written from allowed primitives
  (tests/project/test_removal.py loads each with every family removed). Which stand-ins an
  entry point may call is engine state, not a frame: :func:`gate` makes every function of a
  stand-in refuse unless the entry point running (:func:`calling`'s ``entry``) is one the unit
  lists (course.toml ``stand_ins_for``). A handed class works only for the instances the
  grader built for the call running (:func:`gate_handed`, :func:`handing`): its class, kept or
  subclassed, computes nothing afterwards.

A refusal raises :class:`Forbidden`, a ``BaseException`` (an ``except Exception`` in the
student's code does not swallow it); code that catches it anyway has only lost the result it
asked for. The grader turns it into a failure of kind ``Forbidden``, which costs the unit its
points; a worker that forges one only lowers its own grade.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.abc
import sys
import types
import warnings
from collections.abc import Iterable, Iterator

import torch

from autograder.trust.forbidden import ERASED, HANDED, STAND_INS
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


class Forbidden(BaseException):
    """A removed computation (a kernel family, an erased torch function, a stand-in outside its
    entries, a handed module outside its call) was asked for."""

    def __init__(self, family: str, message: str):
        super().__init__(message)
        self.family, self.message = family, message


class _State:
    """What is refused now. ``permanent``: what :func:`remove` refused (never taken back)."""

    permanent: frozenset[str] = frozenset()
    refused: frozenset[str] = frozenset()
    active = False  # a student call runs (in process), or always (a worker after remove)
    entry: str | None = None  # the entry point running; None: none, or the unit's import-time code
    handed: frozenset[int] = frozenset()  # id() of the modules handed to the call running
    lifted = 0  # in process: a handed torch module's forward is running
    removed = False  # remove() ran: this process is a worker


_state = _State()
_families: dict[str, str] = {}  # operator with raising kernels -> its family
_libraries: dict[str, torch.library.Library] = {}  # namespace -> the Library holding our kernels
_installed: set[tuple] = set()  # the family tables installed


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


def _check(op: str) -> None:
    family = _families[op]
    if family in _state.refused and not _state.lifted:
        raise Forbidden(family, N_("{operator} is in the kernel family '{family}', which this unit may not "
                                   "use").format(operator=op, family=family))


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
    """Put a refusing kernel in front of every operator of ``families`` (once per process); it
    raises while the operator's family is refused, and runs the original otherwise."""
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
                    # refused or harmless kernels, and hold no values) and keys this build lacks.
                    continue


def enforced(op: str) -> bool:
    """Whether ``op`` has refusing kernels in this process."""
    return op in _families


# -- the worker: removed for good ---------------------------------------------------------

def remove(families: Iterable[str]) -> None:
    """Refuse ``families`` from now on, in every call and between calls (a worker, before its
    unit loads); stand-ins and handed modules are gated from now on too."""
    _state.permanent = _state.permanent | frozenset(families)
    _state.refused = _state.refused | _state.permanent
    _state.active = _state.removed = True


def removed() -> bool:
    """Whether :func:`remove` ran in this process (a worker)."""
    return _state.removed


def _raiser(name: str):
    def erased(*args, **kwargs):
        raise Forbidden(f"{ERASED}:{name}", N_("{name} does not exist while this unit is graded").format(name=name))

    erased.__name__ = erased.__qualname__ = name.rsplit(".", 1)[-1]
    return erased


def _resolve(dotted: str):
    """The object ``dotted`` names among the modules already imported (nothing is imported)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        obj = sys.modules.get(".".join(parts[:cut]))
        if obj is None:
            continue
        for part in parts[cut:]:
            obj = vars(obj).get(part) if isinstance(obj, types.ModuleType) else getattr(obj, part, None)
            if obj is None:
                return None
        return obj
    return None


def _erase_class(cls: type, name: str) -> None:
    for attr, member in list(vars(cls).items()):
        if isinstance(member, (types.FunctionType, staticmethod, classmethod)) and attr not in ("__repr__",):
            try:
                setattr(cls, attr, _raiser(name))
            except (TypeError, AttributeError):  # a C type: its kernels are refused instead
                return


def _in_tree(name: str, trees: tuple[str, ...]) -> bool:
    return any(name == t or name.startswith(t + ".") for t in trees)


class _RefuseTrees(importlib.abc.MetaPathFinder):
    """Importing a module of an erased tree anew fails (torch.onnx is imported lazily)."""

    def __init__(self, trees: tuple[str, ...]):
        self.trees = trees

    def find_spec(self, fullname, path, target=None):
        if _in_tree(fullname, self.trees):
            raise ImportError(f"{fullname} does not exist while this unit is graded")
        return None


def erase(names: Iterable[str], trees: Iterable[str] = ()) -> None:
    """Replace torch's Python implementations of ``names`` (dotted: classes get raising methods,
    a class's method a raising one, functions a raising stand-in wherever a torch module binds
    them) and of every class and function the modules of ``trees`` define, and refuse importing
    a module of ``trees`` anew (an entry of ``trees`` that is no module is one of ``names``)."""
    names, trees = list(names), tuple(trees)
    names += [t for t in trees if (found := _resolve(t)) is not None and not isinstance(found, types.ModuleType)]
    trees = tuple(t for t in trees if t not in names)
    doomed: dict[int, str] = {}
    erased: set[int] = set()  # classes done, under the first name listed for them
    for name in names:
        obj = _resolve(name)
        if obj is None or isinstance(obj, types.ModuleType):
            if isinstance(obj, types.ModuleType):
                trees += (obj.__name__,)
            continue
        owner = _resolve(name.rsplit(".", 1)[0]) if "." in name else None
        if isinstance(owner, type) and not isinstance(obj, type):
            try:  # a method: replaced on its class (torch.storage._StorageBase.type)
                setattr(owner, name.rsplit(".", 1)[1], _raiser(name))
            except (TypeError, AttributeError):  # a C type's: its kernels are refused instead
                pass
            continue
        if isinstance(obj, type):
            if id(obj) not in erased:
                erased.add(id(obj))
                _erase_class(obj, name)
        elif callable(obj):
            doomed.setdefault(id(obj), name)
    for module_name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or not _in_tree(module_name, trees):
            continue
        for attr, member in list(vars(module).items()):
            if getattr(member, "__module__", None) != module_name:
                continue
            if isinstance(member, type) and id(member) not in erased:
                erased.add(id(member))
                _erase_class(member, f"{module_name}.{attr}")
            elif isinstance(member, types.FunctionType):
                doomed.setdefault(id(member), f"{module_name}.{attr}")
    for module_name, module in list(sys.modules.items()):
        if not (module_name == "torch" or module_name.startswith("torch.")) or not isinstance(module, types.ModuleType):
            continue
        namespace = vars(module)
        for attr, member in list(namespace.items()):
            if id(member) in doomed:
                namespace[attr] = _raiser(doomed[id(member)])
    for attr in [n.rsplit(".", 1)[1] for n in names if n.startswith("torch.Tensor.")]:
        setattr(torch.Tensor, attr, _raiser(f"torch.Tensor.{attr}"))  # shadows the C method
    if trees:
        sys.meta_path.insert(0, _RefuseTrees(trees))


# -- a call: what runs and for whom ---------------------------------------------------------

@contextlib.contextmanager
def calling(families: Iterable[str], entry: str | None) -> Iterator[None]:
    """While the block runs (a student's load or call): ``families`` refused (besides what
    :func:`remove` refused), stand-ins gated for ``entry``."""
    previous = (_state.refused, _state.active, _state.entry)
    _state.refused, _state.active, _state.entry = _state.permanent | frozenset(families), True, entry
    try:
        yield
    finally:
        _state.refused, _state.active, _state.entry = previous
        _state.refused |= _state.permanent
        _state.active = _state.active or _state.removed


@contextlib.contextmanager
def handing(modules: Iterable[object]) -> Iterator[None]:
    """The handed ``modules`` work during the block, and no other instance of their classes."""
    previous = _state.handed
    _state.handed = previous | {id(m) for m in modules}
    try:
        yield
    finally:
        _state.handed = previous


def gate(module: types.ModuleType, entries: Iterable[str]) -> None:
    """Make every function and method ``module`` (a stand-in) defines refuse to run, while a
    call is guarded, from any entry point but ``entries``."""
    entries = frozenset(entries)
    sibling = module.__name__.rsplit(".", 1)[-1]

    def gated(function):
        @functools.wraps(function)
        def entry_checked(*args, **kwargs):
            if _state.active and _state.entry not in entries:
                name = _state.entry or N_("the unit's import-time code")
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


def gate_handed(module: types.ModuleType) -> None:
    """Make every method but ``__init__`` of the classes ``module`` defines (modules the tests
    hand to student code) refuse unless its ``self`` was handed to the call running."""

    def gated(function, where):
        @functools.wraps(function)
        def handed_only(self, *args, **kwargs):
            if _state.active and id(self) not in _state.handed:
                raise Forbidden(HANDED, N_("a {name} the grader hands to your code works only during the call it "
                                              "was handed to").format(name=where))
            return function(self, *args, **kwargs)

        return handed_only

    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__:
            for name, member in list(vars(value).items()):
                if isinstance(member, types.FunctionType) and name != "__init__":
                    setattr(value, name, gated(member, value.__name__))


def lifted(module: torch.nn.Module):
    """In process only: ``module`` (torch's own, handed to the student's call) runs its forward
    with the families lifted, while it is one of the modules handed to the call running."""
    forward = module.forward

    @functools.wraps(forward)
    def handed_forward(*args, **kwargs):
        if _state.active and id(module) not in _state.handed:
            raise Forbidden(HANDED, N_("a torch module a test hands in may be used only during the call it was "
                                          "given to"))
        _state.lifted += 1
        try:
            return forward(*args, **kwargs)
        finally:
            _state.lifted -= 1

    module.forward = handed_forward
    return module
