"""A batch's students and their records: who an upload is, when it was handed in, what it cost
to be late, and the per-student files (``students/<name>.json`` and ``.md``) a resumed batch reads.

A record stands for one upload graded by one grader: it keeps the upload's hash (``digest``) and
the grader's fingerprint (:mod:`autograder.delivery.fingerprint`), and :func:`stale` says why it
must be graded again (a changed upload, a changed grader, a grader failure), or None.

Late work: a unit with a ``due`` date in the manifest is priced by its ``[late]`` policy
(:mod:`autograder.core.lateness`) on the trusted points, from the upload's submission time
(:func:`submission_time`) against the student's due date (the manifest's, or their extension from
``[late] extensions``). The record keeps the trusted result and a ``late`` section beside it.
"""
from __future__ import annotations

import csv
import datetime
import hashlib
import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from autograder.core.errors import UsageError
from autograder.core import lateness
from autograder.core.manifest import Course
from autograder.core.results import GradeResult
from autograder.core.safe_text import safe_name, safe_text
from autograder.core.settings import DEFAULTS
from autograder.trust.uploads import SubmissionError, read_regular, walk
from autograder.delivery import fingerprint as grader
from autograder.delivery.atomic import atomic_write
from autograder.delivery.formats import POINTS_POSSIBLE, markdown_text, to_markdown

# Bytes of an upload read for its digest, at most: from the default zip limit, never the course's,
# so an upload's digest (what a resumed batch compares) does not change with course.toml.
DIGEST_BYTES = 4 * DEFAULTS.upload_zip_bytes


@dataclass
class Student:
    name: str
    source: Path
    digest: str
    submitted: datetime.datetime | None = None  # when it was handed in (submission_time); None: unknown
    submitted_from: str = ""  # where that time was read


def submission_time(path: Path) -> tuple[datetime.datetime | None, str]:
    """When the upload ``path`` was handed in, and where that was read.

    Which wins: a ``timestamp.txt`` at the top of an upload folder (nbgrader's form,
    ``2027-03-01 23:59:00.000000 UTC``, or ISO 8601; no offset means UTC), since it is what the
    system that collected the work wrote, while a copy, a download or an unzip may change
    modification times. Without one (or when it cannot be read as a time), the upload's
    modification time: a zip's own, a folder's newest file's (a folder's own changes only when
    entries are added or removed). A ``timestamp.txt`` inside a zip is never read, and neither is
    one through a link; a linked upload has no time (it is refused anyway). The file is taken at
    its word: where students could put a file of that name at the top of their own upload, write
    it (or remove it) from the platform's record before grading."""
    try:
        info = path.lstat()
    except OSError:
        return None, ""
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        return None, ""
    mtime = "modification time"
    if stat.S_ISDIR(info.st_mode):
        given = read_regular(path / lateness.TIMESTAMP, 64)
        if given is not None:
            when = lateness.parse_timestamp(given.decode("utf-8", "replace"))
            if when is not None:
                return when, lateness.TIMESTAMP
            mtime += f" ({lateness.TIMESTAMP} unreadable)"
        try:
            newest = max((i.st_mtime for f, i in walk(path) if stat.S_ISREG(i.st_mode) and f != path / lateness.TIMESTAMP),
                         default=info.st_mtime)
        except (SubmissionError, OSError):
            return None, ""  # collect() refuses it, with its status
    else:
        newest = info.st_mtime
    return datetime.datetime.fromtimestamp(newest, lateness.UTC), mtime


def extensions(course: Course) -> lateness.Extensions:
    """The course's per-student extensions (ValueError: the file named cannot be used)."""
    return lateness.Extensions.load(course.root, course.late)


def late(course: Course, student: Student, result: dict | None,
         given: lateness.Extensions | None = None) -> dict | None:
    """The ``late`` section of a graded record: each unit with a due date priced on its trusted
    points, against the student's due date (``given``: the course's extensions, read once per
    batch); None when no graded unit has a due date or the time is unknown."""
    if not result or student.submitted is None:
        return None
    given = extensions(course) if given is None else given
    units = {name: lateness.assess(course.late, unit["score"], student.submitted,
                                   given.due(name, cast(datetime.datetime, course.units[name].due),  # (not None: below)
                                             student.name)).to_dict()
             for name, unit in result.get("units", {}).items()
             if name in course.units and course.units[name].due is not None}
    if not units:
        return None
    return {"submitted": student.submitted.isoformat(), "from": student.submitted_from,
            "policy": course.late.describe(), "units": units}


def late_status(late: dict | None) -> str:
    """``; attention 1 day late: -2.6 points`` for each late unit, or nothing."""
    units = (late or {}).get("units", {})
    return "".join(f"; {name} {lateness.note(u['days_late'], u['penalty'])}" for name, u in units.items() if u["days_late"])


def late_feedback(late: dict | None, result: GradeResult) -> str:
    if not late:
        return ""
    units = late["units"]
    after = sum(units[u.name]["score"] if u.name in units else u.score for u in result.units.values())
    submitted = datetime.datetime.fromisoformat(late["submitted"])
    lines = ["### Late work", "",
             f"Handed in {lateness.shown(submitted)} (from the upload's {markdown_text(late['from'])}); "
             f"late work: {late['policy']}. Score after it: {after:g}/{result.max_score:g}.", "",
             "| unit | due | late | points | penalty | score |", "|---|---|---|---:|---:|---:|"]
    for name, u in units.items():
        days = f"{u['days_late']} day{'s' if u['days_late'] != 1 else ''}" if u["days_late"] else "on time"
        lines.append(f"| {name} | {lateness.shown(datetime.datetime.fromisoformat(u['due']))} | {days} | "
                     f"{u['points']:g} | -{u['penalty']:g} | {u['score']:g} |")
    return "\n".join(lines) + "\n"


def shown(record: dict) -> dict:
    """A record as the gradebook shows it: each late unit's score after its penalty, and the
    status saying so."""
    late = record.get("late")
    if not late or record.get("status") != "graded" or not record.get("result"):
        return record
    units = {name: {**unit, "score": late["units"][name]["score"]} if name in late["units"] else unit
             for name, unit in record["result"]["units"].items()}
    return {**record, "status": record["status"] + late_status(late),
            "result": {**record["result"], "units": units}}


def digest(path: Path) -> str:
    """A hash of the upload that reads at most :data:`DIGEST_BYTES` (a sparse 20 GiB file costs nothing)."""
    sha, budget = hashlib.sha256(), DIGEST_BYTES
    try:
        files = [(path, path.lstat())] if not path.is_dir() else list(walk(path))
    except (SubmissionError, OSError) as error:
        return "unreadable:" + hashlib.sha256(str(error).encode()).hexdigest()  # collect() reports it
    for file, info in files:
        sha.update(f"{file.relative_to(path.parent)}\0{info.st_mode}\0{info.st_size}\0".encode())
        if not stat.S_ISREG(info.st_mode):
            continue
        try:
            with open(file, "rb") as handle:
                while budget > 0 and (block := handle.read(min(1 << 20, budget))):
                    sha.update(block)
                    budget -= len(block)
        except OSError:
            sha.update(b"unreadable")
    return sha.hexdigest()


RESERVED_NAMES = frozenset({POINTS_POSSIBLE.casefold()})  # the gradebook's own row labels (compared casefolded)


def discover(submissions: Path, mapping: dict[str, str] | None = None) -> tuple[list[Student], list[dict]]:
    """The students to grade, and the names refused on the way.

    A student's name is the instructor's (``mapping``: upload file name -> student), else the
    folder's name or the zip's stem, made safe to print. A name is an identity, so nothing is
    guessed: when two uploads would get one name (``zed/`` and ``zed.zip``), neither is graded
    under it, both are refused with a status naming the uploads, until the instructor maps
    them; a name the gradebook uses for its own rows ("Points Possible") or one with nothing
    printable is refused likewise. Each refusal is ``{"name", "uploads", "reason"}``.
    """
    mapping = mapping or {}
    entries = sorted(p for p in submissions.iterdir() if not p.name.startswith("."))
    wanted = {p: mapping.get(p.name) or safe_name(p.stem if p.suffix == ".zip" and p.is_file() else p.name)
              for p in entries}
    by_name: dict[str, list[Path]] = {}
    for path in entries:
        by_name.setdefault(wanted[path], []).append(path)
    students, refused = [], []
    for name, paths in sorted(by_name.items()):
        uploads = [safe_name(p.name) for p in paths]
        if len(paths) > 1:
            reason = (f"name clash: uploads {', '.join(uploads)} share the name {name!r}; none is graded "
                      "until --map says whose each is")
        elif name.casefold() in RESERVED_NAMES or not name or name.startswith("."):
            reason = f"the name {name!r} of upload {uploads[0]} cannot name a student; give it one with --map"
        else:
            students.append(Student(name, paths[0], digest(paths[0]), *submission_time(paths[0])))
            continue
        refused.append({"name": name, "uploads": uploads, "reason": reason})
    return students, refused


def read_mapping(path: Path) -> dict[str, str]:
    """The instructor's ``--map`` CSV: columns ``upload`` (a file name in the submissions
    folder) and ``student`` (the name to grade it under). Raises ValueError when a row is
    unusable or two uploads are mapped to one student."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.DictReader(handle))
    if rows and not {"upload", "student"} <= rows[0].keys():
        raise UsageError(f"{path}: the map needs 'upload' and 'student' columns (found {', '.join(rows[0])})")
    mapping: dict[str, str] = {}
    for row in rows:
        upload, student = (row.get("upload") or "").strip(), safe_name(row.get("student") or "")
        if not upload or not student or "/" in student or student.startswith("."):
            raise UsageError(f"{path}: unusable row {row}")
        if student in mapping.values():
            raise UsageError(f"{path}: two uploads are mapped to {student!r}")
        mapping[upload] = student
    return mapping


def read_record(out: Path, name: str) -> dict | None:
    """``students/<name>.json`` as written, or None (absent, or torn by an older run's crash)."""
    try:
        data = json.loads((out / "students" / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stale(out: Path, student: Student, now: dict) -> str | None:
    """Why ``student`` must be graded (again) by the grader whose fingerprint is ``now``, or None
    when their record stands: ``new``, ``upload changed``, ``grader changed: <what>`` or ``a
    grader failure before`` (which is never final)."""
    data = read_record(out, student.name)
    if data is None:
        return "new"
    if data.get("digest") != student.digest:
        return "upload changed"
    if (data.get("grader") or {}).get("digest") != now["digest"]:
        return grader.reason(grader.changed(data.get("grader"), now))
    return None if data.get("final", data.get("status") == "graded") else "a grader failure before"


def record(out: Path, student: Student, status: str, result: GradeResult | None, *, final: bool = True,
           late: dict | None = None, fingerprint: dict | None = None) -> None:
    status = safe_text(status)
    data = {"student": student.name, "digest": student.digest, "status": status, "final": final,
            "result": result.to_dict() if result else None}
    if fingerprint is not None:
        data["grader"] = fingerprint
    if late:
        data["late"] = late
    write(out, data, result)


def write(out: Path, data: dict, result: GradeResult | None) -> None:
    """A student's record and feedback, each written whole."""
    name = data["student"]
    feedback = (to_markdown([result]) + late_feedback(data.get("late"), result) if result
                else f"## {markdown_text(name)}\n\nNot graded: {markdown_text(data['status'])}\n")
    atomic_write(out / "students" / f"{name}.md", feedback)
    atomic_write(out / "students" / f"{name}.json", json.dumps(data, indent=2, ensure_ascii=False))


def reprice(course: Course, out: Path, student: Student, record: dict, given: lateness.Extensions) -> dict:
    """``record`` with its ``late`` section as the manifest and the upload's time price it now
    (rewritten, with the feedback, when that changed: a due date moved, a policy changed, an
    extension given, a ``timestamp.txt`` added), so the gradebook and the feedback agree without grading again."""
    if record.get("status") != "graded" or not record.get("result"):
        return record
    priced = late(course, student, record["result"], given)
    priced = json.loads(json.dumps(priced)) if priced else None
    if priced == record.get("late"):
        return record
    record = {k: v for k, v in record.items() if k != "late"} | ({"late": priced} if priced else {})
    write(out, record, GradeResult.from_dict(record["result"]))
    return record
