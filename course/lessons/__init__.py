"""The lessons: prose in one place per language, code in one place for all.

``course/lessons/<lang>/<unit>.md`` holds a lesson's text (``en`` today; a
translation goes beside it as ``zh/<unit>.md`` with the same placeholders).
A placeholder on a line of its own stands for a code cell, the same in every
language:

  ``{{ setup }}``        the parameters cell (size of the demos, whose code they run, the language
                         the kernel prints in: ``LANG``, the lesson's)
  ``{{ exercise }}``     the unit's code and tests, as the nbgrader notebook's cells
  ``{{ demo: NAME }}``   run demo NAME of ``course.demos`` and show its plot

A number the text quotes from a demo is written ``{{ DEMO.KEY }}`` inside the prose:
the demo's ``quotes(result)[KEY]`` for the reference at full size, as
``measured.json`` (written by ``course/make_plots.py --record``) holds it, so the
text cannot disagree with the plot; a time is the range measured over several runs.

The engine renders a lesson (``autograder.authoring.notebook``: the same notebook
nbgrader grades); :func:`render` gives it as a jupytext percent-format script, and
``python -m course.lessons OUT_DIR`` writes every lesson as ``.ipynb`` and ``.py``, in
course.toml's ``language`` unless ``--lang`` names another that :func:`languages` lists.
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
# Whose code the demos and the test cells run for this lesson's unit: "auto" (the answer cells
# below once you have filled them all in, else your file in the course's assignments/ folder,
# wherever this notebook is), "notebook" (the answer cells below), "solutions" (the reference,
# where the course has it), or a folder holding your unit files (a relative one is looked for
# here, then in the course's folder).
SOURCE = "auto"
PLOTS = "plots"  # where the demos save their PNGs
LANG = "{lang}"  # the language of the test results, the demos' messages and the plots' labels'''

DEMO = '''from course.demos import run_and_show, units_for

result = run_and_show("{name}", PLOTS, size=SIZE, units=units_for(SOURCE, "{unit}", globals()))'''

MEASURED = HERE / "measured.json"  # the numbers the lessons quote (course/make_plots.py --record)
QUOTE = re.compile(r"\{\{\s*(?P<demo>[a-z][a-z0-9_]*)\.(?P<key>[a-z0-9_]+)\s*\}\}")
# nbclient (and so `jupyter nbconvert --execute`) goes on past a cell with this tag, the error shown in it.
RAISES = "raises-exception"
# A public test cell's call, as the engine writes it: public_test(unit, test id, globals()).
PUBLIC_TEST = re.compile(r"^(?P<call>public_test\((?P<unit>'[a-z_0-9]+'), '[^'\n]+', )globals\(\)\)$", re.M)


@functools.cache
def measured() -> dict[str, dict[str, str]]:
    """Demo -> key -> the number as the lessons quote it (``measured.json``'s ``quotes``)."""
    return json.loads(MEASURED.read_text(encoding="utf-8"))["quotes"]


def quote(demo: str, key: str) -> str:
    """The number ``{{ demo.key }}`` stands for; ValueError naming what the record holds."""
    numbers = measured()
    if demo not in numbers:
        raise ValueError(f"{{{{ {demo}.{key} }}}}: no demo {demo!r} in {MEASURED.name}; it has {', '.join(numbers)}")
    if key not in numbers[demo]:
        raise ValueError(f"{{{{ {demo}.{key} }}}}: {MEASURED.name} has no {key!r} for {demo}; "
                         f"it has {', '.join(numbers[demo])} (course/make_plots.py --record)")
    return numbers[demo][key]


def fill(text: str) -> str:
    """``text`` with every ``{{ demo.key }}`` replaced by the number it quotes."""
    return QUOTE.sub(lambda m: quote(m["demo"], m["key"]), text)


@functools.cache
def lesson_course() -> Course:
    """The course these lessons belong to: the manifest of the tree they sit in."""
    return load_course(ROOT)


def _solutions_here() -> bool:
    """The instructor's tree, which renders the lessons from solutions/; a student's bundle has none."""
    return lesson_course().solutions.is_dir()


def languages() -> list[str]:
    """The languages the lessons can be had in here: in the instructor's tree, every folder of
    lesson text; in a student's bundle, those whose notebooks the release wrote (every unit's)."""
    from autograder.authoring.lesson import languages as written

    course = lesson_course()
    if _solutions_here():
        return written(course)
    return [lang for lang in written(course) if all((HERE / lang / f"{unit}.ipynb").is_file() for unit in course.units)]


def default_language() -> str:
    """course.toml's ``language`` (a bundle's is one it holds), else the first language here."""
    here, wanted = languages(), lesson_course().language
    return wanted if wanted in here or not here else here[0]


def check_language(lang: str | None) -> str:
    """``lang`` (default: :func:`default_language`), or ValueError in one line saying which languages are here."""
    lang = lang or default_language()
    here = languages()
    if lang not in here:
        where = "this course" if _solutions_here() else "this bundle"
        raise ValueError(f"no lessons in {lang!r} in {where}; "
                         + (f"they are in {', '.join(here)} (--lang {here[0]})" if here else "it holds none"))
    return lang


def lesson_path(unit: str, lang: str | None = None) -> Path:
    units = lesson_course().units
    if unit not in units:
        raise ValueError(f"no unit {unit!r}; the units are {', '.join(units)}")
    return HERE / (lang or default_language()) / f"{unit}.md"


def parse(text: str) -> list[tuple[str, str]]:
    """Split a lesson into ("markdown", text) and (placeholder kind, argument) parts, the numbers
    the text quotes filled in (:func:`fill`)."""
    parts, prose = [], []
    for line in text.splitlines():
        match = PLACEHOLDER.match(line.strip())
        if match:
            if "".join(prose).strip():
                parts.append(("markdown", fill("\n".join(prose).strip("\n"))))
            prose = []
            parts.append((match["kind"], match["arg"] or ""))
        else:
            prose.append(line)
    if "".join(prose).strip():
        parts.append(("markdown", fill("\n".join(prose).strip("\n"))))
    return parts


def notebook(unit: str, lang: str | None = None):
    """The lesson as a notebook, rendered by the engine (the nbgrader notebooks' renderer): in the
    instructor's tree from solutions/, answers filled in; in a student's bundle, which has no
    solutions, the student notebook the release wrote beside the lesson. ``lang`` defaults to
    :func:`default_language`; one not here is a ValueError naming those that are."""
    import nbformat

    course = lesson_course()
    lesson_path(unit)  # an unknown unit is refused by name
    lang = check_language(lang)
    if _solutions_here():
        from autograder.authoring.notebook import build_notebook

        nb = build_notebook(course, unit, lang=lang)
    else:
        nb = nbformat.read(str(HERE / lang / f"{unit}.ipynb"), as_version=4)
    return _runs_through(nb)


def _runs_through(nb):
    """The lesson as students run it. Each public test cell tests the code the setup cell's SOURCE
    picks, as the demos do (by default the answer cells once filled in, else the student's file
    in assignments/), and is tagged :data:`RAISES`, so that running the whole notebook
    (``jupyter nbconvert --execute``, JupyterLab's Run All) shows a failing or unanswered test in
    its cell and goes on to the demos. Grading never reads a lesson: nbgrader's notebooks
    (``attn-course build``, ``release``) keep their cells as the engine writes them."""
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        tags = cell.metadata.setdefault("tags", [])
        if RAISES not in tags:
            tags.append(RAISES)
        cell.source = PUBLIC_TEST.sub(
            lambda m: f"from course.demos import code_for\n{m['call']}code_for(SOURCE, {m['unit']}, globals()))",
            cell.source)
    return nb


def render(unit: str, lang: str | None = None) -> str:
    """The lesson as a jupytext percent-format script."""
    import jupytext

    return jupytext.writes(notebook(unit, lang), fmt="py:percent")


def write_all(out_dir: Path, lang: str | None = None) -> list[Path]:
    """Write every lesson as ``<unit>.ipynb`` and ``<unit>.py`` (jupytext percent)."""
    import nbformat

    lang = check_language(lang)  # before anything is written
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for unit in lesson_course().units:
        nb = notebook(unit, lang)
        nbformat.write(nb, str(out_dir / f"{unit}.ipynb"))
        (out_dir / f"{unit}.py").write_text(render(unit, lang), encoding="utf-8")
        written += [out_dir / f"{unit}.ipynb", out_dir / f"{unit}.py"]
    return written
