"""One error tree (autograder/core/errors.py): every exception class the engine defines is an
``AutograderError`` carrying its exit code, but the two a student must not catch; and the
command line maps the tree, so an internal ``ValueError`` is reported as the grader's failure,
never as the user's bad arguments. And what a student reads of an error: a stub's
NotImplementedError apart from torch's, a long failure cut so that its hint stays."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from autograder import cli
from autograder.core.errors import AutograderError, GraderError, UsageError

ROOT = Path(__file__).resolve().parents[2]
# BaseException on purpose: a submission's `except Exception` must not swallow them.
OUTSIDE = {"autograder.trust.enforce.Forbidden", "autograder.trust.subject.CallTimeout"}


def exception_classes() -> list[str]:
    """``module.Class`` of every class in the engine whose bases name an exception, private ones left out."""
    found = []
    for path in sorted((ROOT / "autograder").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    (getattr(b, "id", None) or getattr(b, "attr", "")).endswith(("Error", "Exception", "Interrupted"))
                    for b in node.bases):
                found.append(f"{module}.{node.name}")
    return found


def test_every_engine_exception_is_in_the_tree():
    outside = []
    for name in exception_classes():
        module, cls = name.rsplit(".", 1)
        kind = getattr(importlib.import_module(module), cls)
        if not issubclass(kind, AutograderError) and name not in OUTSIDE:
            outside.append(name)
    assert not outside, f"exceptions outside autograder.core.errors' tree: {outside}"
    assert len(exception_classes()) >= 15  # the walk finds them (it would pass on none)
    for name in OUTSIDE:
        module, cls = name.rsplit(".", 1)
        kind = getattr(importlib.import_module(module), cls)
        assert issubclass(kind, BaseException) and not issubclass(kind, Exception), name


@pytest.mark.parametrize("raised, code, said", [
    (UsageError("no unit 'x'"), 2, "no unit 'x'"),
    (GraderError("the sandbox could not start"), 3, "grader failure: the sandbox could not start"),
    (FileExistsError("out exists"), 2, "out exists"),
    (ValueError("an internal slip"), 3, "grader failure: an internal error"),
    (KeyError("k"), 3, "grader failure: an internal error"),
])
def test_the_command_line_exits_by_the_tree(monkeypatch, capsys, raised, code, said):
    def command(course, args):
        raise raised

    monkeypatch.setitem(cli.COMMANDS, "build", command)
    assert cli._main(["build"]) == code
    err = capsys.readouterr().err
    assert said in err, err
    assert ("Traceback" in err) == (code == 3 and not isinstance(raised, AutograderError)), err


def test_only_a_stubs_not_implemented_reads_as_unfinished():
    """A stub's ``raise NotImplementedError`` reads "not implemented yet"; torch's own (an operator
    missing for a dtype) is shown as raised, with its message, so it does not read as an unfinished stub."""
    from autograder.core.protocol import StudentError

    assert StudentError("NotImplementedError", "softmax: not implemented yet").describe() == "not implemented yet"
    assert StudentError("NotImplementedError", "").describe() == "not implemented yet"
    torch_said = "\"bitwise_and_cpu\" not implemented for 'Float'"
    assert StudentError("NotImplementedError", torch_said).describe() == \
        f"your code raised NotImplementedError: {torch_said}"


def test_a_long_failure_keeps_its_hint():
    from autograder.grading.messages import failure_message

    message = failure_message(AssertionError("output of shape (2, 3): " + "x" * 2000 + ". Hint: divide by sqrt(d_k)."))
    assert len(message) <= 600 and message.startswith("output of shape (2, 3): ") \
        and message.endswith(". Hint: divide by sqrt(d_k)."), message
