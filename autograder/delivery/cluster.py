"""Grade a whole class on a Dask distributed cluster (``grade-batch --scheduler ADDRESS``).

The client (this process) does what a local batch does before and after grading: it finds the
students and who must be graded (:class:`~autograder.delivery.batch.Plan`), takes each upload
through the one intake (:func:`~autograder.delivery.submissions.collect`: a refusal is recorded
here, as locally), and writes every record, the gradebook and the summary, once, from the
results. Grading is one task per student: the collected unit files' bytes go to a worker, which
grades them as a local batch thread grades a chunk of one (:meth:`_Runner.outcomes
<autograder.delivery.batch._Runner.outcomes>`: its own grader process and sandbox zygote, kept
for the worker's next task, under the same budget). So a student's record is the one ``-j 1``
writes, whichever node graded it.

Every node needs the same install and the same course (its root at the client's path, or named
by the worker's ``$AUTOGRADER_COURSE_ROOT``): a worker whose grader's fingerprint
(:mod:`.fingerprint`) differs from the client's grades nothing and says which parts differ, a
grader failure the next run grades again. Dask is imported here only, when the command asks for it.
"""
from __future__ import annotations

import os
import resource
import tempfile
from pathlib import Path

from autograder.core.manifest import Course, load_course
from autograder.core.results import GradeResult
from autograder.trust.uploads import SubmissionError
from autograder.delivery import fingerprint as grader
from autograder.delivery.batch import BatchInterrupted, Plan, Student, _Runner, record_outcome
from autograder.grading.supervisor import one_line
from autograder.delivery.batch_records import record
from autograder.delivery.batch_summary import write_gradebook
from autograder.delivery.lms import LmsRoster
from autograder.delivery.submissions import collect
from autograder.grading.session import isolation_notice

_RUNNERS: dict[tuple, _Runner] = {}  # on a worker: (course root, units, budget) -> its runner, kept between tasks


def grade_on_worker(root: str, units: list[str] | None, budget: float, expected: dict, student: Student,
                    files: dict[str, bytes]) -> dict:
    """On a worker: grade one student's collected unit files. ``{"result": ...}`` or
    ``{"why": ...}``, with the worker's isolation notice and peak memory."""
    course = load_course(Path(os.environ.get("AUTOGRADER_COURSE_ROOT") or root))
    key = (str(course.root), tuple(units or ()), budget)
    if key not in _RUNNERS:
        _RUNNERS[key] = _Runner(course, Path(tempfile.gettempdir()), units, budget)
    runner = _RUNNERS[key]
    outcome: dict = {"warning": runner.session.notice}
    if runner.fingerprint["digest"] != expected["digest"]:
        differs = grader.reason(grader.changed(expected, runner.fingerprint)).removeprefix("grader changed: ")
        return {**outcome, "why": f"grader failure: worker's grader differs from the client's: {differs}"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "subs" / "0000"
        folder.mkdir(parents=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
        graded = runner.outcomes([(student, folder)], Path(tmp) / "report.json")
    outcome["warning"] = runner.session.notice
    outcome["peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if not graded:
        return {**outcome, "why": "grader failure: the worker stopped"}
    _, result, why = graded[0]
    return {**outcome, "result": result.to_dict()} if result is not None else {**outcome, "why": why}


def release_runners() -> int:
    """On a worker: stop the grader processes and zygotes its tasks kept."""
    count = len(_RUNNERS)
    while _RUNNERS:
        _RUNNERS.popitem()[1].shutdown()
    return count


def grade_batch_cluster(course: Course, submissions: Path, out: Path, scheduler: str, *,
                        units: list[str] | None = None, show_progress: bool = True,
                        student_budget: float | None = None, gradebook: str = "default",
                        roster: LmsRoster | None = None, mapping: dict[str, str] | None = None) -> dict:
    """:func:`~autograder.delivery.batch.grade_batch`, each student graded on the cluster whose
    scheduler is at ``scheduler``; return the summary (also written to ``out``)."""
    from distributed import Client, as_completed
    from rich.progress import Progress

    budget = course.limits.student_budget if student_budget is None else student_budget
    plan = Plan.of(course, submissions, out, units, mapping)
    warnings: list[str] = []
    peak = 0.0
    with Client(scheduler) as client, Progress(disable=not show_progress) as progress:
        task = progress.add_task("grading", total=len(plan.todo))
        futures = {}
        with tempfile.TemporaryDirectory() as tmp:
            for i, student in enumerate(plan.todo):
                try:
                    folder = collect(student.source, Path(tmp) / f"{i:04d}", course)
                except SubmissionError as error:
                    record(out, student, one_line(str(error)), None, fingerprint=plan.fingerprint)
                    progress.advance(task)
                    continue
                files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
                future = client.submit(grade_on_worker, str(course.root), units, budget, plan.fingerprint,
                                       student, files, pure=False, key=f"grade-{i:05d}-{os.getpid()}")
                futures[future] = student
        try:
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except Exception as error:  # the task itself failed (a worker lost, say): graded again next run
                    outcome = {"why": f"grader failure: the cluster's task failed: {one_line(repr(error))}"}
                result = GradeResult.from_dict(outcome["result"]) if "result" in outcome else None
                record_outcome(course, out, plan.fingerprint, plan.extensions, futures[future], result,
                               outcome.get("why"))
                if outcome.get("warning") and outcome["warning"] not in warnings:
                    warnings.append(outcome["warning"])
                peak = max(peak, outcome.get("peak_mib", 0.0))
                progress.advance(task)
        except KeyboardInterrupt:
            client.cancel(list(futures))
            left = sum(1 for f in futures if not f.done())
            raise BatchInterrupted(f"stopped: {left} students were not graded; run the same command again "
                                   "to grade them") from None
        finally:
            client.run(release_runners)
    return write_gradebook(course, out, plan.students, units, graded_now=len(plan.todo), peak_mib=peak,
                           layout=gradebook, roster=roster, refused=plan.refused,
                           isolation=warnings[0] if warnings else isolation_notice(), regraded=plan.regraded)
