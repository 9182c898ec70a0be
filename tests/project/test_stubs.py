"""One source per fact: the stubs are generated from solutions/, current, and leak nothing."""
from __future__ import annotations

import ast

import pytest

from autograder.authoring import stubgen
from conftest import ROOT

SOLUTIONS = ROOT / "solutions"
ASSIGNMENTS = ROOT / "assignments"
UNIT_FILES = sorted(p.name for p in SOLUTIONS.glob("*.py") if p.name != "__init__.py")


def test_committed_stubs_are_current():
    assert stubgen.stale(SOLUTIONS, ASSIGNMENTS) == [], "run `attn-course build` and commit assignments/"


@pytest.mark.parametrize("name", UNIT_FILES)
def test_no_solution_line_survives_in_the_stub(name):
    secret = set(stubgen.solution_lines((SOLUTIONS / name).read_text(encoding="utf-8")))
    assert secret, f"{name} has no solution region"
    stub = {line.strip() for line in (ASSIGNMENTS / name).read_text(encoding="utf-8").splitlines()}
    leaked = sorted(secret & stub)
    assert not leaked, f"solution lines found in assignments/{name}: {leaked}"


@pytest.mark.parametrize("name", UNIT_FILES)
def test_stub_keeps_every_signature_and_docstring(name):
    def api(path):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        return {
            node.name: (ast.unparse(node.args) if hasattr(node, "args") else "", ast.get_docstring(node))
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
        }

    assert api(ASSIGNMENTS / name) == api(SOLUTIONS / name)


def test_stub_region_becomes_todo_and_raise():
    source = 'def f(x):\n    """Doc."""\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n'
    stub = stubgen.make_stub(source, "solutions/f.py")
    assert "return x + 1" not in stub
    assert "    # TODO: implement f (see its docstring).\n    raise NotImplementedError" in stub
    namespace = {}
    exec(compile(stub, "stub", "exec"), namespace)
    with pytest.raises(NotImplementedError):
        namespace["f"](1)


@pytest.mark.parametrize(
    "source, error",
    [
        ("### BEGIN SOLUTION\nx = 1\n", "never closed"),
        ("x = 1\n### END SOLUTION\n", "without"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside another"),
    ],
)
def test_unbalanced_markers_are_reported(source, error):
    with pytest.raises(stubgen.MarkerError, match=error):
        stubgen.make_stub(source, "bad.py")


def test_build_rewrites_only_stale_stubs(tmp_path):
    solutions, assignments = tmp_path / "solutions", tmp_path / "assignments"
    solutions.mkdir()
    (solutions / "u.py").write_text("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n")
    assert stubgen.build(solutions, assignments) == [assignments / "u.py"]
    assert stubgen.build(solutions, assignments) == []
    (assignments / "u.py").write_text("edited by hand\n")
    assert stubgen.stale(solutions, assignments) == ["u.py"]
