"""Trusted grading of files extracted from notebooks: the CLI's ``grade`` in a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.core.manifest import Course


def cli_command() -> list[str]:
    return [sys.executable, "-m", "autograder.cli"]


def grade_sources(course: Course, sources: dict[str, dict[str, str]], units: list[str]) -> dict[str, dict]:
    """Grade {submission: {unit: file text}} with the CLI's ``grade`` (its default ``--jobs``)
    in a subprocess; returns {submission: result dict}. Raises RuntimeError if it fails."""
    holder = tempfile.TemporaryDirectory(prefix="attn-nbgrader-")
    root = Path(holder.name)
    folders = []
    for i, (name, files) in enumerate(sources.items()):
        folder = root / f"s{i}"
        folder.mkdir()
        for unit, text in files.items():
            (folder / course.units[unit].file).write_text(text, encoding="utf-8")
        folders.append(folder)
    out = root / "result.json"
    command = [*cli_command(), "grade", *map(str, folders), "--format", "json", "-o", str(out)]
    for unit in units:
        command += ["--unit", unit]
    try:
        process = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 errors="replace", cwd=str(course.root))
        if process.returncode != 0 or not out.is_file():
            raise RuntimeError(f"grading failed (exit {process.returncode}):\n{process.stdout[-3000:]}")
        data = json.loads(out.read_text(encoding="utf-8"))
        data = data if isinstance(data, list) else [data]
        return dict(zip(sources, data))
    finally:
        holder.cleanup()


def test_scores(result: dict, unit: str) -> dict[str, dict]:
    """test id -> the CLI's record, for ``unit`` of one result."""
    return {t["id"]: t for t in result["units"][unit]["tests"]}


def hidden_report(result: dict, unit: str) -> tuple[str, int]:
    """The student-facing text of the hidden cell: property names and
    counterexamples only; and how many properties failed."""
    record = result["units"][unit]
    tests = [t for t in record["tests"] if t["visibility"] == "hidden"]
    failed = [t for t in tests if t["status"] == "failed"]
    score, total = sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)
    lines = [f"hidden properties: {score:g} / {total:g} points"]
    if record["status"] != "graded" and record["message"]:
        lines.append(f"{record['status']}: {record['message']}")
    for t in tests:
        if t["status"] == "failed":
            lines.append(f"  FAILED {t['name']} (0 / {t['max_score']:g}): {t['output']}")
    passed = [t for t in tests if t["status"] == "passed"]
    if passed:
        lines.append(f"  passed: {len(passed)} properties")
    return "\n".join(lines), len(failed)


def visible_report(result: dict, unit: str, test_id: str) -> str:
    record = result["units"][unit]
    t = test_scores(result, unit).get(test_id)
    if t is None:
        return f"not graded: {record['message'] or 'the test did not run'}"
    text = f"{t['status']}: {t['name']} ({t['score']:g} / {t['max_score']:g})"
    return text + (f": {t['output']}" if t["status"] == "failed" and t["output"] else "")


def all_zero_warning(results: dict[str, dict]) -> str | None:
    """The warning for a class in which every student scored 0 in every unit graded (``results``:
    {student: {"units": {unit: record}}}), or None. That is almost never the class's work: the
    notebooks' answer cells were not filled (the released stubs handed back), or they are not
    the notebooks the pipeline reads (``<unit>/<unit>.ipynb``: a renamed notebook is not collected)."""
    units = [record for result in results.values() for record in result.get("units", {}).values()]
    if not units or any(r.get("score", 0) for r in units) or not any(r.get("max_score", 0) for r in units):
        return None
    names = sorted({u for result in results.values() for u in result.get("units", {})})
    return (f"warning: every one of the {len(results)} students scored 0 in every unit graded ({', '.join(names)}): "
            "check that the notebooks' answer cells were filled in (a blank stub scores 0) and that each "
            "notebook is named <unit>.ipynb in the student's <unit>/ folder, as released")
