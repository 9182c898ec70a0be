"""Load one unit of a submission as a module of a fresh, private package.

Each (submission, unit) pair gets its own package name, so two submissions or
two units never share module objects. When ``isolate`` is set, the unit's
siblings are the course's trusted stand-ins (a bug in ``attention.py`` then
cannot cost points in ``multi_head.py``); otherwise they are the submission's
own files, as a student running their whole package would see them.
"""
from __future__ import annotations

import ast
import importlib.util
import itertools
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import cast

from autograder.core.errors import AutograderError
from autograder.core.i18n import N_
from autograder.core.manifest import CourseUnits, Rules, Unit
from autograder.trust import restricted
from autograder.trust.source import read_source, safe_str

_counter = itertools.count()


class LoadError(AutograderError):
    """The unit could not be loaded; the message is meant for the student."""


def _exec_file(module_name: str, path: Path, builtins: dict | None = None) -> types.ModuleType:
    """Run ``path`` as the module ``module_name``; with ``builtins``, as its ``__builtins__``."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None  # path is a unit's .py file, which has a loader
    module = importlib.util.module_from_spec(spec)
    if builtins is not None:
        module.__builtins__ = builtins  # type: ignore[attr-defined]  # typeshed's ModuleType does not declare it
    sys.modules[module_name] = module
    # The text read_source decoded, not the import machinery's own reading: what runs is what
    # the forbidden-use scan (forbidden.scan_file) reads.
    source: str | ast.Module = read_source(path)[0]
    if builtins is not None:

        source = restricted.guard_private(cast(str, source))
    exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)
    return module


def describe_import_error(path: Path, error: BaseException) -> str:
    name = path.name
    if isinstance(error, SyntaxError):
        if error.lineno:  # a bad coding cookie has no line
            return N_("{file} line {line}: {problem} (the file does not compile)").format(
                file=name, line=error.lineno, problem=error.msg)
        return N_("{file}: {problem} (the file does not compile)").format(file=name, problem=error.msg)
    if isinstance(error, UnicodeDecodeError):
        return N_("{file} is not valid {encoding} text: {reason} at byte {start}").format(
            file=name, encoding=error.encoding.upper(), reason=error.reason, start=error.start)
    return N_("importing {file} raised {kind}: {problem}").format(file=name, kind=type(error).__name__,
                                                                   problem=safe_str(error))


def _package(prefix: str, path: list[str]) -> str:
    """A fresh, empty package named ``<prefix>_N`` whose modules are found on ``path``."""
    package = f"{prefix}_{next(_counter)}"
    pkg = types.ModuleType(package)
    pkg.__path__ = path
    sys.modules[package] = pkg
    return package


def load_stand_ins(course: CourseUnits, unit: Unit, *,
                   trusted: Callable[[types.ModuleType], None] | None = None) -> dict[str, types.ModuleType]:
    """The trusted stand-ins of ``unit``'s siblings (course.toml ``stand_ins``), each a module of
    one fresh private package, so the unit's ``from .sibling import ...`` finds them there.

    The only place stand-ins are loaded: the grader, the notebooks and the demos all call this.
    ``trusted`` is applied to each module as it is made.
    """
    return _stand_ins_into(_package("_stand_ins", []), course, unit, trusted)


def _stand_ins_into(package: str, course: CourseUnits, unit: Unit, trusted) -> dict[str, types.ModuleType]:
    found = {}
    for sibling, stand_in in unit.stand_ins.items():
        found[sibling] = _exec_file(f"{package}.{sibling}", course.root / stand_in)
        if trusted:
            trusted(found[sibling])
    return found


def load_handed(course: CourseUnits, unit: Unit) -> types.ModuleType:
    """The course's classes that stand in for the torch modules ``unit``'s tests hand to its code
    (course.toml ``handed``), as a module of a private package no unit can import."""
    return _exec_file(f"{_package('_handed', [])}.{Path(cast(str, unit.handed)).stem}", course.root / cast(str, unit.handed))


def load_folder(course: CourseUnits, folder: Path) -> dict[str, types.ModuleType]:
    """Every unit file present in ``folder``, imported as one private package (the units then
    import each other as a student's package would); unit name -> module."""
    package = _package("_folder", [str(folder)])
    return {u.name: importlib.import_module(f"{package}.{Path(u.file).stem}")
            for u in course.units.values() if (folder / u.file).is_file()}


def absent(unit: Unit, folder: Path) -> str | None:
    """Why ``unit`` cannot load because ``folder`` lacks its file (or None): the sandbox's host
    tells it so without starting a worker for it."""
    if (folder / unit.file).is_file():
        return None
    return N_("{file} was not found in the submission").format(file=unit.file)


def load_unit(course: CourseUnits, unit: Unit, folder: Path, *, isolate: bool,
              trusted: Callable[[types.ModuleType], None] | None = None, rules: Rules | None = None) -> types.ModuleType:
    """``trusted`` is applied to each stand-in module before the unit's own code runs. With
    ``rules``, the unit (and any sibling of the submission's it imports) runs with the builtins
    of ``restricted.builtins_for``: what the allow-list scan approved is what runs."""
    path = folder / unit.file
    if problem := absent(unit, folder):
        raise LoadError(problem)
    package = _package("_submission", [] if isolate else [str(folder)])
    if isolate:
        _stand_ins_into(package, course, unit, trusted)
    table = None
    if rules is not None:

        stems = {Path(u.file).stem for u in course.units.values()}

        def load_sibling(name: str) -> None:
            # A submission's own sibling runs under the same builtins; a stand-in is loaded already.
            if f"{package}.{name}" not in sys.modules and not isolate and name in stems and (folder / f"{name}.py").is_file():
                _exec_file(f"{package}.{name}", folder / f"{name}.py", table)

        table = restricted.builtins_for(package, rules, load_sibling)
    try:
        return _exec_file(f"{package}.{path.stem}", path, table)
    except (Exception, SystemExit, KeyboardInterrupt) as error:  # the student's import-time code
        raise LoadError(describe_import_error(path, error)) from None
