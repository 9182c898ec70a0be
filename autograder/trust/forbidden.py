"""Detect references to functions a unit must not use, statically (the run-time side is
``enforce``: kernel families refused in torch's dispatcher).

Names are dotted paths such as ``torch.nn.functional.softmax``. A name under
``torch.Tensor`` (``torch.Tensor.softmax``) is a method: any ``.softmax``
attribute on an object that is not a known module counts.

Constructs that only serve to hide a name (``eval``, computed ``getattr`` on a
module, ``torch._C``...) are flagged by the static scan in every unit.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from autograder.core.i18n import N_, _, translate_text
from autograder.trust.source import read_source

TENSOR_PREFIX = "torch.Tensor."
STAND_INS = "stand-ins"  # what enforce.gate's refusals are recorded as, beside the kernel families
ERASED = "erased"  # "erased:<name>": a torch function or class enforce.erase replaced (the unit may not call it)
ERASED_NAME = re.compile(r"erased:[A-Za-z_][A-Za-z0-9_.]{0,150}")
HANDED = "handed"  # a module a test handed to the student's code, used outside that call

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
    line: int | None  # None: a kernel family refused at run time

    def describe(self, filename: str) -> str:
        """The finding as the student reads it (on the grader's side: in the language it speaks)."""
        if self.line is None and ERASED_NAME.fullmatch(self.name):
            return _("{file} asked for {name}, which this unit may not use, at run time (refused)").format(
                file=filename, name=self.name.split(":", 1)[1])
        if self.line is None and self.name == HANDED:
            return _("{file} used a module a test handed to it outside the call it was handed to (refused at run "
                     "time)").format(file=filename)
        if self.line is None and self.name == STAND_INS:
            return _("{file} called a stand-in sibling from an entry point that may not use it (refused at run "
                     "time)").format(file=filename)
        if self.line is None:
            return _("{file} asked for the kernel family '{family}' at run time (refused)").format(file=filename,
                                                                                                  family=self.name)
        return _("{file} uses {name} (line {line})").format(file=filename, name=translate_text(self.name),
                                                             line=self.line)


class _Scanner(ast.NodeVisitor):
    def __init__(self, forbidden: tuple[str, ...]):
        self.forbidden = forbidden
        self.methods = {n[len(TENSOR_PREFIX):] for n in forbidden if n.startswith(TENSOR_PREFIX)}
        self.aliases: dict[str, str] = {}  # local name -> dotted module path
        self.local_modules: set[str] = set()  # names bound by relative imports
        self.uses: list[Use] = []

    def _flag(self, dotted: str, node: ast.stmt | ast.expr) -> None:
        for name in self.forbidden:
            if dotted == name or dotted.startswith(name + "."):
                self.uses.append(Use(name, node.lineno))
        construct = banned_construct(dotted)
        if construct:
            self.uses.append(Use(construct, node.lineno))

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_BUILTINS:
            self.uses.append(Use(node.id, node.lineno))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
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
        # (_is_import_call and _is_getattr have checked that the name is an ast.Constant holding a str)
        if isinstance(node, ast.Call) and _is_import_call(node):
            return cast(str, cast(ast.Constant, node.args[0]).value)
        if isinstance(node, ast.Call) and _is_getattr(node):
            base = self._dotted(node.args[0])
            return f"{base}.{cast(str, cast(ast.Constant, node.args[1]).value)}" if base else None
        return None

    def _attribute(self, owner: ast.AST, attr: str, node: ast.expr) -> None:
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
        if _is_getattr(node):  # the name, and the module below, are constant strings (ast.Constant)
            self._attribute(node.args[0], cast(str, cast(ast.Constant, node.args[1]).value), node)
        elif _is_import_call(node):
            self._flag(cast(str, cast(ast.Constant, node.args[0]).value), node)
        elif _computed_name(node):
            owner = self._dotted(node.args[0])
            if owner:  # the student's own objects (getattr(self, name)) stay allowed; node.func: an ast.Name
                self.uses.append(Use(N_("{builtin} with a computed name on {owner}").format(builtin=cast(ast.Name, node.func).id, owner=owner), node.lineno))
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
    ``source.read_source``), plus a coding cookie other than UTF-8."""
    try:
        source, encoding = read_source(path)
        uses = scan_source(source, forbidden)
    except (OSError, SyntaxError, ValueError, LookupError) as error:  # it loaded, so only a changed file gets here
        return [Use(N_("a file that cannot be scanned ({kind})").format(kind=type(error).__name__), 1)]
    if encoding not in ("utf-8", "utf-8-sig"):
        line = next((n for n, text in enumerate(source.splitlines()[:2], 1) if _COOKIE.match(text)), 1)
        uses.insert(0, Use(N_("a coding cookie for {encoding}").format(encoding=encoding), line))
    return uses


_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=]")  # tokenize's own pattern
