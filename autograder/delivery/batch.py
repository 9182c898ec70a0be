"""Grade a whole class: one sub-folder or zip per student.

Students are graded in chunks by ``jobs`` threads, each with a grader process
of its own (:mod:`autograder.grading.serve`) that grades its chunks one after
another, so the process's start-up is paid once per thread; this process
imports their modules once and forks them (:mod:`autograder.grading.forking`). The grader
processes spawn their sandbox workers from one zygote, the batch's (as the
processes of a ``grade --jobs N`` do): one zygote's start-up, not one each. Each
student's result is written atomically as soon as its chunk finishes, with
the hash of what was handed in, so an interrupted batch resumes where it
stopped and never grades the same submission twice. The gradebook and the
summary are rebuilt from the per-student files at the end.

Whatever one upload does, the others are graded (decisions, README "a whole class"):
  * every chunk runs under a wall-clock budget (``student_budget`` seconds per
    student in it); a chunk that fails or runs out of time is graded again one
    student at a time, so only the culprit gets the failure, and its grader
    process is replaced by a fresh one, so nothing of a failure carries over;
  * a grader failure is never final: the next run grades that student again.
    A status of the upload itself (a corrupt zip, no unit files) is final for
    that exact upload, since grading the same bytes again gives the same status;
  * SIGINT and SIGTERM kill every grader process, record nothing for the
    students being graded, and raise :class:`BatchInterrupted` (run again to resume);
  * a name is an identity (:func:`discover`): uploads whose names clash (``zed/`` and
    ``zed.zip``) are refused, both, until the instructor's ``--map`` says whose each is, and a
    name the gradebook uses for its own rows is refused too;
  * digests and unpacking read a bounded amount (see :mod:`.submissions`).

Late work: a unit with a ``due`` date in the manifest is priced by its ``[late]`` policy
(:mod:`autograder.core.lateness`) on the trusted points, from the upload's submission time
(:func:`submission_time`: its ``timestamp.txt``, else its modification time). The record keeps
the trusted result and a ``late`` section beside it; the feedback, the gradebook's unit columns
and totals, and its status show the score after the penalty.
"""
from __future__ import annotations

import csv
import datetime
import hashlib
import json
import math
import os
import queue
import resource
import select
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from rich.progress import Progress

from autograder.authoring.rubric import rubric
from autograder.core import lateness
from autograder.core.manifest import Course
from autograder.core.results import GradeResult
from autograder.core.safe_text import safe_name, safe_text
from autograder.core.settings import DEFAULTS
from autograder.core.uploads import SubmissionError, read_regular, walk
from autograder.delivery.atomic import atomic_write
from autograder.delivery.formats import (LMS_LAYOUTS, POINTS_POSSIBLE, LmsRoster, gradebook_csv, lms_gradebook,
                                         lms_settings, markdown_text, to_markdown, unmatched_csv)
from autograder.delivery.submissions import collect
from autograder.delivery import class_report
from autograder.grading import forking, serve
from autograder.grading import serve_channel as channel
from autograder.grading.errors import GraderError
from autograder.grading.session import GradingSession, isolation_notice
from autograder.sandbox.resources import SandboxError
from autograder.sandbox.pool import Pool

CHUNK = 5  # students per grade at most: bounds what a failure costs, and how long progress and results wait
# Bytes of an upload read for its digest, at most: from the default zip limit, never the course's,
# so an upload's digest (what a resumed batch compares) does not change with course.toml.
DIGEST_BYTES = 4 * DEFAULTS.upload_zip_bytes


class BatchInterrupted(Exception):
    """SIGINT or SIGTERM stopped the batch; what was recorded stays, the rest is graded by the next run."""


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


def _late(course: Course, student: Student, result: dict | None) -> dict | None:
    """The ``late`` section of a graded record: each unit with a due date priced on its trusted
    points; None when no graded unit has a due date or the time is unknown."""
    if not result or student.submitted is None:
        return None
    units = {name: lateness.assess(course.late, unit["score"], student.submitted,
                                   cast(datetime.datetime, course.units[name].due)).to_dict()  # (not None: below)
             for name, unit in result.get("units", {}).items()
             if name in course.units and course.units[name].due is not None}
    if not units:
        return None
    return {"submitted": student.submitted.isoformat(), "from": student.submitted_from,
            "policy": course.late.describe(), "units": units}


def _late_status(late: dict | None) -> str:
    """``; attention 1 day late: -2.6 points`` for each late unit, or nothing."""
    units = (late or {}).get("units", {})
    return "".join(f"; {name} {lateness.note(u['days_late'], u['penalty'])}" for name, u in units.items() if u["days_late"])


def _late_feedback(late: dict | None, result: GradeResult) -> str:
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


def _shown(record: dict) -> dict:
    """A record as the gradebook shows it: each late unit's score after its penalty, and the
    status saying so."""
    late = record.get("late")
    if not late or record.get("status") != "graded" or not record.get("result"):
        return record
    units = {name: {**unit, "score": late["units"][name]["score"]} if name in late["units"] else unit
             for name, unit in record["result"]["units"].items()}
    return {**record, "status": record["status"] + _late_status(late),
            "result": {**record["result"], "units": units}}


def _digest(path: Path) -> str:
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
            students.append(Student(name, paths[0], _digest(paths[0]), *submission_time(paths[0])))
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
        raise ValueError(f"{path}: the map needs 'upload' and 'student' columns (found {', '.join(rows[0])})")
    mapping: dict[str, str] = {}
    for row in rows:
        upload, student = (row.get("upload") or "").strip(), safe_name(row.get("student") or "")
        if not upload or not student or "/" in student or student.startswith("."):
            raise ValueError(f"{path}: unusable row {row}")
        if student in mapping.values():
            raise ValueError(f"{path}: two uploads are mapped to {student!r}")
        mapping[upload] = student
    return mapping


def _done(out: Path, student: Student) -> bool:
    record = out / "students" / f"{student.name}.json"
    if not record.is_file():
        return False
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except json.JSONDecodeError:  # a torn write from an older run: grade again
        return False
    return data.get("digest") == student.digest and data.get("final", data.get("status") == "graded")


def _record(out: Path, student: Student, status: str, result: GradeResult | None, *, final: bool = True,
            late: dict | None = None) -> None:
    status = safe_text(status)
    data = {"student": student.name, "digest": student.digest, "status": status, "final": final,
            "result": result.to_dict() if result else None}
    if late:
        data["late"] = late
    _write(out, data, result)


def _write(out: Path, data: dict, result: GradeResult | None) -> None:
    """A student's record and feedback, each written whole."""
    name = data["student"]
    feedback = (to_markdown([result]) + _late_feedback(data.get("late"), result) if result
                else f"## {markdown_text(name)}\n\nNot graded: {markdown_text(data['status'])}\n")
    atomic_write(out / "students" / f"{name}.md", feedback)
    atomic_write(out / "students" / f"{name}.json", json.dumps(data, indent=2, ensure_ascii=False))


def _reprice(course: Course, out: Path, student: Student, record: dict) -> dict:
    """``record`` with its ``late`` section as the manifest and the upload's time price it now
    (rewritten, with the feedback, when that changed: a due date moved, a policy changed, a
    ``timestamp.txt`` added), so the gradebook and the feedback agree without grading again."""
    if record.get("status") != "graded" or not record.get("result"):
        return record
    late = _late(course, student, record["result"])
    late = json.loads(json.dumps(late)) if late else None
    if late == record.get("late"):
        return record
    record = {k: v for k, v in record.items() if k != "late"} | ({"late": late} if late else {})
    _write(out, record, GradeResult.from_dict(record["result"]))
    return record


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[-limit:]


class _Server:
    """One grader process (:mod:`autograder.grading.serve`) that grades its batch thread's chunks
    one after another, so its start-up (its imports, more CPU than a student's grade) is paid
    once per thread, not once per chunk. It spawns its workers from the batch's zygote.

    :meth:`forked` ones inherit this process's imports; a replacement is :meth:`started` as a
    fresh interpreter, since the batch's threads are running by then (no fork among threads).
    Either runs in a session of its own: a Ctrl-C meant for the batch reaches the batch, which
    stops it."""

    def __init__(self, proc, log):
        self.proc, self.log = proc, log  # log: a file, not a pipe: nothing to fill while we wait
        self._buffer = b""

    @classmethod
    def started(cls, course: Course, units: list[str] | None, zygote: Pool) -> "_Server":
        log = tempfile.TemporaryFile()
        proc = zygote.popen_attached(
            [sys.executable, "-m", "autograder.grading.serve", *(units or [])],
            {**os.environ, "AUTOGRADER_COURSE_ROOT": str(course.root), "AUTOGRADER_SERVE_PARENT": str(os.getpid())},
            cwd=course.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        return cls(proc, log)

    @classmethod
    def forked(cls, course: Course, units: list[str] | None, zygote: Pool, others: list["_Server"]) -> "_Server":
        """``others``: the grader processes forked before, whose pipes the new one must not hold."""
        log = tempfile.TemporaryFile()
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        stdin, stdout = os.fdopen(request_w, "wb"), os.fdopen(reply_r, "rb", buffering=0)
        batch = os.getpid()
        try:
            pid = forking.fork(lambda: serve.main(units or [], course, parent=batch),
                               (request_r, reply_w, os.dup(log.fileno())), pool=zygote, session=True,
                               close=[stdin, stdout, *(f for o in others for f in (o.proc.stdin, o.proc.stdout))])
        except BaseException:
            for file in (stdin, stdout, log):
                file.close()
            raise
        return cls(forking.Forked(pid, stdin, stdout), log)

    def grade(self, paths: list[Path], report: Path, seconds: float) -> str | None:
        """None once ``report`` holds the results; else why not (the process is then useless)."""
        request = channel.encode(channel.GradeRequest(tuple(paths), report))
        try:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
        except OSError:
            return self._ended()
        deadline = time.monotonic() + seconds
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return f"grader failure (time budget exhausted): grading took longer than its budget ({seconds:g} s)"
            data = os.read(self.proc.stdout.fileno(), 1 << 16)  # (never through the buffered object)
            if not data:
                return self._ended()
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply = channel.decode_reply(line)
        return None if isinstance(reply, channel.Graded) else f"grader failure: {_one_line(reply.error)}"

    def _ended(self) -> str:
        code = self.proc.wait()
        self.log.seek(0)
        return f"grader failure (exit {code}): {_one_line(self.log.read().decode('utf-8', 'replace'))}"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the process and whatever it left in its session
        except OSError:
            pass
        if self.proc.returncode is None:  # (a forked one may not have made its session yet)
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        """End of input: the process stops its zygote and exits; killed if it takes long."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


class _Runner:
    """Grades chunks, each batch thread with a grader process of its own, and stops them all on request."""

    def __init__(self, course: Course, out: Path, units: list[str] | None, budget: float):
        self.course, self.out, self.units, self.budget = course, out, units, budget
        self.stopping = threading.Event()
        self._servers: dict[int, _Server] = {}  # batch thread -> its grader process
        self._forked: list[_Server] = []  # grader processes forked for threads that have none yet
        # The zygote the grader processes spawn their workers from: the batch's own, replaced if it ends.
        self.session = GradingSession(course, own=True)
        # Re-entrant: SIGINT's handler (stop) runs in the main thread, which may hold it then.
        self._lock = threading.RLock()

    def start(self, servers: int) -> None:
        """Before the batch's threads start: the zygote, then ``servers`` grader processes forked
        from this one, which imports their modules once, while the zygote imports torch (two
        grader processes on the 2-core machine: 2.2 s less of a 29 s -j2 batch than when each
        imported its own). It collects the suites once too (:func:`~autograder.grading.grade.collect_suites`),
        so the grader processes start with the test modules imported and each chunk collects only
        its units' modules. A thread that finds none starts its own."""
        self.start_zygote()
        if self.session.pool is None:
            return
        self.session.load_grader()
        from autograder.grading.grade import collect_suites  # (imported just above)

        try:
            collect_suites(self.course, self.units)
        except GraderError:
            pass  # the suites cannot be collected: each chunk's grade says why
        while len(self._forked) < servers and not self.stopping.is_set():
            try:
                # (the session is the batch's own: its pool is a Pool)
                self._forked.append(_Server.forked(self.course, self.units, cast(Pool, self.session.pool),
                                                   self._forked))
            except (OSError, SandboxError):
                return

    def start_zygote(self) -> None:
        """Start the batch's zygote now: it imports torch while this process, or the first grader
        processes, import theirs."""
        with self._lock:
            try:
                self._zygote_alive()
            except (OSError, SandboxError):
                pass  # tried again for each grader process, whose chunk records why it failed

    def _zygote_alive(self) -> Pool:
        """The batch's zygote (under ``_lock``); one that ended (killed, say) is replaced, so its
        end costs only the chunks it was grading, which are graded again."""
        return self.session.alive()

    def release(self) -> None:
        """Stop the grader processes no thread took, then the zygote (after every grader process has closed)."""
        while self._forked:
            self._forked.pop().close()
        self.session.close()

    def stop(self) -> None:
        self.stopping.set()
        with self._lock:
            for server in [*self._servers.values(), *self._forked]:
                server.kill()

    def close(self) -> None:
        """Stop this thread's grader process, if it has one."""
        with self._lock:
            server = self._servers.pop(threading.get_ident(), None)
        if server is not None:
            server.close()

    def _grade(self, paths: list[Path], report: Path, seconds: float) -> str | None:
        """None once ``report`` holds the results; else why not."""
        with self._lock:
            if self.stopping.is_set():
                return "stopped"
            server = self._servers.get(threading.get_ident())
            if server is None and self._forked:
                server = self._servers[threading.get_ident()] = self._forked.pop()
            if server is None:
                try:
                    server = _Server.started(self.course, self.units, self._zygote_alive())
                except (OSError, SandboxError) as error:
                    return f"grader failure: the sandbox could not start: {_one_line(str(error))}"
                self._servers[threading.get_ident()] = server
        why = server.grade(paths, report, seconds)
        if why is not None:  # a fresh process for the next chunk: nothing of a failure carries over
            server.kill()
            self.close()
        return why

    def chunk(self, chunk: list[Student]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            ready: list[tuple[Student, Path]] = []
            for i, student in enumerate(chunk):
                # Numbered folders: no upload's name can collide with another's or with the report.
                try:
                    ready.append((student, collect(student.source, Path(tmp) / "subs" / f"{i:04d}", self.course)))
                except SubmissionError as error:
                    _record(self.out, student, _one_line(str(error)), None)
            if ready:
                self._grade_ready(ready, Path(tmp) / "report.json")

    def _grade_ready(self, ready: list[tuple[Student, Path]], report: Path) -> None:
        # One student's budget more than the chunk's students, for the grader's own start-up.
        why = self._grade([p for _, p in ready], report, self.budget * (len(ready) + 1))
        if self.stopping.is_set():
            return  # cut short: nothing recorded, the next run grades them
        results = None
        if why is None:
            try:
                results = [GradeResult.from_dict(r) for r in json.loads(report.read_text(encoding="utf-8"))]
            except (OSError, ValueError, KeyError, TypeError):
                results, why = None, "grader failure: its report could not be read"
        if results is not None and len(results) == len(ready):
            for (student, _), result in zip(ready, results):
                result.submission = student.name  # never the temporary path
                _record(self.out, student, "graded", result, late=_late(self.course, student, result.to_dict()))
        elif len(ready) > 1:
            for one in ready:  # one student's upload broke the chunk: find whose
                self._grade_ready([one], report)
        else:
            _record(self.out, ready[0][0], why or "grader failure: a result is missing", None, final=False)


def _chunks(todo: list[Student], jobs: int) -> list[list[Student]]:
    """The chunks, in the order the batch threads take them. With several threads they shrink
    near the end (to a quarter of a thread's share of what is left), so the threads finish
    together instead of one grading a last full chunk alone: a chunk costs a warm grader process
    about 0.1 s more than its students, a student about 1 s of one unit. -j 2 uses two
    processes for any class of two."""
    chunks, start = [], 0
    while start < len(todo):
        left = len(todo) - start
        size = min(CHUNK, left) if jobs <= 1 else max(1, min(CHUNK, math.ceil(left / (2 * jobs))))
        chunks.append(todo[start : start + size])
        start += size
    return chunks


def grade_batch(course: Course, submissions: Path, out: Path, *, jobs: int = 1, units: list[str] | None = None,
                show_progress: bool = True, student_budget: float | None = None, gradebook: str = "default",
                roster: LmsRoster | None = None,
                mapping: dict[str, str] | None = None) -> dict:
    """Grade every student not yet graded; return the summary (also written to ``out``).
    ``student_budget``: seconds per student in a chunk (default: the course's ``student_budget``)."""
    student_budget = course.limits.student_budget if student_budget is None else student_budget
    students, refused = discover(submissions, mapping)
    for entry in refused:
        print(f"{course.brand.command}: {entry['reason']}", file=sys.stderr)
    course.select(units)  # an unknown unit: the caller's error, before anything is graded
    todo = [s for s in students if not _done(out, s)]
    runner = _Runner(course, out, units, student_budget)
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, lambda *_: runner.stop())
    chunks: queue.SimpleQueue[list[Student]]  # the chunks not yet taken
    finished: queue.SimpleQueue[int]  # the number of students of each chunk graded
    chunks, finished = queue.SimpleQueue(), queue.SimpleQueue()
    for chunk in _chunks(todo, jobs):
        chunks.put(chunk)
    threads = min(jobs, chunks.qsize())

    def work() -> None:  # one batch thread: chunk after chunk, with one grader process
        try:
            while not runner.stopping.is_set():
                try:
                    chunk = chunks.get_nowait()
                except queue.Empty:
                    return
                runner.chunk(chunk)
                finished.put(len(chunk))
        finally:
            runner.close()

    try:
        if threads:
            runner.start(threads)  # (forks: before any thread starts)
        with Progress(disable=not show_progress) as progress, ThreadPoolExecutor(max_workers=jobs) as pool:
            task = progress.add_task("grading", total=len(todo))
            running = [pool.submit(work) for _ in range(threads)]
            while running:
                # A short wait, so the main thread runs its signal handlers at once.
                done, _ = wait(running, timeout=0.2, return_when=FIRST_COMPLETED)
                while not finished.empty():
                    progress.advance(task, finished.get())
                for future in done:
                    running.remove(future)
                    future.result()
    finally:
        runner.release()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if runner.stopping.is_set():
        left = sum(not _done(out, s) for s in students)
        raise BatchInterrupted(f"stopped: {len(students) - left} of {len(students)} students are recorded; "
                               f"run the same command again to grade the {left} left")
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return write_gradebook(course, out, students, units, graded_now=len(todo), peak_mib=peak_mib,
                           layout=gradebook, roster=roster, refused=refused,
                           isolation=isolation_notice())


def write_gradebook(course: Course, out: Path, students: list[Student], units: list[str] | None,
                    *, graded_now: int, peak_mib: float, layout: str = "default",
                    roster: LmsRoster | None = None, refused: list[dict] | None = None,
                    isolation: str | None = None) -> dict:
    """gradebook.csv and the class summary (summary.json, summary.md) from the students' records;
    a refused name is a row of its own, scored 0, with the reason as its status. ``isolation``:
    the sandbox mode's notice (None in full mode), recorded in the summary. The class report
    (:mod:`.class_report`) is written beside them."""
    names = [u.name for u in course.select(units)]
    refused = refused or []
    records = [_reprice(course, out, s, json.loads((out / "students" / f"{s.name}.json").read_text(encoding="utf-8")))
               for s in students]
    records += [{"student": r["name"], "status": r["reason"], "result": None} for r in refused]
    graded = [r["status"] == "graded" for r in records]
    late = sum(bool(_late_status(r.get("late"))) for r in records)
    records = [_shown(r) for r in records]  # the scores after any late penalty, from here on
    # What the suites declare (the rubric the grader's own collection records), so it holds even
    # when nobody was gradable.
    possible = {n: sum(r.points for r in rubric(course, n)) for n in names}
    book = None
    if layout in LMS_LAYOUTS:  # the LMS's own export, filled in; the uploads it has no row for, apart
        assert roster is not None  # an LMS layout comes with its roster (the command line requires --roster)
        book = lms_gradebook(layout, names, possible, records, roster, lms_settings(course))
        atomic_write(out / "gradebook.csv", book.text)
        atomic_write(out / "unmatched.csv", unmatched_csv(names, book.unmatched))
    else:
        atomic_write(out / "gradebook.csv", gradebook_csv(names, possible, records))
    graded_records = [class_report.from_result(r["result"]) for r in records if r["result"] is not None]
    stats = class_report.write(out, graded_records, not_graded=len(records) - len(graded_records),
                               title=f"Class report ({', '.join(names)})", isolation=isolation)
    summary = {
        "students": len(records),
        "graded_now": graded_now,
        "not_graded": graded.count(False),
        "late": late,
        "peak_worker_mib": round(peak_mib, 1),
        "isolation_warning": isolation,
        "distribution": stats["distribution"],
        "failure_rates": stats["failure_rates"],
    }
    if refused:
        summary["names_refused"] = refused
    if book is not None:
        summary["not_on_roster"] = sorted(u["student"] for u in book.unmatched)
        summary["lms_columns"] = book.columns
        if book.warnings:
            summary["lms_warnings"] = book.warnings
    late_line = f", {late} handed in late" if late else ""
    lines = [f"# Class summary: {summary['students']} students, {summary['not_graded']} not graded{late_line}", "",
             *([markdown_text(isolation), ""] if isolation else []),
             "The score distribution, each property's failure rate and the hints that fired most: "
             "[class_report.md](class_report.md)."]
    if refused:
        lines += ["", "## Names refused", "", *(f"- {markdown_text(r['reason'])}" for r in refused)]
    if book is not None and book.unmatched:
        lines += ["", "## Not on the roster (no row in the LMS gradebook; see unmatched.csv)", "",
                  *(f"- {markdown_text(u['student'])}: {markdown_text(u['reason'])}" for u in book.unmatched)]
    if summary.get("lms_warnings"):
        lines += ["", "## Check before importing", "", *(f"- {markdown_text(w)}" for w in summary["lms_warnings"])]
    atomic_write(out / "summary.md", "\n".join(lines) + "\n")
    atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    return summary
