"""The one interface between a test suite and the code under test.

A suite never imports student code. It describes what to run as a
:class:`Call` (plain data: tensors, numbers, strings and :class:`New` object
recipes) and receives a :class:`Result` (detached tensors, numbers, ``None``),
or a :class:`StudentError`. Because nothing else crosses, the same suite runs
against ``solutions/``, ``assignments/`` or any submission folder, in this
process (:class:`autograder.trust.subject.InProcessSubject`) or in a sandboxed
worker (:class:`autograder.sandbox.host.SandboxSubject`): both are a
:class:`Subject`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import torch

from autograder.core.errors import AutograderError
from autograder.core.i18n import _, translate_text
from autograder.core.results import NOT_IMPLEMENTED


@dataclass(frozen=True)
class New:
    """A recipe for an object built inside the subject.

    ``target`` is a class of the call's unit ("MultiHeadAttention") or a class
    of ``torch.nn`` ("torch.nn.RNNCell"); ``state`` is loaded with
    ``load_state_dict(strict=True)`` after construction.
    """

    target: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    state: dict | None = None


@dataclass(frozen=True)
class Call:
    """One thing to run: ``target(*args, **kwargs)`` in ``unit``.

    ``target`` is a function name, or a :class:`New` whose object is called
    (``method`` picks another method than ``__call__``). Tensors are copied to
    ``device`` first (and made non-contiguous views when ``noncontiguous``);
    a constructed object is moved with ``.to(device)`` and, if ``dtype`` is
    given, ``.to(dtype)``. With ``grad_outputs`` (nested like the output,
    ``None`` where no gradient is sent) the result carries the gradients of
    every floating-point input tensor and of every parameter of the object.
    With ``measure`` the result says how many elements the largest tensor
    storage made during the call holds (any device, ``meta`` included): what a
    memory bound is checked against.
    """

    unit: str
    target: str | New
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    method: str | None = None
    train: bool = False
    device: str = "cpu"
    dtype: torch.dtype | None = None
    seed: int | None = None
    grad_outputs: Any = None
    noncontiguous: bool = False
    return_state: bool = False
    measure: bool = False


@dataclass
class Result:
    output: Any
    arg_grads: tuple = ()  # like ``args``: a tensor's gradient, None elsewhere
    kwarg_grads: dict = field(default_factory=dict)
    param_grads: dict = field(default_factory=dict)
    state: dict | None = None  # the object's state_dict after the call
    buffers: dict | None = None  # all its buffers, persistent or not
    mutated: list[str] = field(default_factory=list)  # inputs written in place
    largest: int | None = None  # with Call.measure: elements of the largest storage an operator made


class Failure(StrEnum):
    """The grader's own kinds of :class:`StudentError` (any other kind is the name of the
    exception the student's code raised)."""

    TIMEOUT = "Timeout"  # a call, a test or a unit ran past its time
    BAD_OUTPUT = "BadOutput"  # the output cannot be used (a tensor subclass, an object, a malformed reply)
    UNAVAILABLE = "Unavailable"  # the unit did not load
    CRASHED = "Crashed"  # the sandbox lost the worker
    FORBIDDEN = "Forbidden"  # the code asked for a kernel family (or a stand-in) its unit may not use


class StudentError(AutograderError):
    """The code under test raised, returned something unusable, or ran too long.

    ``kind`` is a :class:`Failure`, or the name of the exception the code raised.
    """

    def __init__(self, kind: str, message: str, where: str = ""):
        self.kind, self.message, self.where = kind, message, where
        super().__init__(self.describe())

    def describe(self) -> str:
        """What the student reads, in the language this process speaks: the grader's own messages
        (those of a :class:`Failure`, and ``where``) may come from the sandbox's box in English."""
        if self.kind == "NotImplementedError" and (not self.message.strip() or self.message.endswith(NOT_IMPLEMENTED)):
            text = _(NOT_IMPLEMENTED)  # a stub's own (torch's NotImplementedError names an operator: shown as raised)
        elif self.kind in set(Failure):
            text = translate_text(self.message)
        else:
            text = _("your code raised {kind}: {message}").format(kind=self.kind, message=self.message)
        return _("{text} ({where})").format(text=text, where=translate_text(self.where)) if self.where else text


class Subject(Protocol):
    """What the grading plugin and the suites use of a subject."""

    folder: Path
    failure: str | None  # set when the subject's own machinery broke (a grader failure, never the student's)

    def begin(self, test_id: str) -> None:
        """A new test starts (per-test budgets and failures reset)."""

    def status(self, unit: str) -> str | None:
        """None when ``unit`` loads, else the message for the student."""

    def runtime_uses(self, unit: str) -> set[str]:
        """Forbidden names and operators the unit was seen using so far."""

    def run(self, call: Call) -> Result:
        """Run one call; raise :class:`StudentError` when the code under test fails."""

    def close(self) -> None:
        """Release what the subject holds (workers, folders); idempotent."""




def map_nested(value, leaf):
    """Apply ``leaf`` to every non-container in a nest of tuples, lists and dicts."""
    if isinstance(value, (tuple, list)):
        return type(value)(map_nested(v, leaf) for v in value)
    if isinstance(value, dict):
        return {k: map_nested(v, leaf) for k, v in value.items()}
    return leaf(value)


def leaves_of(value) -> list:
    out: list = []
    map_nested(value, out.append)
    return out
