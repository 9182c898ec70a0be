"""The nbgrader source notebooks, generated from ``solutions/`` and the lesson text.

``<source>/<unit>/<unit>.ipynb`` (course.toml ``[paths] nbgrader_source``) is
never edited by hand. It is built here, cell by cell, with nbformat: the lesson
(:mod:`autograder.authoring.lesson`); the module in cells
(:mod:`autograder.authoring.cells`), an answer chunk becoming an nbgrader
*answer* cell (nbgrader's ClearSolutions turns each region into
``raise NotImplementedError()`` in the release) and the rest read-only cells;
one visible test cell per public test and one hidden-test cell holding all
hidden properties, with the points of the CLI's rubric; and after each of the
lesson's conceptual questions (a paragraph opening with ``**Question N.**``, the
word as the language's ``notebook.toml`` writes it: ``question``) an nbgrader
*manually graded answer* cell (markdown, ``grade`` and ``solution``), worth
:data:`QUESTION_POINTS`.

A question is worth 1 point: the written answers add a little to the
autograded total, which stays the CLI's. nbgrader's gradebook and CSV count
them (an instructor grades them in formgrader); the CLI does not know them.

Every generated cell carries ``metadata[META]`` (its part, and for read-only
module cells the text the ``.py`` file holds). The trusted grader reads that
metadata from the *instructor's* source notebook only
(:mod:`autograder.nbgrader.extract`).
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import nbformat

from autograder.core.errors import UsageError
from autograder.authoring.contract import translation, unit_section
from autograder.authoring.cells import KERNEL_SIDE, Chunk, split_module
from autograder.authoring import stubgen
from autograder.authoring.lesson import lesson_parts
from autograder.authoring.rubric import rubric
from autograder.core.manifest import Course

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
# A question is one paragraph of a lesson, opening with "**<word> N.**", the word as the lesson's language
# writes it (TEXT["question"]; tests/project/test_lesson_languages.py).


def question_pattern(word: str = "Question") -> re.Pattern:
    """A question paragraph of a lesson whose language calls a question ``word``; group 1 its number."""
    return re.compile(rf"^\*\*{re.escape(word)} (\d+)\.\*\*.*?(?=\n[ \t]*\n|\Z)", re.M | re.S)


QUESTION = question_pattern()
QUESTION_POINTS = 1.0
ANSWER_STUB = "YOUR ANSWER HERE"  # nbgrader's ClearSolutions.text_stub: its release writes this in a written answer


def grade_id(unit: str, part: str) -> str:
    return f"{unit}-{part}".replace("_", "-").replace("::", "-").replace(".", "-")


def _nbgrader(gid: str, *, grade: bool, solution: bool, locked: bool, points: float | None = None) -> dict:
    meta = {"grade": grade, "grade_id": gid, "locked": locked, "schema_version": 3, "solution": solution}
    if points is not None:
        meta["points"] = points
    return meta


def _code(cell_id: str, text: str, nbgrader: dict | None, part: dict, key: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(text)
    cell.id = cell_id
    cell.metadata = {key: part}
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
        if nbgrader["locked"]:
            cell.metadata.update(deletable=False, editable=False)
    return cell


def _markdown(cell_id: str, text: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(text)
    cell.id = cell_id
    return cell


def _question_cells(unit: str, text: str, question: re.Pattern = QUESTION) -> list:
    """A markdown part of the lesson, each question in a cell of its own followed by its
    manually graded answer cell; the text around them unchanged."""
    cells, cursor = [], 0
    for match in question.finditer(text):
        before = text[cursor:match.start()].strip("\n")
        if before.strip():
            cells.append(_markdown("", before))
        cells.append(_markdown("", match[0]))
        answer = _markdown("", ANSWER_STUB)
        meta = _nbgrader(grade_id(unit, f"question-{match[1]}"), grade=True, solution=True, locked=False,
                         points=QUESTION_POINTS)
        answer.metadata = {"nbgrader": {**meta, "task": False}}
        cells.append(answer)
        cursor = match.end()
    rest = text[cursor:].strip("\n")
    if rest.strip():
        cells.append(_markdown("", rest))
    return cells


def _points(x: float) -> str:
    return f"{x:g} point" + ("" if x == 1 else "s")


def _exercise_cells(course: Course, unit: str, docstring_file: str, chunks: list[Chunk], text: dict,
                    questions: bool, lang: str | None) -> list:
    spec, key = course.units[unit], course.brand.metadata_key
    names = {"file": spec.file, "api": translation(course.api, lang).name, "command": course.brand.command, "unit": unit,
             "points": f"{QUESTION_POINTS:g}"}
    graded = text["graded"] + (" " + text["questions"] if questions else "")
    cells = [_markdown("", graded.format(**names)),
             _markdown("", text["contract"].format(**names) + "\n\n" + unit_section(course, unit, lang).replace("## ", "#### ", 1))]
    first_frame = True
    for chunk in chunks:
        if chunk.kind == "answer":
            gid = grade_id(unit, chunk.name)
            cells.append(_code(gid, chunk.cell_text, _nbgrader(gid, grade=False, solution=True, locked=False),
                               {"part": "answer", "defines": chunk.name}, key))
        else:
            gid = grade_id(unit, f"code-{chunk.name}")
            file_text = chunk.file_text
            if first_frame and docstring_file:
                file_text = docstring_file + "\n\n" + file_text
                first_frame = False
            part = {"part": "frame"}
            if file_text != chunk.cell_text:
                part["file"] = file_text
            cells.append(_code(gid, chunk.cell_text, _nbgrader(gid, grade=False, solution=False, locked=True), part, key))
    return cells


def _test_cells(course: Course, unit: str, text: Any) -> list:  # text: notebook_text(), then a cell's source
    tests, key = rubric(course, unit), course.brand.metadata_key
    visible = [t for t in tests if t.visibility == "visible"]
    hidden = [t for t in tests if t.visibility == "hidden"]
    cells = []
    if visible:
        cells.append(_markdown("", text["tests"].format(command=course.brand.command, unit=unit)))
    for test in visible:
        gid = grade_id(unit, f"public-{test.test_id.split('::')[1]}")
        text = (f"# {_points(test.points)}: {test.name}\n"
                f"from {KERNEL_SIDE} import public_test\n"
                f"public_test({unit!r}, {test.test_id!r}, globals())")
        cells.append(_code(gid, text, _nbgrader(gid, grade=True, solution=False, locked=True, points=test.points),
                           {"part": "test", "tests": [test.test_id]}, key))
    if hidden:
        gid = grade_id(unit, "hidden")
        total = sum(t.points for t in hidden)
        text = (f"# {_points(total)}: the {len(hidden)} hidden properties of this unit, graded by the course's\n"
                "# grader outside this notebook; your feedback lists each property that failed.\n"
                f"{HIDDEN_BEGIN}\n"
                f"from {KERNEL_SIDE} import hidden_tests\n"
                f"hidden_tests({unit!r})\n"
                f"{HIDDEN_END}")
        cells.append(_code(gid, text, _nbgrader(gid, grade=True, solution=False, locked=True, points=total),
                           {"part": "test", "tests": [t.test_id for t in hidden]}, key))
    return cells


def build_notebook(course: Course, unit: str, *, lang: str | None = None, student: bool = False) -> nbformat.NotebookNode:
    """The notebook of ``unit`` in ``lang`` (default: the course's language): the nbgrader source (answers filled in), or with
    ``student`` what a student gets, as nbgrader's release makes it (each solution region
    cleared, the hidden tests' region removed). The lessons render through here too."""
    spec = course.units[unit]
    path = course.solutions / spec.file
    docstring, docstring_file, chunks = split_module(path.read_text(encoding="utf-8"), unit, f"{course.solutions.name}/{spec.file}")
    cells = []
    parts = lesson_parts(course, unit, docstring, lang)
    question = question_pattern(notebook_text(course, lang)["question"])
    questions = any(question.search(text) for kind, text in parts if kind == "markdown")
    text: str | dict[str, str]  # a part's text, then notebook_text() for the exercise
    for kind, text in parts:
        if kind == "markdown":
            cells += _question_cells(unit, text, question)
        elif kind == "exercise":
            text = notebook_text(course, lang)
            cells += (_exercise_cells(course, unit, docstring_file, chunks, text, questions, lang)
                      + _test_cells(course, unit, text))
        else:  # setup and demos: ordinary cells for students; the grader's kernel skips them
            cell = nbformat.v4.new_code_cell(text)
            tag = course.brand.demo_tag
            cell.metadata = {"tags": ["parameters", tag] if kind == "setup" else [tag]}
            cells.append(cell)
    if student:
        for cell in cells:
            _release(cell)
            cell.metadata.pop(course.brand.metadata_key, None)  # the grader reads it from the source notebook only
    for number, cell in enumerate(cells):  # deterministic ids (nbformat's are random), at most 64 characters
        cell.id = f"{unit.replace('_', '-')}-{number:02d}"
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.nbformat_minor = 5
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"},
                   course.brand.metadata_key: {"unit": unit, "file": spec.file}}
    return nb


# The notebook's own words around the lesson, in English; a lessons folder translates them in
# <lessons>/<lang>/notebook.toml (same keys, same {placeholders}). Code cells never change.
TEXT = {
    # One place to write code (docs/decisions.md, "Where code goes"): the unit file, which these cells make up.
    "graded": ("**How this notebook is graded.** Fill in every cell that says `YOUR CODE HERE`; the docstrings "
               "give the shape of every input and output. These answer cells make up the file `{file}` (read-only "
               "cells are restored before grading), and that file is what is graded: handed in as this notebook, "
               "from these cells; handed in as `assignments/{file}`, from that file, into which `{command} check "
               "--path {unit}.ipynb --save` writes these cells (`{command} check --path {unit}.ipynb` checks them "
               "first). Put any helper or extra import inside an answer cell."),
    "contract": ("### The contract of this unit\n\nFrom `{api}` (its general rules, on shapes, devices, precision, "
                 "errors and forbidden constructs, hold for every unit):"),
    "questions": ("The questions at the end of the lesson are graded by hand ({points} per question, besides "
                  "the tests' points): write each answer in the cell below its question, where it says "
                  "`YOUR ANSWER HERE` (Markdown). `{command} grade` does not see them."),
    "tests": ("## Tests\n\nEach cell below runs one public test on the code above (the same test as "
              "`{command} check {unit}`). The points shown are what the grader gives."),
    "question": "Question",  # the word that opens a question's paragraph: **Question 1.**
}


def notebook_text(course: Course, lang: str | None) -> dict[str, str]:
    """:data:`TEXT`, with what ``<lessons>/<lang>/notebook.toml`` translates."""
    path = course.lessons / (lang or course.language) / "notebook.toml"
    given = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    unknown = set(given) - set(TEXT)
    if unknown:
        raise UsageError(f"{path}: unknown keys {', '.join(sorted(unknown))}; the keys are {', '.join(TEXT)}")
    return {**TEXT, **given}


def _release(cell: nbformat.NotebookNode) -> None:
    """What nbgrader's ClearSolutions and ClearHiddenTests do to a cell."""
    meta = cell.metadata.get("nbgrader", {})
    if meta.get("solution"):
        cell.source = stubgen.clear_regions(cell.source)
    if HIDDEN_BEGIN in cell.source:
        before, rest = cell.source.split(HIDDEN_BEGIN, 1)
        cell.source = (before + rest.split(HIDDEN_END, 1)[1]).strip("\n")


def notebook_path(course: Course, unit: str) -> Path:
    """Relative to the course root: the source notebook of ``unit``."""
    return (course.nbgrader_source / unit / f"{unit}.ipynb").relative_to(course.root)


def expected_notebooks(course: Course, lang: str | None = None) -> dict[Path, str]:
    """Path (relative to the course root) -> the JSON ``build`` writes in ``lang`` (default: the
    course's language), for every unit whose solution file exists."""
    out = {}
    for unit, spec in course.units.items():
        if (course.solutions / spec.file).is_file():
            out[notebook_path(course, unit)] = nbformat.writes(build_notebook(course, unit, lang=lang), version=4) + "\n"
    return out


def stale(course: Course) -> list[str]:
    """Source notebooks that differ from what ``build`` would write (or are missing)."""
    return [
        str(rel) for rel, text in expected_notebooks(course).items()
        if not (course.root / rel).is_file() or (course.root / rel).read_text(encoding="utf-8") != text
    ]


def build(course: Course, lang: str | None = None) -> list[Path]:
    """Write every stale source notebook, in ``lang`` (default: the course's language);
    returns the paths written. The committed ones are in the course's language, which
    ``stale`` checks: a course taught in another sets it in course.toml."""
    written = []
    for rel, text in expected_notebooks(course, lang).items():
        target = course.root / rel
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written.append(target)
    return written
