"""The batch <-> grader process channel: one JSON object a line, both sides' one codec.

The batch (:mod:`autograder.delivery.batch`) writes a :class:`GradeRequest` a line on the
process's stdin; the process (:mod:`autograder.grading.serve`) answers each, on a descriptor of
its own, with :class:`Graded` (the results are in the request's report file) or :class:`Failed`
(why; the process then ends). Both sides are the engine's own: a line that is not one of these
is a bug, and the ``decode_*`` functions raise :class:`MalformedLine` saying what is wrong.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from autograder.core.errors import AutograderError


class Reply(StrEnum):
    """The field that says which reply a line is."""

    OK = "ok"  # {"ok": true}: graded
    ERROR = "error"  # {"error": MESSAGE}: the grader failed


@dataclass(frozen=True)
class GradeRequest:
    """Grade ``folders`` together (as ``grade --jobs 1 --format json`` does) and write the
    results to ``report`` as a JSON list."""

    folders: tuple[Path, ...]
    report: Path


@dataclass(frozen=True)
class Graded:
    pass


@dataclass(frozen=True)
class Failed:
    error: str


Message = GradeRequest | Graded | Failed

_REQUEST_FIELDS = {"folders", "report"}


class MalformedLine(AutograderError, ValueError):
    """A line of this channel that is not one of its messages."""


def encode(message: Message) -> bytes:
    """One line of the channel."""
    data: dict[str, object]
    if isinstance(message, GradeRequest):
        data = {"folders": [str(p) for p in message.folders], "report": str(message.report)}
    elif isinstance(message, Graded):
        data = {str(Reply.OK): True}
    else:
        data = {str(Reply.ERROR): message.error}
    return json.dumps(data).encode() + b"\n"


def _object(line: bytes | str, what: str) -> dict:
    try:
        data = json.loads(line)
    except ValueError:  # (UnicodeDecodeError too)
        raise MalformedLine(f"{what} is not JSON: {_clip(line)}") from None
    if type(data) is not dict:
        raise MalformedLine(f"{what} is not a JSON object: {_clip(line)}")
    return data


def decode_request(line: bytes | str) -> GradeRequest:
    """A batch's line: ``{"folders": [PATH, ...], "report": PATH}``."""
    data = _object(line, "a grade request")
    folders, report = data.get("folders"), data.get("report")
    if (data.keys() != _REQUEST_FIELDS or type(folders) is not list or not all(type(f) is str for f in folders)
            or type(report) is not str):
        raise MalformedLine(f'a grade request must be {{"folders": [PATH, ...], "report": PATH}}, not {_clip(line)}')
    return GradeRequest(tuple(Path(f) for f in folders), Path(report))


def decode_reply(line: bytes | str) -> Graded | Failed:
    """A grader process's line: ``{"ok": true}`` or ``{"error": MESSAGE}``."""
    data = _object(line, "a grader's reply")
    if data.keys() == {str(Reply.OK)} and data[str(Reply.OK)] is True:
        return Graded()
    if data.keys() == {str(Reply.ERROR)} and type(data[str(Reply.ERROR)]) is str:
        return Failed(data[str(Reply.ERROR)])
    raise MalformedLine(f'a grader\'s reply must be {{"ok": true}} or {{"error": MESSAGE}}, not {_clip(line)}')


def _clip(line: bytes | str, limit: int = 200) -> str:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")
