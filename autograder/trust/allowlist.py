"""The static half of trust by enforcement (docs/trust-design.md, section 1): an ALLOW list.

Run on the trusted side (the host, never in the student's process) over the exact text
Python executes (``source.read_source``). Every name a unit file reaches must be allowed;
whatever the rules do not name is refused. The rules, and the decisions taken:

1. Imports. ``import X`` / ``import X as Y`` / ``from X import a`` only for X in
   ``Rules.modules`` (``import a.b`` binds ``a``, so ``a`` must be allowed too); ``a`` is
   then an attribute step of X (rule 2), a submodule ``X.a`` only if allowed. Relative
   imports: level 1 only, ``from . import s`` with ``s`` a sibling unit, ``from .s import
   f`` with ``f`` public. No star imports. ``from __future__ import ...`` is an ordinary
   allowed module. A name bound by an import may not be bound any other way in the file
   (parameter, assignment, second import of something else): the scan resolves it by
   its import everywhere.
2. Resolve by object. A chain rooted at an imported name is walked here with ``getattr``
   (torch is imported on this side). A step that reaches a module needs the module's
   ``__name__`` in the list (``torch.os``, ``torch.ops``, ``torch.nn.modules`` are
   refused), and the canonical path restarts at that name (``F.torch.load`` is
   ``torch.load``). Underscore names on modules are refused, all of them. A name that is
   not there is refused (honest code does not do that); on a module, "there" means its
   own namespace or an allowed submodule: a module's ``__getattr__`` (torch's lazy
   ``torch._dynamo``, its deprecated names) is never run by the scan. Walking continues
   through classes under rule 4's name rules; it stops (an unknown value) at any other
   object.
   Deny patterns (fnmatch; a pattern also covers everything under it: ``torch.ao`` covers
   ``torch.ao.nn.X``) are matched against the path as resolved and against the object's
   ``__module__.__qualname__``; exact deny names are also compared by object. A deny name
   ``<class>.<attr>`` (``torch.UntypedStorage.from_file``) also refuses ``.attr`` on every
   value, as forbidden Tensor methods are.
3. Modules are never values: an imported module (or a sibling unit) may only head an
   attribute chain. Passing, storing, returning, subscripting, calling it, ``getattr`` on
   it: refused. Assigning to or deleting an attribute of a module, of a resolved class or
   function, or of a sibling unit is refused, as is storing into ``X.__class__.a`` or
   ``type(X).a``.
4. Values. Underscore attributes are refused except ``__init__``, ``__class__``,
   ``__name__`` and non-dunder names the file itself defines (def/class names, bound
   names, attribute stores, the string given to ``register_buffer``, ``register_parameter``,
   ``register_module``, ``add_module``, ``setattr``). Frame, traceback, generator, coroutine
   and code attributes (``f_back``... ``co_*``), ``format_map`` and ``mro`` are refused
   everywhere. ``.format`` only on a string literal whose fields (nested ones in format
   specs included) hold no ``.`` or ``[``. ``match`` class patterns' keyword attributes are
   attribute reads under the same rules, with no dunder allowed at all.
   Defining (def, or binding by assignment) ``__torch_function__``, ``__torch_dispatch__``,
   ``__init_subclass__``, ``__class_getitem__``, ``__set_name__``, ``__getattribute__``,
   ``__getattr__``, ``__setattr__``, ``__delattr__``, ``__del__``, ``__reduce__``,
   ``__reduce_ex__``, ``__getstate__``, ``__setstate__``, ``__instancecheck__``,
   ``__subclasscheck__``, ``__prepare__``, ``__mro_entries__`` is refused, and so is a string
   literal or keyword argument named so (``type(..., {"__torch_function__": f})``); binding names
   that would spoof identity (``__module__``, ``__qualname__``, ``__class__``, ``__dict__``,
   ``__name__``...) is refused. Other dunder methods (``__call__``, ``__eq__``...) are fine.
   Note: a class built by calling a metaclass with computed names is beyond any static
   scan; the kernel checks of section 3 do not depend on it.
5. Builtins. A free name (a load of a name bound nowhere in the file: the conservative
   file-wide set of bindings) must be in ``Rules.builtins``; ``__name__`` and ``__doc__``
   (module globals) are allowed too. ``__builtins__``, ``__import__``, ``__loader__``,
   ``__spec__``, ``globals``, ``locals``, ``vars`` are refused wherever they appear, bound
   by the file or not. ``getattr``/``hasattr``/``setattr``/``delattr`` (when free) only as a
   direct call with exactly its positional arguments, the name a string literal; the
   name is then checked as ``obj.name`` would be (``setattr``/``delattr`` as a store).
   One exception, for the course's own given helper (``_init_cell`` in recurrent_cells.py,
   ``setattr(cell, name, ...)`` over a dict of parameter names): ``setattr(v, <computed>,
   value)`` where ``v`` is a plain variable of the file's own (not an import, not an
   expression). Its name cannot be checked here: the worker's ``setattr`` (section 2 of the
   design) must refuse underscore and frame names, modules and classes the file did not
   define.
6. Forbidden names (the unit's list; its kernel families are ``enforce``'s): a resolved object that IS a forbidden name's object is reported under the
   first listed name for it; a ``torch.Tensor.<m>`` entry also flags ``.m`` on any value
   but a sibling unit.
7. Siblings. ``siblings`` is the sibling units' names, or a mapping name -> the source
   the sibling will run as. A sibling's globals include the modules it imported
   (``attention.torch``), which no scan of this file can resolve, so a name taken from a
   sibling (``from .s import n``, ``s.n``) must be one the sibling defines by def, class
   or assignment (given its source), or, given names only, must not be the last
   component of an allowed module (``torch``, ``nn``, ``functional``...) or ``F``: the
   caller should pass sources (the grader knows the stand-ins' and the student's files).
"""
from __future__ import annotations

import ast
import functools
import re
import string
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from autograder.trust.forbidden import Use
from autograder.trust.world import MISSING, VALUE, Ref, World, dunder, world
from autograder.core.i18n import N_
from autograder.trust.source import read_source
from autograder.core.manifest import Rules

TENSOR_PREFIX = "torch.Tensor."

ALLOWED_DUNDERS = frozenset({"__init__", "__class__", "__name__"})
FRAME_ATTRIBUTES = frozenset({
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next",
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "cr_origin",
    "ag_frame", "ag_code", "ag_await",
})
REFUSED_ATTRIBUTES = frozenset({"format_map", "mro"})
NEVER_NAMES = frozenset({"__builtins__", "__import__", "__loader__", "__spec__", "globals", "locals", "vars", "__owned__"})
MODULE_GLOBALS = frozenset({"__name__", "__doc__"})
REFUSED_DEFINITIONS = frozenset({
    "__torch_function__", "__torch_dispatch__", "__init_subclass__", "__class_getitem__", "__set_name__",
    "__getattribute__", "__getattr__", "__setattr__", "__delattr__", "__del__", "__reduce__", "__reduce_ex__",
    "__getstate__", "__setstate__", "__instancecheck__", "__subclasscheck__", "__prepare__", "__mro_entries__",
})
SPOOFING_NAMES = frozenset({
    "__module__", "__qualname__", "__class__", "__dict__", "__name__", "__file__", "__package__", "__path__",
    "__cached__", "__bases__", "__mro__", "__code__", "__globals__", "__closure__", "__wrapped__",
})
NAME_BUILTINS = {"getattr": 2, "hasattr": 2, "setattr": 3, "delattr": 2}  # name -> positional arguments
DEFINING_CALLS = frozenset({"register_buffer", "register_parameter", "register_module", "add_module", "setattr"})
_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=]")  # tokenize's own pattern


@functools.lru_cache(maxsize=64)
def _exports(source: str) -> frozenset[str]:
    """The public names a sibling's source defines at top level other than by an import."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return frozenset(n for n in names if not n.startswith("_"))


def _plain_fields(text: str, depth: int = 0) -> bool:
    """Whether a format string's replacement fields name arguments only (no ``.x``, no ``[k]``)."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return False
    for _, field, spec, _ in parsed:
        if field is not None and ("." in field or "[" in field):
            return False
        if spec and (depth > 2 or not _plain_fields(spec, depth + 1)):
            return False
    return True


class _Scan(ast.NodeVisitor):
    def __init__(self, world: World, forbidden: tuple[str, ...], siblings):
        self.w = world
        self.forbidden = world.forbidden(tuple(forbidden))
        self.methods = {n[len(TENSOR_PREFIX):] for n in forbidden if n.startswith(TENSOR_PREFIX)}
        if isinstance(siblings, Mapping):
            self.siblings: dict[str, frozenset[str] | None] = {
                name: _exports(source) for name, source in siblings.items()}
        else:
            self.siblings = {name: None for name in siblings}
        self.imports: dict[str, Ref] = {}  # names bound by imports
        self.bound: dict[str, int] = {}  # names bound otherwise -> first line
        self.private: set[str] = set()  # underscore names the file defines
        self.defined: set[str] = set()  # every name the file defines (def, class, binding, attribute store)
        self.methods_of: dict[ast.AST, str] = {}  # a method of one of the file's classes -> its self/cls name
        self.classes: set[str] = set()  # the file's class names
        self.owners: list[str] = []  # the self/cls names of the methods being visited
        self.uses: list[Use] = []

    def flag(self, name: str, node_or_line) -> None:
        line = node_or_line if isinstance(node_or_line, int) else getattr(node_or_line, "lineno", None)
        self.uses.append(Use(name, line))

    # -- pass 1: bindings, definitions, imports --------------------------------------------

    def collect(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                self._bind(node.id, node)
            elif isinstance(node, ast.arg):
                self._bind(node.arg, node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._bind(node.name, node)
            elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
                self._bind(node.name, node)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                self._bind(node.rest, node)
            elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
                self.private.add(node.attr)
                self.defined.add(node.attr)
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                index = 1 if name == "setattr" else 0
                if name in DEFINING_CALLS and len(node.args) > index and isinstance(node.args[index], ast.Constant):
                    self.private.add(str(cast(ast.Constant, node.args[index]).value))
            elif isinstance(node, ast.Import):
                self._import(node)
            elif isinstance(node, ast.ImportFrom):
                self._import_from(node)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self.classes.add(node.name)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (item.args.posonlyargs or item.args.args):
                        self.methods_of[item] = (item.args.posonlyargs or item.args.args)[0].arg
        self.defined |= self.private
        self.private = {n for n in self.private if n.startswith("_") and not dunder(n)}
        for name in self.imports.keys() & self.bound.keys():
            self.flag(N_("a second binding of {name} (an imported name)").format(name=name), self.bound[name])

    def _bind(self, name: str, node: ast.expr | ast.stmt | ast.arg | ast.excepthandler | ast.pattern) -> None:
        self.bound.setdefault(name, node.lineno)
        self.private.add(name)
        self._check_binding(name, node)

    def _check_binding(self, name: str, node: ast.AST) -> None:
        if name in NEVER_NAMES:
            self.flag(N_("{name} (never allowed)").format(name=name), node)
        elif name in REFUSED_DEFINITIONS:
            self.flag(N_("a definition of {name}").format(name=name), node)
        elif name in SPOOFING_NAMES:
            self.flag(N_("a binding of {name}").format(name=name), node)

    def _bind_import(self, name: str, ref: Ref, node: ast.AST) -> None:
        self._check_binding(name, node)  # import torch as __builtins__
        old = self.imports.setdefault(name, ref)
        if old is not ref and (old.kind, old.path) != (ref.kind, ref.path):
            self.flag(N_("a second binding of {name} (an imported name)").format(name=name), node)

    def _module_ref(self, name: str, node: ast.AST) -> Ref:
        module = self.w.module(name)
        if module is None:
            self.flag(N_("an import of {name} (not installed)").format(name=name), node)
            return VALUE
        return self._reached(name, module, node)

    def _import(self, node: ast.Import) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            target = alias.name if alias.asname else bound
            refused = [n for n in dict.fromkeys((alias.name, target)) if n not in self.w.modules]
            for name in refused:
                self.flag(N_("an import of {name}").format(name=name), node)
            self._bind_import(bound, VALUE if refused else self._module_ref(target, node), node)

    def _import_from(self, node: ast.ImportFrom) -> None:
        names = [a for a in node.names if a.name != "*"]
        if len(names) < len(node.names):
            self.flag(N_("a star import (from {dots}{module} import *)").format(dots='.' * node.level, module=node.module or ''), node)
        if node.level == 0:
            if node.module not in self.w.modules:
                for alias in names:
                    self._bind_import(alias.asname or alias.name, self._foreign(node.module, alias.name, node), node)
                return
            base = self._module_ref(node.module, node)
            for alias in names:
                ref = self._step(base, alias.name, node.lineno) if base is not VALUE else VALUE
                self._bind_import(alias.asname or alias.name, ref, node)
            return
        for alias in names:
            local = alias.asname or alias.name
            if node.level > 1:
                self.flag(N_("a relative import from outside the package (from {dots} import)").format(dots='.' * node.level), node)
            elif node.module is None and alias.name in self.siblings:
                self._bind_import(local, Ref("sibling", alias.name), node)
                continue
            elif node.module is None:
                self.flag(N_("an import of .{name} (not a sibling unit)").format(name=alias.name), node)
            elif node.module not in self.siblings:
                self.flag(N_("an import of .{module} (not a sibling unit)").format(module=node.module), node)
            else:
                self._sibling_name(node.module, alias.name, node.lineno)
            self._bind_import(local, VALUE, node)

    def _foreign(self, module: str | None, name: str, node: ast.ImportFrom) -> Ref:
        """``from module import name`` with ``module`` off the list: admitted when ``name`` is an allowed
        module, or an object an allowed module exports (judged by what it is, among the modules torch has
        imported already: nothing is imported for it)."""
        loaded = sys.modules.get(module or "")
        obj = vars(loaded).get(name, MISSING) if isinstance(loaded, types.ModuleType) and not name.startswith("_") else MISSING
        if isinstance(obj, types.ModuleType) and obj.__name__ in self.w.modules:
            return self._reached(obj.__name__, obj, node)
        path = self.w.exported(obj) if obj is not MISSING else None
        if path is None:
            self.flag(N_("an import from {module}").format(module=module), node)
            return VALUE
        return self._reached(path, obj, node)

    def _sibling_name(self, sibling: str, name: str, line: int) -> None:
        exports = self.siblings[sibling]
        if name.startswith("_"):
            self.flag(N_("{sibling}.{name} (a private name)").format(sibling=sibling, name=name), line)
        elif name not in exports if exports is not None else name in self.w.module_like:
            self.flag(N_("{sibling}.{name} (not a function or class {sibling} defines)").format(sibling=sibling, name=name), line)

    # -- resolution ------------------------------------------------------------------------

    def _chain(self, node: ast.AST) -> Ref | None:
        """What a Name/Attribute chain rooted at an imported name is; ``None`` if not so rooted."""
        if isinstance(node, ast.Name):
            return self.imports.get(node.id)
        if not isinstance(node, ast.Attribute):
            return None
        base = self._chain(node.value)
        if base is None:
            return None
        return self._step(base, node.attr, node.lineno, type(node.ctx).__name__)

    def _step(self, base: Ref, attr: str, line: int, ctx: str = "Load") -> Ref:
        store = {"Store": N_("an assignment to {path}"), "Del": N_("a deletion of {path}")}.get(ctx)
        if base.kind == "value":
            self._value_attr(attr, line)
            return VALUE
        path = f"{base.path}.{attr}"
        if store:
            self.flag(store.format(path=path), line)
        if base.kind == "sibling":
            self._sibling_name(base.path, attr, line)
            return VALUE
        if base.kind == "parent":
            found = self.w.attr(base.obj, attr)
            if not (isinstance(found, types.ModuleType) and found.__name__ in self.w.modules):
                self.flag(N_("{path} (a module outside the allowed list)").format(path=base.path), line)
                return VALUE
            return self._reached(found.__name__, found, line)
        private = base.kind == "module" and attr.startswith("_")
        if private:
            self.flag(N_("{path} (a private name)").format(path=path), line)
        elif base.kind == "object":
            self._value_attr(attr, line)
            if not isinstance(base.obj, type):
                return VALUE
        found = self.w.attr(base.obj, attr)
        if found is MISSING:
            if not private:
                self.flag(N_("{path} (no such name)").format(path=path), line)
            return VALUE
        return self._reached(path, found, line, quiet=private)

    def _reached(self, path: str, obj, where, quiet: bool = False) -> Ref:
        kind = "object"
        if isinstance(obj, types.ModuleType):
            kind, name = "module", getattr(obj, "__name__", None)
            if name in self.w.parents:
                return Ref("parent", name, obj)
            if name not in self.w.modules and not quiet:
                self.flag(N_("{path} (a module outside the allowed list)").format(path=path), where)
            path = name if isinstance(name, str) else path
        if self.w.denied(path, obj):
            self.flag(N_("{path} (denied)").format(path=path), where)
        if id(obj) in self.forbidden and self.forbidden[id(obj)][1] is obj:
            self.flag(self.forbidden[id(obj)][0], where)
        return Ref(kind, path, obj)

    def _owned(self, receiver: ast.AST | None) -> bool:
        """Whether ``receiver`` is ``self``/``cls`` of a method of the file's classes, or one of them."""
        return isinstance(receiver, ast.Name) and (receiver.id in self.owners or receiver.id in self.classes)

    def _value_attr(self, attr: str, where, strict: bool = False, receiver: ast.AST | None = None) -> None:
        """The rules for ``value.attr`` (rule 4) and forbidden method names (rule 6)."""
        if attr in FRAME_ATTRIBUTES or attr in REFUSED_ATTRIBUTES or attr.startswith("co_"):
            self.flag(N_("the attribute {attr}").format(attr=attr), where)
        elif dunder(attr) and not (attr in ALLOWED_DUNDERS and not strict):
            self.flag(N_("the attribute {attr}").format(attr=attr), where)
        elif attr.startswith("_") and not dunder(attr) and not (attr in self.private and self._owned(receiver)):
            self.flag(N_("the attribute {attr} (a private name: only on self inside this file's own classes)").format(
                attr=attr), where)
        if attr in self.methods and attr not in self.defined:
            self.flag(TENSOR_PREFIX + attr, where)
        if attr in self.w.denied_attributes:
            self.flag(N_("the attribute {attr} (denied)").format(attr=attr), where)

    # -- pass 2: uses ----------------------------------------------------------------------

    def visit_Import(self, node) -> None:  # done in pass 1
        pass

    visit_ImportFrom = visit_Import

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if name in NEVER_NAMES:
            self.flag(N_("{name} (never allowed)").format(name=name), node)
        elif name in self.imports:
            ref = self.imports[name]
            if ref.kind in ("module", "sibling", "parent") and isinstance(node.ctx, ast.Load):
                self.flag(N_("a module used as a value ({name})").format(name=name), node)
        elif name in self.bound or name in MODULE_GLOBALS:
            pass
        elif name not in self.w.builtins:
            self.flag(N_("{name} (not an allowed builtin)").format(name=name), node)
        elif name in NAME_BUILTINS:
            self.flag(N_("{name} other than as {name}(obj, 'name')").format(name=name), node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        ref = self._chain(node)
        if ref is None:  # not rooted at an import: a value
            self.visit(node.value)
            self._value_attr(node.attr, node, receiver=node.value)
            receiver = node.value
            if node.attr == "format" and not (isinstance(receiver, ast.Constant) and isinstance(receiver.value, str)):
                self.flag(N_(".format on something other than a string literal"), node)
            elif node.attr == "format" and not _plain_fields(cast(str, cast(ast.Constant, receiver).value)):
                self.flag(N_("a format string that reads attributes or items"), node)
            if not isinstance(node.ctx, ast.Load) and (
                    (isinstance(receiver, ast.Attribute) and receiver.attr == "__class__")
                    or (isinstance(receiver, ast.Call) and getattr(receiver.func, "id", None) == "type")):
                self.flag(N_("an assignment to an attribute of a class ({attr})").format(attr=node.attr), node)
        elif ref.kind in ("module", "sibling", "parent") and isinstance(node.ctx, ast.Load):
            self.flag(N_("a module used as a value ({code})").format(code=ast.unparse(node)), node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else None
        if name not in NAME_BUILTINS or name in self.bound or name in self.imports or name not in self.w.builtins:
            self.generic_visit(node)
            return
        args = node.args
        counts = (2, 3) if name == "getattr" else (NAME_BUILTINS[name],)
        if (len(args) not in counts or node.keywords or any(isinstance(a, ast.Starred) for a in args)
                or not (isinstance(args[1], ast.Constant) and isinstance(args[1].value, str))):
            if not (name == "setattr" and len(args) == 3 and not node.keywords and isinstance(args[0], ast.Name)
                    and args[0].id in self.bound and args[0].id not in self.imports
                    and not any(isinstance(a, ast.Starred) for a in args)):
                self.flag(N_("{name} with a computed name").format(name=name), node)
            for child in (*args, *node.keywords):
                self.visit(child)
            return
        ref = self._chain(args[0])
        if ref is None:
            self.visit(args[0])
            ref = VALUE
        if ref.kind in ("module", "sibling", "parent"):
            self.flag(N_("{name} on a module ({path})").format(name=name, path=ref.path), node)
        elif ref.kind == "value":
            self._value_attr(args[1].value, node, receiver=args[0])
        else:
            ctx = {"setattr": "Store", "delattr": "Del"}.get(name, "Load")
            self._step(ref, args[1].value, node.lineno, ctx)
        for arg in args[2:]:
            self.visit(arg)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        owner = self.methods_of.get(node)
        if owner is not None:
            self.owners.append(owner)
        self.generic_visit(node)
        if owner is not None:
            self.owners.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attr in node.kwd_attrs:
            self._value_attr(attr, node, strict=True)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value in REFUSED_DEFINITIONS:
            self.flag(N_("the string {value!r}").format(value=node.value), node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg in REFUSED_DEFINITIONS:  # dict(__torch_function__=f)
            self.flag(N_("the keyword {arg}").format(arg=node.arg), node)
        self.generic_visit(node)


def scan(source: str, rules: Rules, forbidden: tuple[str, ...] = (),
         siblings: tuple[str, ...] | Mapping[str, str] = ()) -> list[Use]:
    """What ``source`` reaches that ``rules`` do not allow, and the unit's forbidden names it
    reaches; each once, at its first line, in line order. ``source`` must parse."""
    tree = ast.parse(source)
    scanner = _Scan(world(rules), tuple(forbidden), siblings)
    scanner.collect(tree)
    scanner.visit(tree)
    first: dict[str, Use] = {}
    for use in sorted(scanner.uses, key=lambda u: (u.line or 0, u.name)):
        first.setdefault(use.name, use)
    return sorted(first.values(), key=lambda u: (u.line or 0, u.name))


def scan_file(path: Path, rules: Rules, forbidden: tuple[str, ...] = (),
              siblings: tuple[str, ...] | Mapping[str, str] = ()) -> list[Use]:
    """:func:`scan` on the very text Python executes for ``path`` (``source.read_source``),
    plus a coding cookie other than UTF-8; a file that cannot be scanned is a finding."""
    try:
        source, encoding = read_source(Path(path))
        uses = scan(source, rules, forbidden, siblings)
    except (OSError, SyntaxError, ValueError, LookupError, RecursionError, MemoryError) as error:
        return [Use(N_("a file that cannot be scanned ({kind})").format(kind=type(error).__name__), 1)]
    if encoding not in ("utf-8", "utf-8-sig"):
        line = next((n for n, text in enumerate(source.splitlines()[:2], 1) if _COOKIE.match(text)), 1)
        uses.insert(0, Use(N_("a coding cookie for {encoding}").format(encoding=encoding), line))
    return uses
