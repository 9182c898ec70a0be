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
"""
from __future__ import annotations

import csv
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
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress

from autograder.authoring.rubric import rubric
from autograder.core.manifest import Course
from autograder.core.results import GradeResult
from autograder.core.safe_text import safe_name, safe_text
from autograder.core.uploads import SubmissionError, walk
from autograder.delivery.atomic import atomic_write
from autograder.delivery.formats import POINTS_POSSIBLE, gradebook_csv, markdown_text, to_markdown
from autograder.delivery.submissions import MAX_ZIP_BYTES, collect
from autograder.grading import forking, serve
from autograder.grading.errors import GraderError
from autograder.sandbox.zygote import Pool, SandboxError

CHUNK = 5  # students per grade at most: bounds what a failure costs, and how long progress and results wait
STUDENT_BUDGET = 1200.0  # seconds of wall clock per student in a chunk, after which the chunk is killed
DIGEST_BYTES = 4 * MAX_ZIP_BYTES  # bytes of an upload read for its digest, at most


class BatchInterrupted(Exception):
    """SIGINT or SIGTERM stopped the batch; what was recorded stays, the rest is graded by the next run."""


@dataclass
class Student:
    name: str
    source: Path
    digest: str


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
            students.append(Student(name, paths[0], _digest(paths[0])))
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


def _record(out: Path, student: Student, status: str, result: GradeResult | None, *, final: bool = True) -> None:
    status = safe_text(status)
    data = {"student": student.name, "digest": student.digest, "status": status, "final": final,
            "result": result.to_dict() if result else None}
    feedback = (to_markdown([result]) if result
                else f"## {markdown_text(student.name)}\n\nNot graded: {markdown_text(status)}\n")
    atomic_write(out / "students" / f"{student.name}.md", feedback)
    atomic_write(out / "students" / f"{student.name}.json", json.dumps(data, indent=2, ensure_ascii=False))


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
        request = json.dumps({"folders": [str(p) for p in paths], "report": str(report)}) + "\n"
        try:
            self.proc.stdin.write(request.encode())
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
        reply = json.loads(line)
        return None if reply.get("ok") else f"grader failure: {_one_line(str(reply.get('error')))}"

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
        self._pool: Pool | None = None  # the zygote the grader processes spawn their workers from
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
        if self._pool is None:
            return
        forking.import_grader()
        from autograder.grading.grade import collect_suites  # (imported just above)

        try:
            collect_suites(self.course, self.units)
        except GraderError:
            pass  # the suites cannot be collected: each chunk's grade says why
        while len(self._forked) < servers and not self.stopping.is_set():
            try:
                self._forked.append(_Server.forked(self.course, self.units, self._pool, self._forked))
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
        if self._pool is not None and self._pool.proc.poll() is not None:
            self._pool.close()
            self._pool = None
        if self._pool is None:
            self._pool = Pool(self.course)  # the batch's own, never another grade's in this process
        return self._pool

    def release(self) -> None:
        """Stop the grader processes no thread took, then the zygote (after every grader process has closed)."""
        while self._forked:
            self._forked.pop().close()
        if self._pool is not None:
            self._pool.close()

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
                _record(self.out, student, "graded", result)
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
                show_progress: bool = True, student_budget: float = STUDENT_BUDGET, gradebook: str = "default",
                roster: dict[str, dict[str, str]] | None = None, mapping: dict[str, str] | None = None) -> dict:
    """Grade every student not yet graded; return the summary (also written to ``out``)."""
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
                           layout=gradebook, roster=roster, refused=refused)


def write_gradebook(course: Course, out: Path, students: list[Student], units: list[str] | None,
                    *, graded_now: int, peak_mib: float, layout: str = "default",
                    roster: dict[str, dict[str, str]] | None = None, refused: list[dict] | None = None) -> dict:
    """gradebook.csv and the class summary (summary.json, summary.md) from the students' records;
    a refused name is a row of its own, scored 0, with the reason as its status."""
    names = [u.name for u in course.select(units)]
    refused = refused or []
    records = [json.loads((out / "students" / f"{s.name}.json").read_text(encoding="utf-8")) for s in students]
    records += [{"student": r["name"], "status": r["reason"], "result": None} for r in refused]
    # What the suites declare (their points markers), so it holds even when nobody was gradable.
    possible = {n: sum(r.points for r in rubric(course, n)) for n in names}
    totals, failures = [], Counter()
    for record in records:
        units_done = (record["result"] or {}).get("units", {})
        totals.append(sum(units_done.get(n, {}).get("score", 0) for n in names))
        for name, unit in units_done.items():
            failures.update((name, t["name"]) for t in unit["tests"] if t["status"] == "failed")
    atomic_write(out / "gradebook.csv", gradebook_csv(names, possible, records, layout=layout, roster=roster))
    maximum = sum(possible.get(n, 0) for n in names) or 1
    bins = Counter(min(int(10 * t / maximum), 9) for t in totals)
    summary = {
        "students": len(records),
        "graded_now": graded_now,
        "not_graded": sum(r["status"] != "graded" for r in records),
        "peak_worker_mib": round(peak_mib, 1),
        "distribution": {f"{10 * b}-{10 * b + 10}%": bins.get(b, 0) for b in range(10)},
        "most_failed": [{"unit": u, "property": p, "students": n} for (u, p), n in failures.most_common(10)],
    }
    if refused:
        summary["names_refused"] = refused
    if roster is not None:
        summary["not_on_roster"] = sorted(r["student"] for r in records if r["student"] not in roster)
    lines = [f"# Class summary: {summary['students']} students, {summary['not_graded']} not graded", "",
             "| score | students |", "|---|---:|", *(f"| {k} | {v} |" for k, v in summary["distribution"].items()),
             "", "## Most-failed properties", "", "| unit | property | students |", "|---|---|---:|",
             *(f"| {f['unit']} | {markdown_text(f['property'])} | {f['students']} |" for f in summary["most_failed"])]
    if refused:
        lines += ["", "## Names refused", "", *(f"- {markdown_text(r['reason'])}" for r in refused)]
    if summary.get("not_on_roster"):
        lines += ["", "## Not on the roster (not in the Canvas gradebook)", "",
                  *(f"- {markdown_text(name)}" for name in summary["not_on_roster"])]
    atomic_write(out / "summary.md", "\n".join(lines) + "\n")
    atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    return summary
