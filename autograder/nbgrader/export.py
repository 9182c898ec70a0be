"""The nbgrader pipeline's export: nbgrader's CSV, with a ``status`` column and a row for every
student and unit it would leave out (:func:`add_status`).

Only graded work gets a number: nbgrader's export writes 0 for a notebook never submitted, which an
LMS import would take for a grade; here its scores are blank, and so are those of a student the
last ``collect`` refused (a link, two copies of one notebook...), who would otherwise be missing
from the CSV altogether. A corrupt notebook is an entry (graded as the untouched stubs, 0).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat

from autograder.core import lateness
from autograder.core.safe_text import csv_cell, safe_name

REPORT = "class_report"  # the class report's folder, in the course folder
# The students the last collect refused (student -> the intake's status), in the course folder:
# the export gives each a row per unit, blank, with that status, so no refused student is missing.
NOT_COLLECTED = "not_collected.json"


def _db_url(course_dir: Path) -> str:
    return "sqlite:///" + str(course_dir / "gradebook.db")


def _status(course_dir: Path, student: str, unit: str) -> str:
    path = course_dir / "submitted" / student / unit / f"{unit}.ipynb"
    if not path.is_file():
        return "not submitted"
    try:
        nbformat.read(str(path), as_version=4)
    except Exception as error:  # noqa: BLE001 - any unreadable notebook is the student's status
        return f"unreadable notebook ({type(error).__name__}): graded as the untouched stubs"
    return "graded"


def _lateness(course_dir: Path) -> dict[tuple[str, str], tuple[int, float]]:
    """{(student, assignment): (started days late, penalty)} of every late submission in the gradebook."""
    from nbgrader.api import Gradebook  # (here: the student bundle ships this module, not nbgrader)

    late = {}
    with Gradebook(_db_url(course_dir)) as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                seconds = submission.total_seconds_late
                if seconds > 0:
                    late[(submission.student.id, assignment.name)] = (lateness.days_late(seconds),
                                                                      float(submission.late_submission_penalty or 0))
    return late


def _isolation(course_dir: Path) -> str | None:
    """The sandbox mode's notice recorded by the last autograde (None: full mode, or none ran)."""
    try:
        return json.loads((course_dir / REPORT / "class_report.json").read_text(encoding="utf-8"))["isolation_warning"]
    except (OSError, ValueError, KeyError):
        return None


def _not_collected(course_dir: Path) -> dict[str, str]:
    """The students the last collect refused: student -> why."""
    try:
        data = json.loads((course_dir / NOT_COLLECTED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def add_status(course_dir: Path, csv_path: Path) -> None:
    """Add a ``status`` column to nbgrader's CSV (``graded; 1 day late: -2.6 points`` for late
    work), a row (score 0, graded as the untouched stubs) for every submitted notebook nbgrader
    could not grade at all, so a corrupt upload is an entry, not a log line, and a row per unit for
    every student the last collect refused. Only graded work gets a number: a notebook not
    submitted and a refused student have blank scores (nbgrader's export writes 0), so no LMS
    import takes them for a grade. Every text cell is written through
    :func:`~autograder.core.safe_text.csv_cell`."""
    with csv_path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    fields = list(rows[0]) if rows else ["assignment", "student_id", "score", "max_score"]
    seen = {(r["student_id"], r["assignment"]) for r in rows}
    late = _lateness(course_dir)
    isolation = _isolation(course_dir)
    blank = [k for k in ("raw_score", "late_submission_penalty", "score") if k in fields]
    for r in rows:
        r["status"] = _status(course_dir, r["student_id"], r["assignment"])
        if r["status"] == "not submitted":
            r.update(dict.fromkeys(blank, ""))
        if r["status"] == "graded" and (r["student_id"], r["assignment"]) in late:
            r["status"] += "; " + lateness.note(*late[(r["student_id"], r["assignment"])])
        if r["status"].startswith("graded") and isolation:
            r["status"] += "; " + isolation
    submitted = course_dir / "submitted"
    for folder in sorted(submitted.glob("*/*")) if submitted.is_dir() else []:
        student, unit = folder.parent.name, folder.name
        if (student, unit) not in seen:
            rows.append({**dict.fromkeys(fields, ""), "assignment": unit, "student_id": student, "score": "0.0",
                         "status": _status(course_dir, student, unit)})
            seen.add((student, unit))
    maxima = {r["assignment"]: r.get("max_score", "") for r in rows}
    for student, reason in _not_collected(course_dir).items():
        for unit in sorted({r["assignment"] for r in rows} | {p.name for p in (course_dir / "source").glob("*")
                                                               if p.is_dir()}):
            if (student, unit) not in seen:
                rows.append({**dict.fromkeys(fields, ""), "assignment": unit, "student_id": student,
                             "max_score": maxima.get(unit, ""), "status": f"not collected: {safe_name(reason)}"})
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*fields, "status"])
        writer.writeheader()
        # A student id is an inbox folder's name, which the student may have chosen: never a formula.
        writer.writerows({k: csv_cell(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows)
