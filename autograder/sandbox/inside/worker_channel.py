"""The grader <-> worker channel: the JSON headers of :mod:`~autograder.sandbox.inside.transport`'s
frames (a call's and a result's values ride in the frame beside them), both sides' one codec.

The grader (trusted) sends :class:`Request`; the worker (student code runs there) answers with
:class:`Ready`, :class:`Status` or :class:`Answer`. What a worker sends is hostile: the
``decode_*`` functions give None for a header that is not the expected reply, and leave the
fields' checks to their users (``seen`` and the error text are checked where they are used).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import cast


class Op(StrEnum):
    READY = "ready"  # worker -> grader, once, when it serves
    STATUS = "status"  # grader -> worker: import the unit; worker -> grader: the import's problem
    RUN = "run"  # grader -> worker: one call (its values in the frame)
    STOP = "stop"  # grader -> worker: end now
    RESULT = "result"  # worker -> grader: one call's answer (its values in the frame)


@dataclass(frozen=True)
class Request:
    """grader -> worker. ``test``: the test the request belongs to; ``unit``: a status's unit."""

    op: Op
    test: str | None
    unit: str | None = None

    def header(self) -> dict:
        unit = {"unit": self.unit} if self.op == Op.STATUS else {}
        return {"op": str(self.op), **unit, "test": self.test}

    @classmethod
    def decode(cls, header: dict) -> "Request":
        return cls(cast(Op, header.get("op")), header.get("test"), header.get("unit"))  # the grader's: trusted


@dataclass(frozen=True)
class Ready:
    pid: int

    def header(self) -> dict:
        return {"op": str(Op.READY), "pid": self.pid}


@dataclass(frozen=True)
class Status:
    """The unit's import: ``problem`` (None: it imported), ``seen``: the kernel families refused."""

    problem: str | None
    seen: list

    def header(self) -> dict:
        return {"op": str(Op.STATUS), "problem": self.problem, "seen": self.seen}


@dataclass(frozen=True)
class Answer:
    """One call's answer: ``ok`` (its result in the frame's values) or ``error``
    (transport's error fields: kind, message, where)."""

    ok: bool
    seen: list
    error: dict | None = None

    def header(self) -> dict:
        if self.ok:
            return {"op": str(Op.RESULT), "ok": True, "seen": self.seen}
        return {"op": str(Op.RESULT), "ok": False, **cast(dict, self.error), "seen": self.seen}  # (set when not ok)


def decode_ready(header: dict) -> Ready | None:
    # (cast: the fields as the worker sent them, unchecked here: see the module's docstring)
    return Ready(cast(int, header.get("pid"))) if header.get("op") == Op.READY else None


def decode_status(header: dict) -> Status | None:
    problem = header.get("problem")
    if header.get("op") != Op.STATUS or not (problem is None or type(problem) is str):
        return None
    return Status(problem, cast(list, header.get("seen")))  # (unchecked: see the module's docstring)


def decode_answer(header: dict) -> Answer | None:
    if header.get("op") != Op.RESULT:
        return None
    ok = header.get("ok") is True
    return Answer(ok, cast(list, header.get("seen")),  # (unchecked: see the module's docstring)
                  None if ok else {k: header.get(k) for k in ("kind", "message", "where")})
