"""The student bundle: what students get, and nothing they must not see.

It holds what course.toml's ``[paths] student_bundle`` lists: the stubs, the
public tests, the engine (so ``check`` works), the course manifest, the
lessons, demos and viewer, and the API page (the contract the stubs' docstrings
cite); with a minimal pyproject.toml so that ``pip install -e .`` works. It
never holds solutions/, tests/hidden/, the mutants, or the stand-ins (correct
code for units 2 and 3, written over torch: shipping them would hand out
answers; the lessons and demos then run on the student's own units).
"""
from __future__ import annotations

import json

import shutil
from pathlib import Path

import nbformat

from autograder.authoring.lesson import languages, lesson_source
from autograder.authoring.notebook import build_notebook
from autograder.delivery.classroom import workflow
from autograder.core.manifest import Course
from autograder.core.versions import requirement

PYPROJECT = """[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "{package}"
version = "0.1.0"
description = "Your work for {course}: fill in assignments/, check it with `{command} check`."
requires-python = ">=3.11"
# Install torch first (the CPU wheel: pip install torch --index-url https://download.pytorch.org/whl/cpu).
# hypothesis is the grader's own version: the public tests then see the grader's examples.
# The course's own needs (course.toml's student_requires) follow the engine's.
dependencies = ["torch>=2.4", "numpy>=1.26", "{hypothesis}", "pytest>=8", "rich>=13", "jsonschema>=4"{extra}]

[project.scripts]
{command} = "autograder.cli:main"

# The engine, your units, and the course's lessons and demos (course.demos), importable
# from anywhere once installed with `pip install -e .`.
[tool.setuptools.packages.find]
include = ["autograder*", "assignments*", "course*"]
"""

def release(course: Course, out: Path, langs: list[str] | None = None) -> Path:
    """Write the bundle into the new folder ``out``, its notebooks in ``langs`` (default: every
    language the lessons are written in)."""
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose a new folder")
    unknown = set(langs or ()) - set(languages(course))
    if unknown:
        raise ValueError(f"no lessons in {', '.join(sorted(unknown))}; they are written in {', '.join(languages(course))}")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in course.student_bundle:
        source, target = course.root / name, out / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=ignore)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    brand = course.brand
    (out / "pyproject.toml").write_text(PYPROJECT.format(
        package=brand.student_package, course=course.name, command=brand.command,
        hypothesis=requirement("hypothesis"), extra="".join(f", {json.dumps(r)}" for r in course.student_requires)),
        encoding="utf-8")
    # The course writes what its students read; the engine fills in the names.
    (out / "README.md").write_text(course.student_readme.read_text(encoding="utf-8").format(
        course=course.name, command=brand.command, api=course.api.relative_to(course.root).as_posix()),
        encoding="utf-8")
    _student_notebooks(course, out / course.lessons.relative_to(course.root), langs or languages(course))
    (out / ".github" / "workflows").mkdir(parents=True)
    (out / ".github" / "workflows" / "classroom.yml").write_text(workflow(course), encoding="utf-8")
    return out


def _student_notebooks(course: Course, folder: Path, langs: list[str]) -> None:
    """Each lesson, in each of ``langs``, as the notebook a student gets (the bundle has no
    solutions to build it from): ``<lessons>/<lang>/<unit>.ipynb``."""
    for lang in langs:
        for unit in course.units:
            if lesson_source(course, unit, lang) is not None:
                nb = build_notebook(course, unit, lang=lang, student=True)
                nbformat.write(nb, str(folder / lang / f"{unit}.ipynb"))
