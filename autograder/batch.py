"""Grade a whole class: one sub-folder or zip per student.

Students are graded in chunks by parallel grader processes (``jobs``); each
student's result is written atomically as soon as its chunk finishes, with
the hash of what was handed in, so an interrupted batch resumes where it
stopped and never grades the same submission twice. The gradebook and the
summary are rebuilt from the per-student files at the end.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress

from .formats import to_markdown
from .manifest import Course
from .results import GradeResult
from .submissions import SubmissionError, collect

CHUNK = 5  # students per grader process: amortizes its start-up, bounds what a crash can cost


@dataclass
class Student:
    name: str
    source: Path
    digest: str


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    for file in files:
        sha.update(str(file.relative_to(path.parent)).encode())
        sha.update(file.read_bytes())
    return sha.hexdigest()


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8", suffix=".tmp") as handle:
        handle.write(text)
    os.replace(handle.name, path)


def discover(submissions: Path) -> list[Student]:
    entries = sorted(p for p in submissions.iterdir() if not p.name.startswith("."))
    return [Student(p.stem if p.suffix == ".zip" else p.name, p, _digest(p)) for p in entries]


def _done(out: Path, student: Student) -> bool:
    record = out / "students" / f"{student.name}.json"
    if not record.is_file():
        return False
    try:
        return json.loads(record.read_text(encoding="utf-8")).get("digest") == student.digest
    except json.JSONDecodeError:  # a torn write from an older run: grade again
        return False


def _record(out: Path, student: Student, status: str, result: GradeResult | None) -> None:
    data = {"student": student.name, "digest": student.digest, "status": status,
            "result": result.to_dict() if result else None}
    feedback = to_markdown([result]) if result else f"## {student.name}\n\nNot graded: {status}\n"
    _atomic_write(out / "students" / f"{student.name}.md", feedback)
    _atomic_write(out / "students" / f"{student.name}.json", json.dumps(data, indent=2, ensure_ascii=False))


def _grade_chunk(course: Course, out: Path, chunk: list[Student], units: list[str] | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ready: list[tuple[Student, Path]] = []
        for student in chunk:
            try:
                ready.append((student, collect(student.source, Path(tmp) / student.name, course)))
            except SubmissionError as error:
                _record(out, student, str(error), None)
        if not ready:
            return
        report = Path(tmp) / "report.json"
        unit_args = [arg for unit in units or [] for arg in ("--unit", unit)]
        proc = subprocess.run(
            [sys.executable, "-m", "autograder.cli", "grade", *(str(p) for _, p in ready), *unit_args,
             "--format", "json", "-o", str(report)],
            cwd=course.root, capture_output=True, text=True, env={**os.environ, "ATTN_COURSE_ROOT": str(course.root)},
        )
        if proc.returncode != 0:
            for student, _ in ready:
                _record(out, student, f"grader failure (exit {proc.returncode}): {proc.stderr.strip()[-300:]}", None)
            return
        data = json.loads(report.read_text(encoding="utf-8"))
        for (student, _), result in zip(ready, data if isinstance(data, list) else [data]):
            _record(out, student, "graded", GradeResult.from_dict(result))


def grade_batch(course: Course, submissions: Path, out: Path, *, jobs: int = 1, units: list[str] | None = None,
                show_progress: bool = True) -> dict:
    """Grade every student not yet graded; return the summary (also written to ``out``)."""
    students = discover(submissions)
    todo = [s for s in students if not _done(out, s)]
    chunks = [todo[i : i + CHUNK] for i in range(0, len(todo), CHUNK)]
    with Progress(disable=not show_progress) as progress, ThreadPoolExecutor(max_workers=jobs) as pool:
        task = progress.add_task("grading", total=len(todo))
        futures = {pool.submit(_grade_chunk, course, out, chunk, units): len(chunk) for chunk in chunks}
        for future in as_completed(futures):
            future.result()
            progress.advance(task, futures[future])
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return write_gradebook(course, out, students, units, graded_now=len(todo), peak_mib=peak_mib)


def write_gradebook(course: Course, out: Path, students: list[Student], units: list[str] | None,
                    *, graded_now: int, peak_mib: float) -> dict:
    names = [u.name for u in course.select(units)]
    records = [json.loads((out / "students" / f"{s.name}.json").read_text(encoding="utf-8")) for s in students]
    possible = {}
    for record in records:
        for name, unit in ((record["result"] or {}).get("units") or {}).items():
            possible[name] = unit["max_score"]
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(["student", "status", *names, "total"])
    writer.writerow(["Points Possible", "", *(f"{possible.get(n, 0):g}" for n in names), f"{sum(possible.get(n, 0) for n in names):g}"])
    totals, failures = [], Counter()
    for record in records:
        units_done = (record["result"] or {}).get("units", {})
        scores = [units_done.get(n, {}).get("score", 0) for n in names]
        totals.append(sum(scores))
        writer.writerow([record["student"], record["status"], *(f"{s:g}" for s in scores), f"{sum(scores):g}"])
        for name, unit in units_done.items():
            failures.update((name, t["name"]) for t in unit["tests"] if t["status"] == "failed")
    _atomic_write(out / "gradebook.csv", table.getvalue())
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
    lines = [f"# Class summary: {summary['students']} students, {summary['not_graded']} not graded", "",
             "| score | students |", "|---|---:|", *(f"| {k} | {v} |" for k, v in summary["distribution"].items()),
             "", "## Most-failed properties", "", "| unit | property | students |", "|---|---|---:|",
             *(f"| {f['unit']} | {f['property']} | {f['students']} |" for f in summary["most_failed"])]
    _atomic_write(out / "summary.md", "\n".join(lines) + "\n")
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    return summary
