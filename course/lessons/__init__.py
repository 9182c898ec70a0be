"""The lessons: prose in one place per language, code in one place for all.

``course/lessons/<lang>/<unit>.md`` holds a lesson's text (``en`` today; a
translation goes beside it as ``zh/<unit>.md`` with the same placeholders).
A placeholder on a line of its own stands for a code cell, the same in every
language:

  ``{{ setup }}``        the parameters cell (size of the demos, whose code they run)
  ``{{ exercise }}``     the unit's code and tests, as the nbgrader notebook's cells
  ``{{ demo: NAME }}``   run demo NAME of ``course.demos`` and show its plot

The engine renders a lesson (``autograder.authoring.notebook``: the same notebook
nbgrader grades); :func:`render` gives it as a jupytext percent-format script, and
``python -m course.lessons OUT_DIR`` writes every lesson as ``.ipynb`` and ``.py``.
The units are the ones ``course/course.toml`` lists, in its order.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from autograder.core.manifest import Course, load_course

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PLACEHOLDER = re.compile(r"^\{\{\s*(?P<kind>[a-z_]+)\s*(?::\s*(?P<arg>[a-z_0-9]+))?\s*\}\}\s*$")

SETUP = '''# SIZE: "small" runs every demo in seconds, "full" draws the plots of the course.
SIZE = "full"
# Whose code the demos run: "notebook" (what you write below, for this unit),
# "solutions", or a folder holding your unit files (e.g. "assignments").
SOURCE = "notebook"
PLOTS = "plots"  # where the demos save their PNGs'''

DEMO = '''from course.demos import run_demo, show, units_for

result = run_demo("{name}", PLOTS, size=SIZE, units=units_for(SOURCE, "{unit}", globals()))
show(result)'''


@functools.cache
def lesson_course() -> Course:
    """The course these lessons belong to: the manifest of the tree they sit in."""
    return load_course(ROOT)


def lesson_path(unit: str, lang: str = "en") -> Path:
    units = lesson_course().units
    if unit not in units:
        raise ValueError(f"no unit {unit!r}; the units are {', '.join(units)}")
    return HERE / lang / f"{unit}.md"


def parse(text: str) -> list[tuple[str, str]]:
    """Split a lesson into ("markdown", text) and (placeholder kind, argument) parts."""
    parts, prose = [], []
    for line in text.splitlines():
        match = PLACEHOLDER.match(line.strip())
        if match:
            if "".join(prose).strip():
                parts.append(("markdown", "\n".join(prose).strip("\n")))
            prose = []
            parts.append((match["kind"], match["arg"] or ""))
        else:
            prose.append(line)
    if "".join(prose).strip():
        parts.append(("markdown", "\n".join(prose).strip("\n")))
    return parts


def notebook(unit: str, lang: str = "en"):
    """The lesson as a notebook, rendered by the engine (the nbgrader notebooks' renderer): in the
    instructor's tree from solutions/, answers filled in; in a student's bundle, which has no
    solutions, the student notebook the release wrote beside the lesson."""
    import nbformat

    from autograder.authoring.notebook import build_notebook

    course = lesson_course()
    lesson_path(unit, lang)  # an unknown unit is refused by name
    if course.solutions.is_dir():
        return build_notebook(course, unit, lang=lang)
    return nbformat.read(str(HERE / lang / f"{unit}.ipynb"), as_version=4)


def render(unit: str, lang: str = "en") -> str:
    """The lesson as a jupytext percent-format script."""
    import jupytext

    return jupytext.writes(notebook(unit, lang), fmt="py:percent")


def write_all(out_dir: Path, lang: str = "en") -> list[Path]:
    """Write every lesson as ``<unit>.ipynb`` and ``<unit>.py`` (jupytext percent)."""
    import nbformat

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for unit in lesson_course().units:
        nb = notebook(unit, lang)
        nbformat.write(nb, str(out_dir / f"{unit}.ipynb"))
        (out_dir / f"{unit}.py").write_text(render(unit, lang), encoding="utf-8")
        written += [out_dir / f"{unit}.ipynb", out_dir / f"{unit}.py"]
    return written
