"""The grader <-> zygote channel: one JSON object a line over a Unix socket, both sides' one codec.

The grader (:class:`~autograder.sandbox.pool.Pool`, trusted) sends :class:`Op` requests, some
with descriptors passed along (``SCM_RIGHTS``): a spawn carries the worker's pipes and its
cgroups' ``tasks`` files, an attach the socket of a grading process that shares the zygote. The
zygote (:mod:`autograder.sandbox.inside.zygote`, trusted, in the box) answers with
:class:`Event` lines. No student code ever holds this socket.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum


class Op(StrEnum):
    """What the grader asks of the zygote."""

    ATTACH = "attach"  # serve one more grader connection (the socket passed along)
    SPAWN = "spawn"  # fork a worker (its pipes and cgroup files passed along)
    KILL = "kill"  # kill one worker of this connection


class Event(StrEnum):
    """What the zygote tells a grader."""

    READY = "ready"  # the zygote (or an attached connection) serves requests
    EXIT = "exit"  # a worker ended, every process of it with it


@dataclass(frozen=True)
class Attach:
    op = Op.ATTACH


@dataclass(frozen=True)
class Spawn:
    """``spec``: the worker's settings (unit, box, uid, limits...; :func:`autograder.sandbox.inside.worker.become_worker`)."""

    id: int
    spec: dict
    op = Op.SPAWN


@dataclass(frozen=True)
class Kill:
    id: int
    op = Op.KILL


@dataclass(frozen=True)
class Ready:
    pid: int
    event = Event.READY


@dataclass(frozen=True)
class Exit:
    id: int
    status: int  # the worker's wait status
    event = Event.EXIT


Request = Attach | Spawn | Kill
Message = Ready | Exit


def encode(message: Request | Message) -> bytes:
    """One line of the channel."""
    data: dict[str, object]
    if isinstance(message, Attach):
        data = {"op": str(Op.ATTACH)}
    elif isinstance(message, Spawn):
        data = {"op": str(Op.SPAWN), "spawn": {**message.spec, "id": message.id}}
    elif isinstance(message, Kill):
        data = {"op": str(Op.KILL), "id": message.id}
    elif isinstance(message, Ready):
        data = {"event": str(Event.READY), "pid": message.pid}
    else:
        data = {"event": str(Event.EXIT), "id": message.id, "status": message.status}
    return json.dumps(data).encode() + b"\n"


def decode_request(line: bytes) -> Request | None:
    """A grader's line (None: an op this zygote does not know)."""
    data = json.loads(line)
    op = data["op"]
    if op == Op.ATTACH:
        return Attach()
    if op == Op.SPAWN:
        return Spawn(data["spawn"]["id"], data["spawn"])
    if op == Op.KILL:
        return Kill(data["id"])
    return None


def decode_message(line: bytes) -> Message | None:
    """A zygote's line (None: an event this grader does not know)."""
    data = json.loads(line)
    event = data.get("event")
    if event == Event.READY:
        return Ready(data.get("pid"))
    if event == Event.EXIT:
        return Exit(data["id"], data["status"])
    return None
