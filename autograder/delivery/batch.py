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

Regrades: a record stands for an upload *and* the grader that graded it (its fingerprint,
:mod:`.fingerprint`: suites, stand-ins, course.toml, the engine's files, library versions), so a
changed grader grades every student again, and the summary says why.

Late work (:mod:`.batch_records`): priced on the trusted points from the upload's submission time
(:func:`submission_time`: its ``timestamp.txt``, else its modification time) against the student's
due date, extensions included; the feedback, the gradebook's unit columns and totals, and its
status show the score after the penalty. The gradebook and summary: :mod:`.batch_summary`.
"""
from __future__ import annotations

import json
import math
import queue
import resource
import signal
import sys
import tempfile
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress

from autograder.core import lateness
from autograder.core.errors import Interrupted
from autograder.core.manifest import Course
from autograder.core.results import GradeResult
from autograder.trust.uploads import SubmissionError
from autograder.delivery import fingerprint as grader
from autograder.delivery.batch_records import (DIGEST_BYTES, RESERVED_NAMES, Student, discover, extensions,
                                               late, read_mapping, record, stale, submission_time)
from autograder.delivery.batch_summary import NEEDS_ATTENTION, closing_line, write_gradebook
from autograder.delivery.lms import LmsRoster
from autograder.delivery.submissions import collect
from autograder.grading import prerequisites
from autograder.core.errors import GraderError
from autograder.grading.session import GradingSession, isolation_notice
from autograder.grading.supervisor import START_ERRORS, GraderProcess, one_line

CHUNK = 5  # students per grade at most: bounds what a failure costs, and how long progress and results wait
# What the batch's modules give the callers of this one (the command line, the tests).
__all__ = ["DIGEST_BYTES", "NEEDS_ATTENTION", "RESERVED_NAMES", "BatchInterrupted", "Student", "closing_line", "discover",
           "Plan", "grade_batch", "read_mapping", "submission_time", "write_gradebook"]


class BatchInterrupted(Interrupted):
    """SIGINT or SIGTERM stopped the batch; what was recorded stays, the rest is graded by the next run."""


class _Runner:
    """Grades chunks, each batch thread with a grader process of its own, and stops them all on request."""

    def __init__(self, course: Course, out: Path, units: list[str] | None, budget: float,
                 fingerprint: dict | None = None, given: lateness.Extensions | None = None):
        self.course, self.out, self.units, self.budget = course, out, units, budget
        # What grades (every record says so), and the course's extensions (both read once per batch).
        self.fingerprint = grader.fingerprint(course) if fingerprint is None else fingerprint
        self.extensions = extensions(course) if given is None else given
        self.stopping = threading.Event()
        self._servers: dict[int, GraderProcess] = {}  # batch thread -> its grader process
        self._forked: list[GraderProcess] = []  # grader processes forked for threads that have none yet
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
                self._forked.append(GraderProcess.forked(self.course, self.units, self._zygote_alive(),
                                                         self._forked))
            except START_ERRORS:
                return

    def start_zygote(self) -> None:
        """Start the batch's zygote now: it imports torch while this process, or the first grader
        processes, import theirs."""
        with self._lock:
            try:
                self._zygote_alive()
            except START_ERRORS:
                pass  # tried again for each grader process, whose chunk records why it failed

    def _zygote_alive(self):
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

    def shutdown(self) -> None:
        """Stop every grader process (each closed, as :meth:`close` does), then the zygote."""
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()
        self.release()

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
                    server = GraderProcess.started(self.course, self.units, self._zygote_alive())
                except START_ERRORS as error:
                    return f"grader failure: the sandbox could not start: {one_line(str(error))}"
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
                    record(self.out, student, one_line(str(error)), None, fingerprint=self.fingerprint)
            if ready:
                self._grade_ready(ready, Path(tmp) / "report.json")

    def _grade_ready(self, ready: list[tuple[Student, Path]], report: Path) -> None:
        for student, result, why in self.outcomes(ready, report):
            self.record(student, result, why)

    def record(self, student: Student, result: GradeResult | None, why: str | None) -> None:
        record_outcome(self.course, self.out, self.fingerprint, self.extensions, student, result, why)

    def outcomes(self, ready: list[tuple[Student, Path]],
                 report: Path) -> list[tuple[Student, GradeResult | None, str | None]]:
        """Each collected upload of ``ready`` graded: its result, or (None, why not); nothing
        when the batch was stopped meanwhile (the next run grades them). A chunk that fails is
        graded again one student at a time, so only the culprit gets the failure. The cluster's
        workers (:mod:`.cluster`) grade through this too."""
        # One student's budget more than the chunk's students, for the grader's own start-up.
        why = self._grade([p for _, p in ready], report, self.budget * (len(ready) + 1))
        if self.stopping.is_set():
            return []  # cut short: nothing recorded, the next run grades them
        results = None
        if why is None:
            try:
                results = [GradeResult.from_dict(r) for r in json.loads(report.read_text(encoding="utf-8"))]
            except (OSError, ValueError, KeyError, TypeError):
                results, why = None, "grader failure: its report could not be read"
        if results is not None and len(results) == len(ready):
            for (student, path), result in zip(ready, results):
                result.submission = student.name  # never the temporary path
                prerequisites.annotate(self.course, result, path, stand_ins=True)  # the units it builds on
            return [(student, result, None) for (student, _), result in zip(ready, results)]
        if len(ready) > 1:  # one student's upload broke the chunk: find whose
            return [outcome for one in ready for outcome in self.outcomes([one], report)]
        return [(ready[0][0], None, why or "grader failure: a result is missing")]


def record_outcome(course: Course, out: Path, fingerprint: dict, given: lateness.Extensions, student: Student,
                   result: GradeResult | None, why: str | None) -> None:
    """A chunk's outcome for ``student`` (:meth:`_Runner.outcomes`), recorded: graded (priced if
    late), or a grader failure, never final."""
    if result is not None:
        record(out, student, "graded", result, fingerprint=fingerprint,
               late=late(course, student, result.to_dict(), given))
    else:
        record(out, student, why or "grader failure: a result is missing", None, final=False,
               fingerprint=fingerprint)


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


@dataclass
class Plan:
    """What a batch run grades: the students, the names refused, the grader's fingerprint and the
    course's extensions (both read once), who must be graded (``todo``) and why those recorded
    before are graded again (reason -> how many). The local batch and the cluster's share it."""
    students: list[Student]
    refused: list[dict]
    fingerprint: dict
    extensions: lateness.Extensions
    todo: list[Student]
    regraded: dict[str, int]

    @classmethod
    def of(cls, course: Course, submissions: Path, out: Path, units: list[str] | None,
           mapping: dict[str, str] | None) -> "Plan":
        students, refused = discover(submissions, mapping)
        for entry in refused:
            print(f"{course.brand.command}: {entry['reason']}", file=sys.stderr)
        course.select(units)  # an unknown unit: the caller's error, before anything is graded
        now, given = grader.fingerprint(course), extensions(course)  # (a bad extensions file: before grading)
        why = {s.name: stale(out, s, now) for s in students}
        todo = [s for s in students if why[s.name]]
        regraded: dict[str, int] = {}
        for s in todo:
            if why[s.name] != "new":
                regraded[str(why[s.name])] = regraded.get(str(why[s.name]), 0) + 1
        return cls(students, refused, now, given, todo, regraded)


def grade_batch(course: Course, submissions: Path, out: Path, *, jobs: int = 1, units: list[str] | None = None,
                show_progress: bool = True, student_budget: float | None = None, gradebook: str = "default",
                roster: LmsRoster | None = None,
                mapping: dict[str, str] | None = None) -> dict:
    """Grade every student not yet graded; return the summary (also written to ``out``).
    ``student_budget``: seconds per student in a chunk (default: the course's ``student_budget``)."""
    student_budget = course.limits.student_budget if student_budget is None else student_budget
    plan = Plan.of(course, submissions, out, units, mapping)
    students, refused, now, todo = plan.students, plan.refused, plan.fingerprint, plan.todo
    runner = _Runner(course, out, units, student_budget, now, plan.extensions)
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
        left = sum(stale(out, s, now) is not None for s in students)
        raise BatchInterrupted(f"stopped: {len(students) - left} of {len(students)} students are recorded; "
                               f"run the same command again to grade the {left} left")
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return write_gradebook(course, out, students, units, graded_now=len(todo), peak_mib=peak_mib,
                           layout=gradebook, roster=roster, refused=refused,
                           isolation=isolation_notice(), regraded=plan.regraded)

