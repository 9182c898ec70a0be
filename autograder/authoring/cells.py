"""A solution module, split into notebook cells at its top-level statements.

A ``def``/``class`` holding a ``### BEGIN SOLUTION`` region becomes an
*answer* chunk; everything else a read-only *frame*. A sibling import
(``from .attention import ...``) becomes a call of
:func:`autograder.nbgrader.kernel_side.sibling`: the course's trusted stand-in
where the course has it, else the student's own file in its assignments folder.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import cast

from autograder.authoring import stubgen

KERNEL_SIDE = "autograder.nbgrader.kernel_side"  # what a notebook's sibling import calls (a layer above: named only)


@dataclass
class Chunk:
    kind: str  # "frame" (read-only) | "answer" (nbgrader solution cell)
    name: str  # grade_id suffix: the def/class name, or "partN"
    file_text: str  # what the .py file holds
    cell_text: str  # what the notebook shows (differs for sibling imports)


def _strip_blank(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _sibling_import(node: ast.ImportFrom, unit: str, indent: str = "") -> list[str]:
    original = ast.unparse(node)
    lines = [f"{indent}# The .py file says `{original}`.",
             f"{indent}# Here that unit comes from the course: its trusted stand-in where the course has one (the",
             f"{indent}# instructor's and the grader's copies), else your own file in the course's assignments folder."]
    if node.module:  # from .attention import a, b as c
        lines.append(f"{indent}from {KERNEL_SIDE} import sibling")
        for alias in node.names:
            lines.append(f"{indent}{alias.asname or alias.name} = sibling({unit!r}, {node.module!r}).{alias.name}")
    else:  # from . import attention
        lines.append(f"{indent}from {KERNEL_SIDE} import sibling")
        for alias in node.names:
            lines.append(f"{indent}{alias.asname or alias.name} = sibling({unit!r}, {alias.name!r})")
    return lines


def split_module(source: str, unit: str, filename: str = "<source>") -> tuple[str, str, list[Chunk]]:
    """(module docstring, its source text, chunks): one chunk per top-level
    def/class, one per run of other statements; the text between two
    statements goes with the later."""
    tree = ast.parse(source, filename)
    lines = source.splitlines()
    regions = stubgen.find_regions(lines, filename)
    body = list(tree.body)
    docstring = docstring_source = ""
    cursor = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(cast(ast.Constant, body[0].value).value, str):
        docstring = cast(str, cast(ast.Constant, body[0].value).value)  # the string checked above
        cursor = cast(int, body[0].end_lineno)  # set on every node ast.parse makes
        docstring_source = "\n".join(lines[:cursor])
        body = body[1:]

    groups: list[list[ast.stmt]] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not groups \
                or isinstance(groups[-1][-1], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            groups.append([node])
        else:
            groups.append(groups.pop() + [node])

    chunks, names = [], set()
    for number, group in enumerate(groups):
        end = cast(int, group[-1].end_lineno)
        for r in regions:  # a trailing `### END SOLUTION` comment is past the def's last statement
            if cursor <= r.start < end <= r.end:
                end = r.end + 1
        span = range(cursor, end)
        file_lines = _strip_blank(lines[cursor:end])
        cell_lines = []
        imports = {n.lineno - 1: n for n in group if isinstance(n, ast.ImportFrom) and n.level > 0}
        skip_to = -1
        for i in range(cursor, end):
            if i < skip_to:
                continue
            if i in imports:
                node = imports[i]
                if node.level != 1:
                    raise stubgen.MarkerError(f"{filename}:{i + 1}: only `from .sibling import ...` is supported")
                cell_lines += _sibling_import(node, unit)
                skip_to = cast(int, node.end_lineno)
            else:
                cell_lines.append(lines[i])
        cell_lines = _strip_blank(cell_lines)
        has_region = any(r.start in span for r in regions)
        if any((r.start in span) != (r.end in span) for r in regions):
            raise stubgen.MarkerError(f"{filename}: a solution region crosses top-level statements near line {end}")
        node = group[0]
        name = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else f"part{number + 1}"
        if name in names:
            name = f"{name}{number + 1}"
        names.add(name)
        chunks.append(Chunk("answer" if has_region else "frame", name, "\n".join(file_lines), "\n".join(cell_lines)))
        cursor = end
    if cursor < len(lines) and "".join(lines[cursor:]).strip():
        chunks.append(Chunk("frame", "tail", "\n".join(_strip_blank(lines[cursor:])), "\n".join(_strip_blank(lines[cursor:]))))
    return docstring, docstring_source, chunks
