"""From a submitted notebook back to the unit's file (trusted side).

The read-only parts come from the instructor's source notebook (its cell
metadata), the answers from the submitted notebook by nbgrader ``grade_id``,
so the file graded never depends on anything a student can change but their
own answer cells. Only code cells are read: a written answer (a markdown cell,
nbgrader's manually graded answer) is never part of the file, whatever its
metadata claims.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

from autograder.authoring import stubgen


def answers(submitted: dict) -> dict[str, str]:
    """grade_id -> source of each nbgrader solution code cell (first one wins)."""
    found: dict[str, str] = {}
    for cell in submitted.get("cells", []):
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        gid = meta.get("grade_id")
        if cell.get("cell_type") == "code" and isinstance(gid, str) and gid not in found:
            source = cell.get("source", "")
            found[gid] = "".join(source) if isinstance(source, list) else str(source)
    return found


def _definition(source: str, name: str) -> str | None:
    """From an ordinary cell: its imports and its top-level definition of ``name``, if any."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name]
    if not defs:
        return None
    lines = source.splitlines()
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) or n is defs[-1]]
    segments = []
    for node in keep:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        segments.append("\n".join(lines[start:node.end_lineno]))
    return "\n".join(segments)


def _moved_answers(submitted: dict) -> list[str]:
    """Sources of the code cells without nbgrader metadata, in order."""
    return [
        "".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
        for c in submitted.get("cells", [])
        if c.get("cell_type") == "code" and not (c.get("metadata") or {}).get("nbgrader")
    ]


def module_source(layout: dict, submitted: dict | None, key: str) -> str:
    """The unit's ``.py`` file: the instructor's read-only parts (from ``layout``,
    the source notebook, whose cell metadata ``key`` holds them) around the student's answer cells (from ``submitted``,
    matched by grade_id).

    An answer cell that is gone (deleted, or its nbgrader metadata lost when
    the student rewrote it in a new cell) is looked for as the last ordinary
    cell that defines the same name, as the kernel would have run it (its
    imports and that definition only); failing that, it counts as the
    untouched stub.
    """
    given = answers(submitted or {})
    ordinary = _moved_answers(submitted or {})
    parts = []
    for cell in layout["cells"]:
        part = (cell.get("metadata") or {}).get(key) or {}
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if part.get("part") == "frame":
            parts.append(part.get("file", source))
        elif part.get("part") == "answer":
            gid = cell["metadata"]["nbgrader"]["grade_id"]
            if gid in given:
                parts.append(given[gid])
                continue
            moved = [d for d in (_definition(text, part.get("defines", "")) for text in ordinary) if d]
            parts.append(moved[-1] if moved else stubgen.clear_regions(source))
    return "\n\n\n".join(p.strip("\n") for p in parts) + "\n"


def read_notebook(path: Path) -> dict | None:
    """A notebook as plain JSON, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("cells"), list) else None
