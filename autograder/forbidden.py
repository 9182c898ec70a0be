"""Detect calls to functions a unit must not use, statically and at run time.

Names are dotted paths such as ``torch.nn.functional.softmax``. A name under
``torch.Tensor`` (``torch.Tensor.softmax``) is a method: any ``.softmax``
attribute on an object that is not a known module counts.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

TENSOR_PREFIX = "torch.Tensor."


@dataclass(frozen=True)
class Use:
    name: str
    line: int | None  # None when seen at run time

    def describe(self, filename: str) -> str:
        where = f" (line {self.line})" if self.line else " (seen at run time)"
        return f"{filename} uses {self.name}{where}"


class _Scanner(ast.NodeVisitor):
    def __init__(self, forbidden: tuple[str, ...]):
        self.forbidden = forbidden
        self.methods = {n[len(TENSOR_PREFIX):] for n in forbidden if n.startswith(TENSOR_PREFIX)}
        self.aliases: dict[str, str] = {}  # local name -> dotted module path
        self.local_modules: set[str] = set()  # names bound by relative imports
        self.uses: list[Use] = []

    def _flag(self, dotted: str, node: ast.AST) -> None:
        for name in self.forbidden:
            if dotted == name or dotted.startswith(name + "."):
                self.uses.append(Use(name, node.lineno))

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
        self._attribute(node.value, node.attr, node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_getattr(node):
            self._attribute(node.args[0], node.args[1].value, node)
        elif _is_import_call(node):
            self._flag(node.args[0].value, node)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        # m = importlib.import_module("torch.nn.functional") makes m an alias.
        target = self._dotted(node.value) if isinstance(node.value, ast.Call) else None
        if target:
            for name in node.targets:
                if isinstance(name, ast.Name):
                    self.aliases[name.id] = target
        self.generic_visit(node)


def _const_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_getattr(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2 and _const_str(node.args[1])


def _is_import_call(node: ast.Call) -> bool:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in ("import_module", "__import__") and bool(node.args) and _const_str(node.args[0])


def scan_source(source: str, forbidden: tuple[str, ...]) -> list[Use]:
    """Forbidden names the source refers to (it must already parse)."""
    if not forbidden:
        return []
    scanner = _Scanner(forbidden)
    scanner.visit(ast.parse(source))
    return sorted(set(scanner.uses), key=lambda u: (u.line or 0, u.name))


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
        self.forbidden = forbidden
        self.prefix = str(submission_dir.resolve())
        self.seen: set[str] = set()

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
            for name in self.forbidden:
                found = _resolve(name)
                if found is None:
                    continue
                owner, attr = found
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
