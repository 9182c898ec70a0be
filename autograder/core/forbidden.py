"""Detect calls to functions a unit must not use, statically and at run time.

Names are dotted paths such as ``torch.nn.functional.softmax``. A name under
``torch.Tensor`` (``torch.Tensor.softmax``) is a method: any ``.softmax``
attribute on an object that is not a known module counts. A name under
``aten::`` is an operator of torch's dispatcher, recorded by :class:`Operators`
whichever Python name or caller reached it.

Constructs that only serve to hide a name (``eval``, computed ``getattr`` on a
module, ``torch._C``...) are flagged by the static scan in every unit.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import re
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

from autograder.core.loader import read_source

TENSOR_PREFIX = "torch.Tensor."
OPERATOR_PREFIX = "aten::"

# Builtins that run or import code named by a string.
BANNED_BUILTINS = frozenset({"eval", "exec", "compile", "__import__"})
# Dotted paths (and everything under them) that reach code by computed names,
# torch's dispatcher, the grader, or other modules' internals.
BANNED_PATHS = (
    "importlib", "ctypes", "gc", "builtins", "inspect", "sys.modules", "sys._getframe", "operator.attrgetter",
    "operator.methodcaller", "autograder", "torch.ops", "torch.library", "torch.jit", "torch.compile",
    "torch.overrides",
)
# Attributes that reach around names: namespaces, closures, frames, and torch's override protocols.
BANNED_ATTRIBUTES = frozenset({
    "__dict__", "__globals__", "__builtins__", "__closure__", "__code__", "__getattribute__", "__subclasses__",
    "__torch_function__", "__torch_dispatch__", "f_back", "f_locals", "f_globals", "f_builtins", "tb_frame",
    "gi_frame", "cr_frame", "ag_frame",
})
NAME_BUILTINS = ("getattr", "setattr", "delattr", "hasattr", "vars")


def names_of(forbidden: tuple[str, ...]) -> tuple[str, ...]:
    """The Python names of a forbidden list (its ``aten::`` operators left out)."""
    return tuple(n for n in forbidden if not n.startswith(OPERATOR_PREFIX))


def banned_construct(dotted: str) -> str | None:
    """The construct a resolved dotted path is, if it has no place in a unit file."""
    for path in BANNED_PATHS:
        if dotted == path or dotted.startswith(path + "."):
            return path
    parts = dotted.split(".")
    if parts[0] == "torch":
        for n, part in enumerate(parts[1:], 1):
            if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
                return ".".join(parts[: n + 1])  # torch's private API: torch._C, torch._softmax...
    return None


@dataclass(frozen=True)
class Use:
    name: str
    line: int | None  # None when seen at run time

    def describe(self, filename: str) -> str:
        where = f" (line {self.line})" if self.line else " (seen at run time)"
        return f"{filename} uses {self.name}{where}"


class _Scanner(ast.NodeVisitor):
    def __init__(self, forbidden: tuple[str, ...]):
        self.forbidden = names_of(forbidden)
        self.methods = {n[len(TENSOR_PREFIX):] for n in forbidden if n.startswith(TENSOR_PREFIX)}
        self.aliases: dict[str, str] = {}  # local name -> dotted module path
        self.local_modules: set[str] = set()  # names bound by relative imports
        self.uses: list[Use] = []

    def _flag(self, dotted: str, node: ast.AST) -> None:
        for name in self.forbidden:
            if dotted == name or dotted.startswith(name + "."):
                self.uses.append(Use(name, node.lineno))
        construct = banned_construct(dotted)
        if construct:
            self.uses.append(Use(construct, node.lineno))

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_BUILTINS:
            self.uses.append(Use(node.id, node.lineno))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in BANNED_ATTRIBUTES:  # defining __torch_function__ / __torch_dispatch__
            self.uses.append(Use(node.name, node.lineno))
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                head = alias.name.split(".")[0]
                self.aliases[head] = head
            self._flag(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            local = alias.asname or alias.name
            if node.level:
                self.local_modules.add(local)
                continue
            full = f"{node.module}.{alias.name}"
            self.aliases[local] = full
            self._flag(full, node)

    def _dotted(self, node: ast.AST) -> str | None:
        """The dotted path an expression names, resolved through imports."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and _is_import_call(node):
            return node.args[0].value
        if isinstance(node, ast.Call) and _is_getattr(node):
            base = self._dotted(node.args[0])
            return f"{base}.{node.args[1].value}" if base else None
        return None

    def _attribute(self, owner: ast.AST, attr: str, node: ast.AST) -> None:
        base = self._dotted(owner)
        if base is not None:
            self._flag(f"{base}.{attr}", node)
        elif attr in self.methods and not (isinstance(owner, ast.Name) and owner.id in self.local_modules):
            self.uses.append(Use(TENSOR_PREFIX + attr, node.lineno))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in BANNED_ATTRIBUTES:
            self.uses.append(Use(node.attr, node.lineno))
        self._attribute(node.value, node.attr, node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_getattr(node):
            self._attribute(node.args[0], node.args[1].value, node)
        elif _is_import_call(node):
            self._flag(node.args[0].value, node)
        elif _computed_name(node):
            owner = self._dotted(node.args[0])
            if owner:  # the student's own objects (getattr(self, name)) stay allowed
                self.uses.append(Use(f"{node.func.id} with a computed name on {owner}", node.lineno))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        # m = importlib.import_module("torch.nn.functional") or m = torch.nn makes m an alias.
        target = self._dotted(node.value) if isinstance(node.value, (ast.Call, ast.Name, ast.Attribute)) else None
        if target:
            for name in node.targets:
                if isinstance(name, ast.Name):
                    self.aliases[name.id] = target
        self.generic_visit(node)


def _const_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_getattr(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2 and _const_str(node.args[1])


def _computed_name(node: ast.Call) -> bool:
    """``getattr(obj, name)`` (and its kin) with a name that is not a constant string; ``vars(obj)``."""
    if not (isinstance(node.func, ast.Name) and node.func.id in NAME_BUILTINS and node.args):
        return False
    return node.func.id == "vars" or len(node.args) < 2 or not _const_str(node.args[1])


def _is_import_call(node: ast.Call) -> bool:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in ("import_module", "__import__") and bool(node.args) and _const_str(node.args[0])


def scan_source(source: str, forbidden: tuple[str, ...]) -> list[Use]:
    """Forbidden names and banned constructs the source refers to (it must already parse)."""
    scanner = _Scanner(forbidden)
    scanner.visit(ast.parse(source))
    first: dict[str, Use] = {}  # each name once, at its first line
    for use in sorted(scanner.uses, key=lambda u: (u.line or 0, u.name)):
        first.setdefault(use.name, use)
    return list(first.values())


def scan_file(path: Path, forbidden: tuple[str, ...]) -> list[Use]:
    """:func:`scan_source` on the very text Python executes for ``path`` (see
    ``loader.read_source``), plus a coding cookie other than UTF-8."""
    try:
        source, encoding = read_source(path)
        uses = scan_source(source, forbidden)
    except (OSError, SyntaxError, ValueError, LookupError) as error:  # it loaded, so only a changed file gets here
        return [Use(f"a file that cannot be scanned ({type(error).__name__})", 1)]
    if encoding not in ("utf-8", "utf-8-sig"):
        line = next((n for n, text in enumerate(source.splitlines()[:2], 1) if _COOKIE.match(text)), 1)
        uses.insert(0, Use(f"a coding cookie for {encoding}", line))
    return uses


_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=]")  # tokenize's own pattern


def _resolve(dotted: str) -> tuple[object, str] | None:
    """The object holding the last attribute of ``dotted``, and that attribute;
    ``None`` for what cannot be called here (a whole package, or one not installed)."""
    parts = dotted.split(".")
    if len(parts) < 2:
        return None
    try:
        owner = importlib.import_module(parts[0])
        for part in parts[1:-1]:
            owner = getattr(owner, part)
        getattr(owner, parts[-1])
    except (ImportError, AttributeError):
        return None
    return owner, parts[-1]


class Traps:
    """Replace forbidden functions by wrappers that record calls made from the
    submission's own files, then delegate (so the call still works and the
    suite's other verdicts are unaffected)."""

    def __init__(self, forbidden: tuple[str, ...], submission_dir: Path):
        self.forbidden = names_of(forbidden)
        self.prefix = str(submission_dir.resolve())
        self.seen: set[str] = set()
        self._places: list[tuple[str, object, str]] | None = None  # (name, owner, attribute), found once

    def _found(self) -> list[tuple[str, object, str]]:
        """Where each forbidden name lives, resolved on first use: resolving them on every
        call was 1.3 s of a whole grade. The owners are modules and classes, which stay; the
        function itself is read again at each call, so a replaced one is trapped as it is."""
        if self._places is None:
            self._places = [(name, *found) for name in self.forbidden if (found := _resolve(name)) is not None]
        return self._places

    def _trap(self, name: str, original):
        prefix, seen = self.prefix, self.seen

        def trap(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(prefix):
                seen.add(name)
            return original(*args, **kwargs)

        trap.__wrapped__ = original
        return trap

    @contextlib.contextmanager
    def installed(self):
        saved = []
        try:
            for name, owner, attr in self._found():
                original = getattr(owner, attr)
                try:
                    setattr(owner, attr, self._trap(name, original))
                except (AttributeError, TypeError):  # a read-only owner (a builtin's): the static scan covers it
                    continue
                saved.append((owner, attr, original))
            yield self
        finally:
            for owner, attr, original in reversed(saved):
                setattr(owner, attr, original)


_active: list["Operators"] = []  # the recorder whose submission is running, if any
_overridden: dict[str, object] = {}  # operator overload -> the torch.library holding its recording kernel
# The dispatch keys of a composite operator's kernel: the backend keys cover inference mode (no
# autograd key); meta tensors need autograd on (torch refuses a Meta kernel for a composite).
COMPOSITE_KEYS = ("CPU", "CUDA", "AutogradCPU", "AutogradCUDA", "AutogradMeta")


def _note(name: str) -> None:
    if _active and _active[-1].on and name in _active[-1].names:
        _active[-1].seen.add(name)


def _override(name: str, overload) -> None:
    """Put a kernel that records ``name`` in front of one overload of a forbidden operator.

    A kernel in the dispatcher sees every route to the operator (``F.softmin``,
    ``torch.ops``, TorchScript, another torch function), whoever the caller. It
    costs nothing to the other operators; registered once per process, it only
    records while :meth:`Operators.recording` is on. An operator with its own
    kernel is caught at ``ADInplaceOrView`` (after autograd has recorded the call,
    a no-op key for these operators but their out= variants) and redispatched below it; a composite one
    (``aten::lstm_cell``) at its own keys, before it decomposes into basic operators,
    then run through torch's own decomposition.
    """
    import torch
    from torch._C import DispatchKey

    qualified = overload.name()
    if qualified in _overridden:
        return
    has_kernel = functools.partial(torch._C._dispatch_has_kernel_for_dispatch_key, qualified)
    if has_kernel("ADInplaceOrView"):
        return  # an out= variant: its key bumps version counters, so it stays torch's (reached by listed names only)
    library = torch.library.Library("aten", "IMPL")
    short = qualified.removeprefix(OPERATOR_PREFIX)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        if has_kernel("CompositeImplicitAutograd"):
            def decomposed(*args, **kwargs):
                _note(name)
                return overload._op_dk(DispatchKey.CompositeImplicitAutograd, *args, **kwargs)

            for key in COMPOSITE_KEYS:
                library.impl(short, decomposed, key)
        else:
            below = torch._C._after_ADInplaceOrView_keyset

            def kernel(keyset, *args, **kwargs):
                _note(name)
                return overload.redispatch(keyset & below, *args, **kwargs)

            library.impl(short, kernel, "ADInplaceOrView", with_keyset=True)
    _overridden[qualified] = library


class Operators:
    """Record the forbidden ``aten::`` operators that run while the submission's
    code runs (:meth:`recording`), except inside trusted code (:meth:`trusted`)."""

    def __init__(self, forbidden: tuple[str, ...]):
        self.names = frozenset(n for n in forbidden if n.startswith(OPERATOR_PREFIX))
        self.seen: set[str] = set()
        self.on = False
        self._installed = False

    def _install(self) -> None:
        import torch

        self._installed = True
        for name in self.names:
            packet = getattr(torch.ops.aten, name.removeprefix(OPERATOR_PREFIX), None)
            for overload in (getattr(packet, o) for o in packet.overloads()) if packet else ():  # None: not in this torch
                _override(name, overload)

    @contextlib.contextmanager
    def recording(self):
        if not self.names:
            yield self
            return
        if not self._installed:
            self._install()
        _active.append(self)
        self.on = True
        try:
            yield self
        finally:
            self.on = False
            _active.remove(self)

    def trusted(self, function):
        """``function``, with recording paused while it runs (a stand-in, or torch's own module)."""

        @functools.wraps(function)
        def paused(*args, **kwargs):
            was, self.on = self.on, False
            try:
                return function(*args, **kwargs)
            finally:
                self.on = was

        return paused

    def trust_module(self, module) -> None:
        """Pause recording inside every function and method a (stand-in) module defines."""
        for attr, value in list(vars(module).items()):
            if getattr(value, "__module__", None) != module.__name__:
                continue
            if isinstance(value, type):
                for name, member in list(vars(value).items()):
                    if isinstance(member, types.FunctionType):  # plain methods (forward, __init__...)
                        setattr(value, name, self.trusted(member))
            elif isinstance(value, types.FunctionType):
                setattr(module, attr, self.trusted(value))
