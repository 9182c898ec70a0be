"""A batch's gradebook and summary, rebuilt from the students' records at the end of every run.

Only graded work gets a number: a student whose upload was refused (a name clash, a name the
gradebook uses, a corrupt zip, no unit files...) or not graded (a grader failure, a budget run
out) is a row with blank scores and the reason as its status, in ``gradebook.csv`` and in the
LMS layouts alike, never a 0 an import would take for a grade. The summary lists each of them
with the reason, the uploads no roster row holds, the roster's students with no upload, and why
students were graded again (``grader changed: ...``); ``needs_attention`` counts what an
instructor must look at (the command line's exit code says so).
"""
from __future__ import annotations

import json
from pathlib import Path

from autograder.authoring.rubric import rubric
from autograder.core.manifest import Course
from autograder.delivery import batch_records as records_of
from autograder.delivery import class_report
from autograder.delivery.atomic import atomic_write
from autograder.delivery.formats import gradebook_csv, markdown_text
from autograder.delivery.lms import LMS_LAYOUTS, LmsRoster, lms_gradebook, unmatched_csv
from autograder.delivery.lms_settings import lms_settings

LISTED = 10  # students named in the command line's closing line, at most
NEEDS_ATTENTION = 4  # the command line's exit code when ``needs_attention`` is not 0 (README, exit codes)


def write_gradebook(course: Course, out: Path, students: list[records_of.Student], units: list[str] | None,
                    *, graded_now: int, peak_mib: float, layout: str = "default",
                    roster: LmsRoster | None = None, refused: list[dict] | None = None,
                    isolation: str | None = None, regraded: dict[str, int] | None = None) -> dict:
    """gradebook.csv and the class summary (summary.json, summary.md) from the students' records;
    a refused name is a row of its own, blank, with the reason as its status. ``isolation``:
    the sandbox mode's notice (None in full mode), recorded in the summary; ``regraded``: why the
    students graded again this run were (reason -> how many). The class report
    (:mod:`.class_report`) is written beside them."""
    names = [u.name for u in course.select(units)]
    refused = refused or []
    given = records_of.extensions(course)
    records = []
    for student in students:
        record = records_of.read_record(out, student.name) or {"student": student.name, "status": "not graded: its "
                                                               "record cannot be read", "result": None}
        records.append(records_of.reprice(course, out, student, record, given))
    records += [{"student": r["name"], "status": r["reason"], "result": None} for r in refused]
    late = sum(bool(records_of.late_status(r.get("late"))) for r in records)
    penalties = {r["student"]: r.get("late") for r in records}
    records = [records_of.shown(r) for r in records]  # the scores after any late penalty, from here on
    not_graded = [{"student": r["student"], "reason": r["status"]} for r in records if r.get("result") is None]
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
    graded_records = [class_report.from_result(r["result"], penalties.get(r["student"]))
                      for r in records if r["result"] is not None]
    stats = class_report.write(out, graded_records, not_graded=len(records) - len(graded_records),
                               title=class_report.title("Class report", names, list(course.units)),
                               isolation=isolation)
    summary: dict = {
        "students": len(records),
        "graded_now": graded_now,
        "not_graded": len(not_graded),
        "late": late,
        "peak_worker_mib": round(peak_mib, 1),
        "isolation_warning": isolation,
        "median_percent": stats["median_percent"],
        "distribution": stats["distribution"],
        "failure_rates": stats["failure_rates"],
        "not_graded_students": not_graded,
    }
    if regraded:
        summary["regraded"] = regraded
    if refused:
        summary["names_refused"] = refused
    unmatched: list[dict] = []
    if book is not None:
        unmatched = [u for u in book.unmatched if u["student"] not in {n["student"] for n in not_graded}]
        summary["not_on_roster"] = sorted(u["student"] for u in book.unmatched)
        summary["no_upload"] = book.no_upload
        summary["lms_columns"] = book.columns
        if book.warnings:
            summary["lms_warnings"] = book.warnings
    summary["needs_attention"] = len(not_graded) + len(unmatched)
    late_line = f", {late} handed in late" if late else ""
    lines = [f"# Class summary: {summary['students']} students, {summary['not_graded']} not graded{late_line}", "",
             *([markdown_text(isolation), ""] if isolation else []),
             "The score distribution, each property's failure rate and the hints that fired most: "
             "[class_report.md](class_report.md)."]
    if regraded:
        lines += ["", "## Graded again", "", *(f"- {n} student{'s' if n != 1 else ''}: {markdown_text(why)}"
                                              for why, n in regraded.items())]
    if not_graded:
        lines += ["", "## Not graded (blank in every gradebook)", "",
                  *(f"- {markdown_text(n['student'])}: {markdown_text(n['reason'])}" for n in not_graded)]
    if book is not None and book.unmatched:
        lines += ["", "## Not on the roster (no row in the LMS gradebook; see unmatched.csv)", "",
                  *(f"- {markdown_text(u['student'])}: {markdown_text(u['reason'])}" for u in book.unmatched)]
    if book is not None and book.no_upload:
        lines += ["", "## On the roster, no upload (blank unless the LMS holds a grade)", "",
                  *(f"- {markdown_text(s)}" for s in book.no_upload)]
    if summary.get("lms_warnings"):
        lines += ["", "## Check before importing", "", *(f"- {markdown_text(w)}" for w in summary["lms_warnings"])]
    atomic_write(out / "summary.md", "\n".join(lines) + "\n")
    atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    return summary


def closing_line(summary: dict, gradebook: Path, summary_md: Path) -> str:
    """The command line's last words: counts, each student not graded with the reason (the first
    :data:`LISTED`), the uploads no roster row holds, and where the rest is."""
    late = f", {summary['late']} handed in late" if summary.get("late") else ""
    regraded = sum((summary.get("regraded") or {}).values())
    again = f" ({regraded} because {', '.join(summary['regraded'])})" if regraded and any(
        why.startswith("grader changed") for why in summary["regraded"]) else ""
    parts = [f"{summary['students']} students ({summary['graded_now']} graded now{again}, "
             f"{summary['not_graded']} not graded{late})"]
    missing = summary.get("not_graded_students") or []
    if missing:
        shown = "; ".join(f"{n['student']}: {n['reason']}" for n in missing[:LISTED])
        parts.append(f"not graded, blank in the gradebook: {shown}"
                     + (f"; and {len(missing) - LISTED} more" if len(missing) > LISTED else ""))
    if summary.get("not_on_roster"):
        parts.append(f"{len(summary['not_on_roster'])} uploads not on the roster: "
                     f"{', '.join(summary['not_on_roster'][:LISTED])} (unmatched.csv)")
    if summary.get("no_upload"):
        parts.append(f"{len(summary['no_upload'])} on the roster with no upload")
    return "; ".join(parts) + f"; see {gradebook} and {summary_md}"
