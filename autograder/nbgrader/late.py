"""Late work in the nbgrader pipeline: due dates into nbgrader's gradebook, each notebook's
submission time for ``collect``, and the penalty priced on the trusted points after the re-scoring
(:mod:`autograder.core.lateness`, the policy every path applies), with the course's per-student
extensions (``[late] extensions``) written into nbgrader's gradebook as its own.

A grade is a function of the notebook's points (the trusted autograded ones and those given in
formgrader), its one submission time (nbgrader's, from ``timestamp.txt``), its due date (the
manifest's, extended) and the policy, whatever the order of the steps: nbgrader stores a penalty as
points, so every step that shows one (``autograde``, ``feedback``, ``export``) prices it again from
the gradebook as it stands (:func:`reprice`). Manual points given after ``autograde`` are priced by
the next ``feedback`` or ``export``, as they would be by another ``autograde``.
"""
from __future__ import annotations

import datetime
from pathlib import Path

from autograder.core import lateness
from autograder.core.manifest import Course
from autograder.trust.uploads import read_regular


def write_due_dates(db_url: str, course: Course, units: list[str]) -> None:
    """Each unit's due date from the manifest into nbgrader's gradebook (none where the unit has
    none): the manifest is the one source, so a date set by hand in nbgrader is replaced. nbgrader
    reckons a submission's lateness from it (with any extension given in formgrader)."""
    from nbgrader.api import Gradebook, MissingEntry  # (here: the student bundle ships this module, not nbgrader)

    with Gradebook(db_url) as gb:
        for unit in units:
            try:
                assignment = gb.find_assignment(unit)
            except MissingEntry:
                continue  # not generated yet
            assignment.duedate = lateness.utc_naive(course.units[unit].due)
        gb.db.commit()


def _timestamp(notebook: Path) -> str:
    """When it was handed in, for nbgrader's late penalties: a ``timestamp.txt`` beside the
    notebook in the inbox (nbgrader's exchange writes one; read as the intake reads, never
    through a link, at most 64 bytes), else the notebook's modification time."""
    given = read_regular(notebook.parent / lateness.TIMESTAMP, 64)
    if given is not None:
        return given.decode("utf-8", "replace").strip()
    when = datetime.datetime.fromtimestamp(notebook.lstat().st_mtime, datetime.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def write_penalties(db_url: str, course: Course, pairs: list[tuple[str, str]] | None = None) -> dict[tuple, tuple[int, float]]:
    """The late penalty of each (student, unit) notebook (``pairs``; None: every submitted notebook
    of a course unit in the gradebook), from its points as they stand: written after
    :func:`write_points`, as the notebook's ``late_submission_penalty`` (which nbgrader's feedback
    and export subtract); returns {(student, unit): (started days late, penalty)} of the late ones.

    nbgrader's own AssignLatePenalties is off in the pipeline's autograde: it would have priced the
    full marks nbgrader gives unexecuted test cells (10% of 62 instead of 10% of the trusted 26).
    The points are the notebook's score once re-scored: the trusted test cells' points, and any
    written answer scored in formgrader (priced again by every step that shows the penalty, so the
    order of grading and autograding never changes it). The lateness is nbgrader's
    (``timestamp.txt`` against the due date plus the extension: the course's ``[late] extensions``
    file where it names the student, written into nbgrader's gradebook, else any given in
    formgrader); the price is the manifest's ``[late]`` policy."""
    from nbgrader.api import Gradebook, MissingEntry

    late = {}
    extensions = lateness.Extensions.load(course.root, course.late)
    with Gradebook(db_url) as gb:
        if pairs is None:
            pairs = [(submission.student.id, assignment.name) for assignment in gb.assignments
                     if assignment.name in course.units for submission in assignment.submissions]
        for student, unit in pairs:
            try:
                submission = gb.find_submission(unit, student)
                submitted = gb.find_submission_notebook(unit, unit, student)
            except MissingEntry:
                continue  # nbgrader never recorded it (write_points said so)
            due = course.units[unit].due
            if due is not None and extensions.find(unit, student) is not None:
                # The course's extension, as nbgrader's own (formgrader's): its due date is the
                # assignment's plus the submission's extension, which its feedback and export show.
                submission.extension = extensions.due(unit, due, student) - due
            seconds = submission.total_seconds_late
            penalty = course.late.penalty(submitted.score, seconds)
            submitted.late_submission_penalty = penalty or None  # as nbgrader leaves a notebook on time
            if seconds > 0:
                late[(student, unit)] = (lateness.days_late(seconds), penalty)
        gb.db.commit()
    return late


def reprice(db_url: str, course: Course) -> dict[tuple, tuple[int, float]]:
    """Every submitted notebook's penalty priced again from the gradebook as it stands (the manifest's
    due dates written again, then :func:`write_penalties` on every notebook): run before nbgrader's
    feedback and export, so points given in formgrader since the last ``autograde`` are priced as an
    ``autograde`` would price them."""
    write_due_dates(db_url, course, list(course.units))
    return write_penalties(db_url, course)


def after_penalty(graded: dict[str, dict], late: dict[tuple, tuple[int, float]],
                  policy: lateness.LatePolicy) -> dict[str, dict]:
    """student -> the ``late`` section the class report reads (unit -> its score after the penalty):
    the trusted score priced by ``policy`` for the days :func:`write_penalties` found. The report
    holds the trusted points only, so its penalty is theirs (the gradebook's also prices the points
    given in formgrader)."""
    def priced(score: float, days: int) -> float:
        return round(max(0.0, score - policy.penalty(score, days * lateness.DAY)), 4)

    return {student: {"units": {unit: {"score": priced(graded[student]["units"][unit]["score"], days)}
                                for (whose, unit), (days, _penalty) in late.items() if whose == student}}
            for student in graded}
