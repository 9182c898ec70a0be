"""What a student reads when a test fails: the reason, hypothesis's counterexample, and the
command that rebuilds the failing call (:mod:`autograder.core.cases`)."""
from __future__ import annotations

import re
import shlex
from typing import cast

import pytest

from autograder.core import cases
from autograder.core.i18n import N_, _
from autograder.trust.source import safe_str
from autograder.core.protocol import StudentError


def _counterexample(error: BaseException) -> str:
    """The arguments of hypothesis's minimal failing example, without the test's name."""
    parts = []
    for note in getattr(error, "__notes__", ()):
        call = re.match(r"(?:Falsifying example|Failing test case): \w+\((.*)\)\s*$", note, re.S)
        draw = re.match(r"Draw \d+(?: \((\w+)\))?: (.*)$", note, re.S)
        if call:
            lines = [re.sub(r"\s+#.*$", "", line).strip() for line in call.group(1).splitlines()]
            args = [a.strip() for a in " ".join(lines).split(", ") if a.strip()]
            # The fixture and st.data() carry no information for a student.
            parts += [a.rstrip(",") for a in args if not a.startswith(("subject=", "data="))]
        elif draw:
            parts.append(f"{draw.group(1) or 'drawn'}={draw.group(2).strip()}")
    return ", ".join(p for p in parts if p)


REPRODUCE = "\nreproduce: "  # what starts a failure's reproduce command (its own last line)
_REPRODUCE = N_("reproduce: {command}")  # the same line, in the student's language


def _reproduce_marks() -> tuple[str, ...]:
    """What starts a reproduce command: in English, and in the language this process speaks."""
    return tuple(dict.fromkeys((REPRODUCE, "\n" + _(_REPRODUCE).split("{command}")[0])))


def split_reproduce(output: str) -> tuple[str, str | None]:
    """A failure's message without its reproduce command, and the command (None if it has none)."""
    for marker in _reproduce_marks():
        reason, mark, command = output.partition(marker)
        if mark:
            return reason, command.strip()
    return output, None


def _reproduce(error: BaseException, command: str) -> str:
    """The call the failure came from (the check's own, else the test's last): ``command --example
    '<case>'`` that rebuilds it, or, where its tensors are too big to print, the call by shapes.
    "" when the test made no call."""
    case = getattr(error, "case", None)
    if case is None and cases.last_call() is not None:
        case = {"call": cases.last_call(), "part": None, "expected": None, "what": "output"}
    if case is None:
        return ""
    text = cases.dumps(case["call"].unit, case)
    if text is None:
        return "\n" + _("the call: {call} (its tensors hold more than {limit} numbers, too many to rebuild from "
                        "this message)").format(call=cases.describe(case["call"]), limit=cases.MAX_ELEMENTS)
    return "\n" + _(_REPRODUCE).format(command=f"{command} --example {shlex.quote(text)}")


def _middle_cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, cut in its middle: a check's message ends with its hint,
    which a cut at the end would drop."""
    if len(text) <= limit:
        return text
    tail = limit * 2 // 5
    return text[:limit - tail - 1] + "…" + text[-tail:]


def failure_message(error: BaseException, repro: str | None = None) -> str:
    """The message for a failed test; with ``repro`` (the command and its unit and property
    arguments) it ends with that command rebuilding the failing call."""
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return failure_message(error.exceptions[0], repro)
    if isinstance(error, StudentError):
        text = error.describe()
    elif isinstance(error, AssertionError):
        text = _middle_cut(safe_str(error, 100_000), 600) or _("the property does not hold")
    elif isinstance(error, pytest.fail.Exception):
        text = cast(str, error.msg)  # pytest.fail(reason) always gives one
    else:
        text = f"{type(error).__name__}: {safe_str(error)}"
    example = _counterexample(error)
    text = _("{text} (counterexample: {example})").format(text=text, example=example) if example else text
    return text + (_reproduce(error, repro) if repro else "")
