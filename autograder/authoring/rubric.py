"""What a unit's tests are worth: read statically from the suites, with the
conventions :mod:`autograder.core.plugin` enforces (a ``unit`` marker on the
module, a ``points`` marker and a docstring on each test)."""
from __future__ import annotations

import ast
from dataclasses import dataclass

from autograder.core.manifest import Course


@dataclass(frozen=True)
class Rubric:
    test_id: str  # "<file>::<function>", as in the CLI's JSON
    name: str
    points: float
    visibility: str  # "visible" | "hidden"


def _marker_call(node: ast.AST, name: str):
    """The ``pytest.mark.<name>(...)`` call in ``node``, if it is one."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "mark"):
        return node
    return None


def rubric(course: Course, unit: str) -> list[Rubric]:
    """The graded tests of ``unit`` (public first, then hidden), read statically
    with the conventions :mod:`autograder.core.plugin` enforces."""
    found = []
    for folder, visibility in ((course.public_tests, "visible"), (course.hidden_tests, "hidden")):
        for path in sorted(folder.glob("test_*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            module_unit = None
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                    values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                    for value in values:
                        call = _marker_call(value, "unit")
                        if call and call.args and isinstance(call.args[0], ast.Constant):
                            module_unit = call.args[0].value
            if module_unit != unit:
                continue
            for node in tree.body:
                if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
                    continue
                points = [c for c in map(lambda d: _marker_call(d, "points"), node.decorator_list) if c]
                if not points:
                    continue
                doc = (ast.get_docstring(node) or "").strip()
                found.append(Rubric(f"{path.name}::{node.name}", doc.splitlines()[0].strip() if doc else node.name,
                                    float(ast.literal_eval(points[0].args[0])), visibility))
    return found
