"""The builtins a unit file runs with: what the allow-list scan approved is what runs.

The static scan (``allowlist``) reads the file; this module makes the run-time match it
(docs/trust-design.md, section 2). A unit module's ``__builtins__`` is a dict holding only
``Rules.builtins``, plus what Python itself needs for a class statement and an import:

- ``__import__``, for an import statement of the unit's, admits the allowed modules and the unit's sibling units (relative imports)
  only, and no underscore name in ``from ... import``. A sibling that is a submission's own
  file is executed with these same builtins (a stand-in is the course's and is loaded already).
- ``getattr``/``hasattr`` refuse dunder names but ``__init__``, ``__class__`` and ``__name__``,
  frame and code attributes, any name on a module, and single-underscore names except on the
  unit's own classes and their instances (the scan allows the names the file defines; that
  set is not known here, and no escape needs another class's private name);
- ``setattr``/``delattr`` refuse the same, and any class but the unit's own (an honest file
  sets attributes of its own objects: ``setattr(cell, name, parameter)``).

Decided: a refusal raises ``AttributeError`` with a message naming the rule, so honest code
that probes with ``hasattr`` gets ``False`` for a refused name, as it would for a missing one.
"""
from __future__ import annotations

import ast
import builtins
import dis
import sys
import types
from collections.abc import Callable
from fnmatch import fnmatchcase

from autograder.core.manifest import Rules
from autograder.trust.allowlist import ALLOWED_DUNDERS, FRAME_ATTRIBUTES
from autograder.trust.world import world as allowed_world



IMPORT_NAME = dis.opmap["IMPORT_NAME"]


def _from_import_statement(frame) -> bool:
    """Whether ``frame`` is executing an import statement (not a C function that imports)."""
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == IMPORT_NAME


def _own(obj, package: str) -> bool:
    """Whether ``obj`` is a class of the unit's package, or an instance of one."""
    cls = obj if isinstance(obj, type) else type(obj)
    return any((getattr(c, "__module__", None) or "").startswith(package + ".") for c in cls.__mro__)


def _refusal(obj, name, package: str, store: bool) -> str | None:
    if type(name) is not str:
        return "an attribute name must be a str"
    if isinstance(obj, types.ModuleType):
        return f"attributes of a module by a computed name ({name!r})"
    if name in FRAME_ATTRIBUTES or name.startswith("co_"):
        return f"frame and code attributes ({name!r})"
    if name.startswith("__") and name.endswith("__"):
        if name not in ALLOWED_DUNDERS or store:
            return f"the special attribute {name!r}"
    elif name.startswith("_") and not _own(obj, package):
        return f"a private attribute ({name!r}) of an object the unit did not define"
    if store and isinstance(obj, type) and not _own(obj, package):
        return f"changing the class {obj.__name__}, which the unit did not define"
    return None


OWNED = "__owned__"  # the builtin every private attribute's receiver passes through (guard_private)


class _PrivateReceivers(ast.NodeTransformer):
    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr.startswith("_") and not (node.attr.startswith("__") and node.attr.endswith("__")):
            call = ast.Call(func=ast.Name(OWNED, ast.Load()), args=[node.value], keywords=[])
            node.value = ast.copy_location(call, node.value)
        return node


def guard_private(source: str) -> ast.Module:
    """``source`` with the receiver of every ``_private`` attribute wrapped in ``__owned__(...)``,
    which returns it only if it is one of the unit's own classes or an instance of one. The scan
    allows ``self._x`` by spelling; this makes ``Own.method(any_object)`` reach nothing private of
    an object the unit did not make."""
    return ast.fix_missing_locations(_PrivateReceivers().visit(ast.parse(source)))


def builtins_for(package: str, rules: Rules, load_sibling: Callable[[str], None]) -> dict:
    """The ``__builtins__`` of a unit module of ``package``. ``load_sibling(name)`` makes sure
    the sibling unit ``package.name`` is in ``sys.modules`` before a relative import takes it."""
    allowed, modules, deny = rules.builtins, rules.modules, rules.deny
    world = allowed_world(rules)

    def foreign(name: str, fromlist) -> types.SimpleNamespace | None:
        # from M import n, M off the list: only names that are an allowed module or an allowed module's
        # public export (the scan's rule), handed over without M itself.
        loaded = sys.modules.get(name)
        if not isinstance(loaded, types.ModuleType) or not fromlist:
            return None
        found = {}
        for item in fromlist:
            obj = vars(loaded).get(item)
            if not ((isinstance(obj, types.ModuleType) and obj.__name__ in modules) or world.exported(obj)):
                return None
            found[item] = obj
        return types.SimpleNamespace(**found)

    def check(obj, name, store=False):
        why = _refusal(obj, name, package, store)
        if why:
            raise AttributeError(f"a unit file may not reach {why} (the API page lists what it may use)")

    def owned(obj):
        if not _own(obj, package):
            raise AttributeError("a unit file may reach private attributes only of its own classes and their objects")
        return obj

    def checked_getattr(obj, name, *default):
        check(obj, name)
        return getattr(obj, name, *default)

    def checked_hasattr(obj, name):
        try:
            check(obj, name)
        except AttributeError:
            return False
        return hasattr(obj, name)

    def checked_setattr(obj, name, value):
        check(obj, name, store=True)
        setattr(obj, name, value)

    def checked_delattr(obj, name):
        check(obj, name, store=True)
        delattr(obj, name)

    def checked_import(name, globals=None, locals=None, fromlist=(), level=0):
        if not _from_import_statement(sys._getframe(1)):
            # torch's C code imports what it needs through the current frame's builtins (PyImport_Import).
            return builtins.__import__(name, globals, locals, fromlist, level)
        for item in fromlist or ():
            if type(item) is not str or item.startswith("_"):
                raise ImportError(f"a unit file may not import the name {item!r}")
        if level:
            if level != 1:
                raise ImportError("a unit file imports its siblings with one dot: from .sibling import ...")
            for sibling in ([name] if name else list(fromlist or ())):
                load_sibling(sibling)
            return builtins.__import__(name, {"__package__": package, "__name__": package + ".x"}, None,
                                       fromlist, level)
        if name not in modules and (namespace := foreign(name, fromlist)) is not None:
            return namespace
        if name not in modules or any(fnmatchcase(name, p) for p in deny):
            raise ImportError(f"a unit file may not import {name} (the API page lists the modules it may)")
        module = builtins.__import__(name, None, None, fromlist, 0)
        for item in fromlist or ():
            value = getattr(module, item, None)
            if isinstance(value, types.ModuleType) and value.__name__ not in modules:
                raise ImportError(f"a unit file may not import {value.__name__}")
        return module

    table = {n: getattr(builtins, n) for n in allowed if hasattr(builtins, n)}
    table.update(getattr=checked_getattr, hasattr=checked_hasattr, setattr=checked_setattr, delattr=checked_delattr)
    table.update(__build_class__=builtins.__build_class__, __import__=checked_import, __name__="builtins")
    table[OWNED] = owned
    return {n: v for n, v in table.items() if n in allowed or n.startswith("__")}
