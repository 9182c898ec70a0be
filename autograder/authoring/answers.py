"""A lesson notebook's answer cells, written into the unit file they make up (``check --path
NOTEBOOK``): one place to write code, two ways to write it.

What is checked, graded and handed in is the unit file (``assignments/<unit>.py``). A notebook
built by :mod:`autograder.authoring.notebook` holds the same file as cells: its *answer* cells
(nbgrader solution cells, ``grade_id`` ``<unit>-<name>``: one per top-level ``def``/``class``
holding a solution region) and read-only frame cells. The file a notebook makes up is the unit
file with each definition whose answer cell is filled in replaced by that cell (its helpers and
imports included, where the definition was); a cell still as released (``# YOUR CODE HERE`` then
``raise NotImplementedError()``) leaves the file's definition as it is, so code written in both
places keeps each part from where it was written. The frame (the module docstring, imports,
constants, sibling imports) is always the file's: a student cannot change it in a notebook, and
the notebook's cells write sibling imports differently (:mod:`autograder.authoring.cells`).

The nbgrader pipeline rebuilds a handed-in notebook the trusted way instead
(:func:`autograder.nbgrader.extract.module_source`, from the instructor's source notebook); this
module serves the student, who has the released file and not that source.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from autograder.core.errors import UsageError
from autograder.core.i18n import _
from autograder.core.manifest import Course

# What nbgrader's release leaves in a solution region (autograder.authoring.stubgen.clear_regions).
STILL_RELEASED = re.compile(r"#\s*YOUR CODE HERE\s*\n\s*raise NotImplementedError\(\)")
SUFFIX = ".ipynb"


@dataclass
class Written:
    unit: str
    notebook: Path
    text: str  # the unit file the notebook makes up
    from_notebook: list[str]  # the definitions its filled-in answer cells gave
    kept: list[str]  # the definitions whose answer cell is still as released: the file's


def notebook_unit(course: Course, path: Path, data: dict) -> str | None:
    """The unit a notebook is of: its metadata's (the course's key), else its file name's."""
    meta = (data.get("metadata") or {}).get(course.brand.metadata_key) or {}
    unit = meta.get("unit") if isinstance(meta, dict) else None
    if isinstance(unit, str) and unit in course.units:
        return unit
    return path.stem if path.stem in course.units else None


def read(path: Path) -> dict:
    """A notebook as JSON; ValueError in one line for what is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UsageError(_("{path} is not a notebook that can be read: {problem}").format(path=path, problem=error)) \
            from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise UsageError(_("{path} is not a notebook (no cells)").format(path=path))
    return data


def answer_cells(data: dict) -> dict[str, str]:
    """grade_id -> source of each answer (nbgrader solution) code cell, the first of each id."""
    found: dict[str, str] = {}
    for cell in data["cells"]:
        if not isinstance(cell, dict):
            continue
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        gid = meta.get("grade_id")
        if cell.get("cell_type") == "code" and meta.get("solution") and isinstance(gid, str) and gid not in found:
            source = cell.get("source", "")
            found[gid] = "".join(source) if isinstance(source, list) else str(source)
    return found


def write_into(unit_file: str, answers: dict[str, str], unit: str) -> tuple[str, list[str], list[str]]:
    """(``unit_file`` with each definition a filled-in answer cell gives replaced by it, the names
    replaced, the names left as the file has them). ValueError when the file does not parse."""
    from autograder.authoring.notebook import grade_id  # nbformat's import: only when a notebook is checked

    try:
        tree = ast.parse(unit_file)
    except SyntaxError as error:
        raise UsageError(_("the unit file the answer cells go into does not parse: {problem}").format(
            problem=error)) from None
    lines = unit_file.splitlines()
    replaced, kept, spans = [], [], []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        cell = answers.get(grade_id(unit, node.name))
        if cell is None:
            continue
        if STILL_RELEASED.search(cell) or not cell.strip():
            kept.append(node.name)
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        spans.append((start, node.end_lineno or node.lineno, cell.strip("\n").splitlines()))
        replaced.append(node.name)
    for start, end, cell_lines in reversed(spans):
        lines[start:end] = cell_lines
    return "\n".join(lines) + "\n", replaced, kept


def notebooks_in(course: Course, path: Path) -> dict[str, Path]:
    """unit -> its notebook at ``path``: the notebook itself, or the ``<unit>.ipynb`` of a folder
    (empty for a folder without one: a folder of unit files)."""
    if path.is_file():
        if path.suffix != SUFFIX:
            raise UsageError(_("{path} is neither a folder nor a notebook (.ipynb)").format(path=path))
        unit = notebook_unit(course, path, read(path))
        if unit is None:
            raise UsageError(_("{path} is not the notebook of a unit; the units are {units}").format(
                path=path, units=", ".join(course.units)))
        return {unit: path}
    return {u.name: path / f"{u.name}{SUFFIX}" for u in course.units.values() if (path / f"{u.name}{SUFFIX}").is_file()}


def written(course: Course, notebooks: dict[str, Path], frames: Path) -> list[Written]:
    """The unit file each notebook makes up, written into the unit file of ``frames`` (the course's
    assignments folder: the released file, or the student's own)."""
    out = []
    for unit, path in notebooks.items():
        spec = course.units[unit]
        frame = frames / spec.file
        if not frame.is_file():
            raise UsageError(_("{file} is not in {folder}: the answer cells of {path} are written into it").format(
                file=spec.file, folder=frames, path=path))
        text, replaced, kept = write_into(frame.read_text(encoding="utf-8"), answer_cells(read(path)), unit)
        out.append(Written(unit, path, text, replaced, kept))
    return out
