"""What a student reads when a test fails: the reason, then hypothesis's counterexample."""
from __future__ import annotations

import re

import pytest

from autograder.core.loader import safe_str
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


def failure_message(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return failure_message(error.exceptions[0])
    if isinstance(error, StudentError):
        text = error.describe()
    elif isinstance(error, AssertionError):
        text = safe_str(error, 600) or "the property does not hold"
    elif isinstance(error, pytest.fail.Exception):
        text = error.msg
    else:
        text = f"{type(error).__name__}: {safe_str(error)}"
    example = _counterexample(error)
    return f"{text} (counterexample: {example})" if example else text
