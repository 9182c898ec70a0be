"""The student bundle: what students get, and nothing they must not see.

It holds the stubs, the public tests, the engine (so ``attn-course check``
works), the course manifest, the lessons, demos and viewer, with a minimal
pyproject.toml so that ``pip install -e .`` works. It never holds
solutions/, tests/hidden/, the mutants, or the stand-ins (correct code for
units 2 and 3, written over torch: shipping them would hand out answers; the
demos then run on the student's own units).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from autograder.delivery.classroom import workflow
from autograder.core.manifest import Course
from autograder.core.versions import requirement

PYPROJECT = """[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "attention-course-student"
version = "0.1.0"
description = "Your work for attention-course: fill in assignments/, check it with `attn-course check`."
requires-python = ">=3.11"
# Install torch first (the CPU wheel: pip install torch --index-url https://download.pytorch.org/whl/cpu).
# hypothesis is the grader's own version: the public tests then see the grader's examples.
dependencies = ["torch>=2.4", "numpy>=1.26", "{hypothesis}", "pytest>=8", "rich>=13"]

[project.scripts]
attn-course = "autograder.cli:main"

[tool.setuptools]
packages = ["autograder", "assignments"]
"""

README = """# attention-course: your work

1. Install: `pip install torch --index-url https://download.pytorch.org/whl/cpu && pip install -e .`
2. Fill in every TODO in `assignments/`; the docstrings give the shapes.
3. Check your work: `attn-course check` (or `attn-course check attention` for one unit).

The public tests are a first check. Your grade also counts hidden properties.
"""

# Relative to the course root; lessons are copied when present.
SHIPPED = ["assignments", "autograder", "tests/public", "course/lessons", "course/demos"]


def release(course: Course, out: Path) -> Path:
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose a new folder")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in SHIPPED:
        if (course.root / folder).is_dir():
            shutil.copytree(course.root / folder, out / folder, ignore=ignore)
    (out / "course").mkdir(parents=True, exist_ok=True)
    for name in ("course.toml", "viz.py"):
        shutil.copy(course.root / "course" / name, out / "course" / name)
    (out / "pyproject.toml").write_text(PYPROJECT.format(hypothesis=requirement("hypothesis")), encoding="utf-8")
    (out / "README.md").write_text(README, encoding="utf-8")
    (out / ".github" / "workflows").mkdir(parents=True)
    (out / ".github" / "workflows" / "classroom.yml").write_text(workflow(course), encoding="utf-8")
    return out
