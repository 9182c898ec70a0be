"""Turn reference solutions into student stubs.

Solution regions are delimited as nbgrader delimits them::

    ### BEGIN SOLUTION
    ...reference code...
    ### END SOLUTION

Each region becomes a TODO comment and ``raise NotImplementedError``; the
signatures, docstrings and hint comments outside the regions stay as written.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from autograder.core.errors import UsageError

from autograder.core.results import NOT_IMPLEMENTED

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
_DEF = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+(\w+)")


@dataclass(frozen=True)
class Region:
    start: int  # index of the BEGIN line
    end: int  # index of the END line
    indent: str
    owner: str  # the enclosing def/class, for the TODO text


class MarkerError(UsageError):
    pass


def find_regions(lines: list[str], filename: str = "<source>") -> list[Region]:
    regions, start = [], None
    for i, line in enumerate(lines):
        marker = line.strip()
        if marker == BEGIN:
            if start is not None:
                raise MarkerError(f"{filename}:{i + 1}: {BEGIN} inside another solution region")
            start = i
        elif marker == END:
            if start is None:
                raise MarkerError(f"{filename}:{i + 1}: {END} without {BEGIN}")
            indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
            regions.append(Region(start, i, indent, _owner(lines, start, indent)))
            start = None
    if start is not None:
        raise MarkerError(f"{filename}:{start + 1}: {BEGIN} is never closed")
    return regions


def _owner(lines: list[str], start: int, indent: str) -> str:
    for line in reversed(lines[:start]):
        match = _DEF.match(line)
        if match and len(match.group(1)) < len(indent):
            return match.group(3)
    return "this part"


def solution_lines(source: str) -> list[str]:
    """The stripped code lines inside solution regions (what must never leak)."""
    lines = source.splitlines()
    return [
        lines[i].strip()
        for region in find_regions(lines)
        for i in range(region.start + 1, region.end)
        if any(c.isalnum() for c in lines[i])
    ]


def make_stub(source: str, origin: str) -> str:
    lines = source.splitlines()
    out, cursor = [], 0
    for region in find_regions(lines, origin):
        out += lines[cursor : region.start]
        out += [
            f"{region.indent}# TODO: implement {region.owner} (see its docstring).",
            f'{region.indent}raise NotImplementedError("{region.owner}: {NOT_IMPLEMENTED}")',
        ]
        cursor = region.end + 1
    out += lines[cursor:]
    header = (
        f"# Student stub: fill in every TODO. Generated from {origin} by the course's `build`;\n"
        "# instructors edit the solution, never this file.\n"
    )
    return header + "\n".join(out) + "\n"


def clear_regions(text: str) -> str:
    """A notebook answer cell's release text: what nbgrader's ClearSolutions writes for each region."""
    lines = text.splitlines()
    out, cursor = [], 0
    for region in find_regions(lines):
        out += lines[cursor:region.start] + [f"{region.indent}# YOUR CODE HERE", f"{region.indent}raise NotImplementedError()"]
        cursor = region.end + 1
    return "\n".join(out + lines[cursor:])


# The stubs package's docstring: the reference's describes the reference (students read this one).
PACKAGE_DOC = ('"""Your work: one module per unit, for you to write. Fill in every TODO; the docstrings give the\n'
               "shapes. Generated from the course's reference by its `build`: instructors edit the reference,\n"
               'never these files."""')


def package_init(source: str) -> str:
    """A package's ``__init__.py`` as a stub: its docstring is :data:`PACKAGE_DOC`, the rest is copied."""
    body = ast.parse(source).body
    first = body[0] if body else None
    lines = source.splitlines()
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines[first.lineno - 1:first.end_lineno] = PACKAGE_DOC.splitlines()
    else:
        lines[:0] = PACKAGE_DOC.splitlines()
    return "\n".join(lines) + "\n"


def expected_stubs(solutions: Path) -> dict[str, str]:
    """File name -> the stub text ``build`` writes for it (other files without regions are copied;
    the package's ``__init__.py`` gets the stubs' docstring)."""
    stubs = {}
    for source in sorted(solutions.glob("*.py")):
        text = source.read_text(encoding="utf-8")
        has_regions = bool(find_regions(text.splitlines(), source.name))
        if has_regions:
            stubs[source.name] = make_stub(text, f"{solutions.name}/{source.name}")
        else:
            stubs[source.name] = package_init(text) if source.name == "__init__.py" else text
    return stubs


def stale(solutions: Path, assignments: Path) -> list[str]:
    """Names of stubs in ``assignments`` that differ from what ``build`` would write."""
    return [
        name
        for name, stub in expected_stubs(solutions).items()
        if not (assignments / name).is_file() or (assignments / name).read_text(encoding="utf-8") != stub
    ]


def build(solutions: Path, assignments: Path) -> list[Path]:
    """Write a stub in ``assignments`` for every module in ``solutions``; returns what changed."""
    assignments.mkdir(parents=True, exist_ok=True)
    changed = [assignments / name for name in stale(solutions, assignments)]
    stubs = expected_stubs(solutions)
    for target in changed:
        target.write_text(stubs[target.name], encoding="utf-8")
    return changed
