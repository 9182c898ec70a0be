"""Load one unit of a submission as a module of a fresh, private package.

Each (submission, unit) pair gets its own package name, so two submissions or
two units never share module objects. When ``isolate`` is set, the unit's
siblings are the course's trusted stand-ins (a bug in ``attention.py`` then
cannot cost points in ``multi_head.py``); otherwise they are the submission's
own files, as a student running their whole package would see them.
"""
from __future__ import annotations

import importlib.util
import io
import itertools
import sys
import tokenize
import types
from collections.abc import Callable
from pathlib import Path

from autograder.core.manifest import Course, Unit

_counter = itertools.count()


class LoadError(Exception):
    """The unit could not be loaded; the message is meant for the student."""


def read_source(path: Path) -> tuple[str, str]:
    """The text Python executes for ``path`` and the encoding it was decoded with
    (the file's own coding cookie or BOM, UTF-8 by default)."""
    data = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:  # an unknown or contradicted cookie, or first lines that are not UTF-8
        data.decode("utf-8")  # the last is reported as such
        raise
    return data.decode(encoding), encoding


def _exec_file(module_name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # The text read_source decoded, not the import machinery's own reading: what runs is what
    # the forbidden-use scan (forbidden.scan_file) reads.
    exec(compile(read_source(path)[0], str(path), "exec", dont_inherit=True), module.__dict__)
    return module


def describe_import_error(path: Path, error: BaseException) -> str:
    name = path.name
    if isinstance(error, SyntaxError):
        where = f" line {error.lineno}" if error.lineno else ""  # a bad coding cookie has no line
        return f"{name}{where}: {error.msg} (the file does not compile)"
    if isinstance(error, UnicodeDecodeError):
        return f"{name} is not valid {error.encoding.upper()} text: {error.reason} at byte {error.start}"
    return f"importing {name} raised {type(error).__name__}: {safe_str(error)}"


def safe_str(error: BaseException, limit: int = 300) -> str:
    """``str(error)`` that survives a hostile ``__str__``, cut to ``limit`` characters."""
    try:
        text = str(error)
    except BaseException:  # noqa: BLE001 - the submission controls __str__
        text = "<the exception's message could not be printed>"
    return text if len(text) <= limit else text[:limit] + "…"


def load_unit(course: Course, unit: Unit, folder: Path, *, isolate: bool,
              trusted: Callable[[types.ModuleType], None] | None = None) -> types.ModuleType:
    """``trusted`` is applied to each stand-in module before the unit's own code runs."""
    path = folder / unit.file
    if not path.is_file():
        raise LoadError(f"{unit.file} was not found in the submission")
    package = f"_submission_{next(_counter)}"
    pkg = types.ModuleType(package)
    pkg.__path__ = [] if isolate else [str(folder)]
    sys.modules[package] = pkg
    if isolate:
        for sibling, stand_in in unit.stand_ins.items():
            module = _exec_file(f"{package}.{sibling}", course.root / stand_in)
            if trusted:
                trusted(module)
    try:
        return _exec_file(f"{package}.{path.stem}", path)
    except (Exception, SystemExit, KeyboardInterrupt) as error:  # the student's import-time code
        raise LoadError(describe_import_error(path, error)) from None
