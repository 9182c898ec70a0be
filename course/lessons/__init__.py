"""The lessons: prose in one place per language, code in one place for all.

``course/lessons/<lang>/<unit>.md`` holds a lesson's text (``en`` today; a
translation goes beside it as ``zh/<unit>.md`` with the same placeholders).
A placeholder on a line of its own stands for a code cell, the same in every
language:

  ``{{ setup }}``        the parameters cell (size of the demos, whose code they run)
  ``{{ exercise }}``     the unit's code, as an nbgrader solution cell (from solutions/;
                         in a student's bundle, which has none, the stub in assignments/)
  ``{{ demo: NAME }}``   run demo NAME of ``course.demos`` and show its plot

:func:`render` turns a lesson into a jupytext percent-format script;
``python -m course.lessons OUT_DIR`` writes every lesson as ``.py`` and ``.ipynb``.
The units are the ones ``course/course.toml`` lists, in its order.
"""
from __future__ import annotations

import functools
import json
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


def languages(folder: Path = HERE) -> list[str]:
    """The language folders of a lessons folder (``en``, ...)."""
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


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


def _sibling_module(course: Course, unit: str, sibling: str) -> str:
    """Where a notebook imports ``unit``'s sibling from: its trusted stand-in where the course has
    it (as when the grader isolates a unit), else the student's own file in assignments/ (a
    student's bundle ships no stand-ins; ``check`` also runs a student's units together)."""
    stand_in = course.units[unit].stand_ins.get(sibling)
    path = course.root / stand_in if stand_in else None
    if path is None or not path.is_file():
        path = course.assignments / f"{sibling}.py"
    return ".".join(path.relative_to(course.root).with_suffix("").parts)


def exercise_code(unit: str) -> str:
    """The unit's file, its sibling imports made absolute (a notebook has no package): the
    reference in solutions/, or the stub in assignments/ where there is no solutions/ (a
    student's bundle)."""
    course = lesson_course()
    folder = course.solutions if course.solutions.is_dir() else course.assignments
    source = (folder / course.units[unit].file).read_text(encoding="utf-8")
    return re.sub(r"^from \.(\w+) import", lambda m: f"from {_sibling_module(course, unit, m[1])} import",
                  source, flags=re.M).rstrip()


def _code_cell(code: str, **metadata) -> str:
    header = "# %%" + "".join(f" {key}={json.dumps(value)}" for key, value in metadata.items())
    return f"{header}\n{code.rstrip()}\n"


def _markdown_cell(text: str) -> str:
    lines = [("# " + line) if line.strip() else "#" for line in text.splitlines()]
    return "# %% [markdown]\n" + "\n".join(lines) + "\n"


def render(unit: str, lang: str = "en") -> str:
    """The lesson as a jupytext percent-format script (the source of the nbgrader notebook)."""
    from course.demos import DEMOS

    cells = []
    for kind, arg in parse(lesson_path(unit, lang).read_text(encoding="utf-8")):
        if kind == "markdown":
            cells.append(_markdown_cell(arg))
        elif kind == "setup":
            cells.append(_code_cell(SETUP, tags=["parameters"]))
        elif kind == "exercise":
            cells.append(_code_cell(exercise_code(unit), nbgrader={
                "grade": False, "grade_id": f"{unit}_code", "locked": False,
                "schema_version": 3, "solution": True, "task": False}))
        elif kind == "demo":
            if arg not in DEMOS:
                raise ValueError(f"{lesson_path(unit, lang)}: no demo named {arg!r}")
            cells.append(_code_cell(DEMO.format(name=arg, unit=unit)))
        else:
            raise ValueError(f"{lesson_path(unit, lang)}: unknown placeholder {{{{ {kind} }}}}")
    header = ("# ---\n# jupyter:\n#   jupytext:\n#     formats: ipynb,py:percent\n"
              "#   kernelspec:\n#     display_name: Python 3\n#     language: python\n#     name: python3\n# ---\n")
    return header + "\n" + "\n".join(cells)


def write_all(out_dir: Path, lang: str = "en", *, notebooks: bool = True) -> list[Path]:
    """Write every lesson as ``<unit>.py`` (jupytext percent) and, with jupytext, ``<unit>.ipynb``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for unit in lesson_course().units:
        script = render(unit, lang)
        path = out_dir / f"{unit}.py"
        path.write_text(script, encoding="utf-8")
        written.append(path)
        if notebooks:
            import jupytext

            notebook = jupytext.reads(script, fmt="py:percent")
            jupytext.write(notebook, out_dir / f"{unit}.ipynb")
            written.append(out_dir / f"{unit}.ipynb")
    return written
