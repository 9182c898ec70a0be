"""The world a unit may reach: the allowed modules of a set of rules, resolved to the objects
they hold (once per process and rules), so the scan (:mod:`autograder.trust.allowlist`) and the
run-time checks (:mod:`autograder.trust.restricted`) judge an object, however it is spelt.
"""
from __future__ import annotations

import functools
import importlib
import types
from dataclasses import dataclass
from fnmatch import fnmatchcase

from autograder.core.manifest import Rules


@dataclass(frozen=True)
class Ref:
    kind: str  # "module", "object" (resolved, not a module), "sibling" (a unit module), "value" (unknown)
    path: str = ""
    obj: object = None


VALUE = Ref("value")
MISSING = object()


def dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def notable(obj) -> bool:
    """Objects worth comparing by identity (not ints, strings or None)."""
    return isinstance(obj, (types.ModuleType, type)) or callable(obj)


class World:
    """The allowed modules as objects, resolved once per process for a set of rules."""

    def __init__(self, rules: Rules):
        self.modules, self.builtins = frozenset(rules.modules), frozenset(rules.builtins)
        self.deny, self.admit = tuple(rules.deny), tuple(rules.admit)
        self.roots = {m.split(".")[0] for m in self.modules}
        # Packages above an allowed module that are not allowed themselves (torch.utils above
        # torch.utils.checkpoint): a chain may pass through them to the allowed module, nothing more.
        self.parents = frozenset(".".join(m.split(".")[:i]) for m in self.modules
                                 for i in range(1, m.count(".") + 1)) - self.modules
        self._exports: dict[int, tuple[str, object]] | None = None
        self._attrs: dict[tuple[int, str], tuple[object, object]] = {}
        self._denied: dict[tuple[str, int], bool] = {}
        self._forbidden: dict[tuple[str, ...], dict[int, tuple[str, object]]] = {}
        exact = [p for p in self.deny if not any(c in p for c in "*?[")]
        self.deny_ids = {id(o): o for p in exact if notable(o := self.resolve(p))}
        self.denied_attributes = frozenset(
            p.rsplit(".", 1)[1] for p in exact if "." in p and isinstance(self.resolve(p.rsplit(".", 1)[0]), type))
        self.module_like = frozenset({m.split(".")[-1] for m in self.modules} | {"F"})

    def module(self, name: str):
        try:
            return importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not installed, or broken: refused either way
            return None

    def attr(self, obj, attr: str):
        key = (id(obj), attr)
        hit = self._attrs.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        try:  # a module's own namespace only: its __getattr__ (torch's lazy imports) is not run here
            found = vars(obj).get(attr, MISSING) if isinstance(obj, types.ModuleType) else getattr(obj, attr)
        except Exception:  # noqa: BLE001 - AttributeError, or a descriptor that raised
            found = MISSING
        if found is MISSING and isinstance(obj, types.ModuleType):
            sub = f"{obj.__name__}.{attr}"
            if sub in self.modules and (module := self.module(sub)) is not None:
                found = module
        self._attrs[key] = (obj, found)
        return found

    def resolve(self, dotted: str):
        """The object a trusted dotted name names, ``None`` if it does not resolve here."""
        parts = dotted.split(".")
        if parts[0] not in self.roots:
            return None  # never reachable from an allowed module anyway
        obj = self.module(parts[0])
        for part in parts[1:]:  # no import but the allowed modules' (attr): torch.onnx is not imported here
            if obj is None or (obj := self.attr(obj, part)) is MISSING:
                return None
        return obj

    def denied(self, path: str, obj) -> bool:
        key = (path, id(obj))
        if key not in self._denied:
            names = [path]
            if not isinstance(obj, types.ModuleType):
                module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
                if isinstance(module, str) and isinstance(qualname, str):
                    names.append(f"{module}.{qualname}")
            # An allowed module is never denied by a tree above it (torch.utils.checkpoint under torch.utils).
            admitted = any(fnmatchcase(path, p) for p in self.admit) or (
                isinstance(obj, types.ModuleType) and path in self.modules)
            self._denied[key] = not admitted and (id(obj) in self.deny_ids or any(
                fnmatchcase(n, p) or fnmatchcase(n, p + ".*") for n in names for p in self.deny))
        return self._denied[key]

    def exported(self, obj) -> str | None:
        """The path under which an allowed module exports ``obj`` publicly (one class reached by two
        import paths is one object: ``torch.autograd.function.Function`` is ``torch.autograd.Function``)."""
        if self._exports is None:
            self._exports = {}
            for name in sorted(self.modules):
                module = self.module(name)
                for attr, member in (vars(module).items() if module is not None else ()):
                    if not attr.startswith("_") and notable(member) and not isinstance(member, types.ModuleType):
                        self._exports.setdefault(id(member), (f"{name}.{attr}", member))
        hit = self._exports.get(id(obj))
        return hit[0] if hit is not None and hit[1] is obj else None

    def forbidden(self, names: tuple[str, ...]) -> dict[int, tuple[str, object]]:
        """id(object) -> (the first name listed for it, the object)."""
        if names not in self._forbidden:
            found: dict[int, tuple[str, object]] = {}
            for name in names:
                if notable(obj := self.resolve(name)):
                    found.setdefault(id(obj), (name, obj))
            self._forbidden[names] = found
        return self._forbidden[names]


@functools.lru_cache(maxsize=8)
def _world(rules: Rules) -> World:
    return World(rules)


def world(rules: Rules) -> World:
    """The allowed modules of ``rules`` as objects (one per process and rules)."""
    return _world(Rules(*(tuple(getattr(rules, f)) for f in ("modules", "deny", "builtins", "admit", "erase"))))
