"""Reading hints: the ones a graded result shows, and the ones a suite's source writes (shared by
test_hints.py and test_classic_mistakes.py)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

# A hint runs from "Hint: " to the counterexample the grader appends, the reproduce lines after it
# (on a line of their own), or the end.
HINT = re.compile(r"Hint: (.+?)(?= \(counterexample:|\n|\Z)", re.S)


def fired(result: dict) -> dict[str, set[str]]:
    """Every hint in a unit's failed tests: hint text -> the tests it fired in."""
    found: dict[str, set[str]] = {}
    for test in result["tests"]:
        if test["status"] == "failed":
            for text in HINT.findall(test["output"] or ""):
                found.setdefault(text.strip(), set()).add(test["id"].split("::")[-1])
    return found


def written_hints(path: Path) -> dict[str, re.Pattern]:
    """The advice texts of ``path``: the text of every (wrong answer, advice) pair, a literal, an
    f-string (its holes match anything) or a module constant, that reads as a sentence (four words
    or more: a pair of names is not advice). Text -> the pattern a fired hint matches."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}
    found = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Tuple) and len(node.elts) == 2):
            continue
        text = node.elts[1]
        text = constants.get(text.id, text) if isinstance(text, ast.Name) else text
        if isinstance(text, ast.BinOp):  # "..." "..." across lines is one Constant; "..." + "..." is not used
            continue
        if isinstance(text, ast.Constant) and isinstance(text.value, str):
            parts = [text.value]
        elif isinstance(text, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else None for v in text.values]
        else:
            continue
        shown = "…".join(p for p in parts if p is not None)
        if len(shown.split()) >= 4:
            found[shown] = re.compile("".join(".*?" if p is None else re.escape(p) for p in parts), re.S)
    return found
