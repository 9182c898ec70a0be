"""A unit's lesson text, as notebook parts: the one place that decides where it comes from.

``<lessons>/<lang>/<unit>.md`` (the folder is course.toml's ``[paths] lessons``),
parsed by the course's lesson package there, whose ``{{ exercise }}``
placeholder marks where the code and tests go and whose ``{{ setup }}`` /
``{{ demo: NAME }}`` become demo cells that the grader's kernel skips; else the
solution module's docstring.
"""
from __future__ import annotations

import importlib.util
import types
from pathlib import Path

from autograder.core.errors import UsageError
from autograder.core.manifest import Course

def _lessons_package(course: Course) -> types.ModuleType:
    """The lesson authors' package (its ``parse``, ``SETUP`` and ``DEMO``), loaded from its
    folder by path: nothing is added to ``sys.path``, and nothing else of it runs."""
    spec = importlib.util.spec_from_file_location("_course_lessons", course.lessons / "__init__.py",
                                                  submodule_search_locations=[str(course.lessons)])
    assert spec is not None and spec.loader is not None  # a .py file's
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def languages(course: Course) -> list[str]:
    """The languages of the lessons: the folders under the lessons folder (``en``, ``zh``, ...;
    one whose name starts with ``_`` or ``.`` is not a language)."""
    return sorted(p.name for p in course.lessons.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def lesson_source(course: Course, unit: str, lang: str | None = None) -> Path | None:
    path = course.lessons / (lang or course.language) / f"{unit}.md"
    return path if path.is_file() else None


def lesson_parts(course: Course, unit: str, docstring: str, lang: str | None = None) -> list[tuple[str, str]]:
    """The lesson of ``unit`` as ("markdown", text), ("exercise", ""), and
    ("setup" | "demo", code) parts, in order.

    From ``<lessons>/<lang>/<unit>.md`` (parsed by the lessons package,
    whose ``{{ exercise }}`` placeholder marks where the unit's code and tests
    go) when it exists, else the solution module's docstring.
    """
    path = lesson_source(course, unit, lang)
    if path is None:
        title = course.units[unit].title
        text = "\n".join(line.rstrip() for line in docstring.strip().splitlines())
        return [("markdown", f"# {title}\n\n{text}"), ("exercise", "")]
    lessons = _lessons_package(course)
    parts = []
    for kind, arg in lessons.parse(path.read_text(encoding="utf-8")):
        if kind == "markdown":
            parts.append(("markdown", arg))
        elif kind == "exercise":
            parts.append(("exercise", ""))
        elif kind == "setup":
            # The setup cell names the lesson's language (``{lang}`` in the lessons' SETUP): the kernel's
            # test cells and demos print in it (autograder.nbgrader.kernel_side.speak).
            parts.append(("setup", lessons.SETUP.replace("{lang}", lang or course.language)))
        elif kind == "demo":
            parts.append(("demo", lessons.DEMO.format(name=arg, unit=unit)))
        else:
            raise UsageError(f"{path}: unknown placeholder {{{{ {kind} }}}}")
    if not any(kind == "exercise" for kind, _ in parts):
        parts.append(("exercise", ""))
    return parts
