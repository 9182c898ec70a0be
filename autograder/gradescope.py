"""Gradescope: the autograder zip, and the program that runs inside it.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once
per image and ``run_autograder`` once per submission; the submission lies in
``/autograder/submission`` and the results go to
``/autograder/results/results.json`` (schema:
https://gradescope-autograders.readthedocs.io/en/latest/specs/). Set
``ATTN_GRADESCOPE_ROOT`` to use another root (the tests do).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
import zipfile
from pathlib import Path

from .grading import grade
from .manifest import Course, load_course
from .results import GradeResult
from .submissions import SubmissionError, collect
from .versions import requirement

EXPLANATION = (
    "Public tests are visible now. Hidden properties count too: their results appear "
    "when scores are published, so passing every visible test does not mean full marks."
)

SETUP_SH = """#!/usr/bin/env bash
# Runs once when Gradescope builds the image.
set -euo pipefail
apt-get update
apt-get install -y python3.11 python3.11-venv
python3.11 -m venv /autograder/venv
# torch first, as the CPU wheel: a looser requirement would pull a multi-GB CUDA build.
# Both pins are the exporting grader's own versions (autograder.versions).
/autograder/venv/bin/pip install {torch} --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install numpy {hypothesis} pytest rich safetensors
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Runs once per submission. The grader writes results.json only after grading finishes.
ROOT="${ATTN_GRADESCOPE_ROOT:-/autograder}"
cd "$ROOT/source" || exit 1
exec "${ATTN_PYTHON:-/autograder/venv/bin/python}" -m autograder.gradescope
"""


def to_gradescope(result: GradeResult, execution_time: float) -> dict:
    """The results.json of one graded submission."""
    tests, notes, skipped = [], [EXPLANATION], 0
    for number, unit in enumerate(result.units.values(), start=1):
        if unit.message:
            notes.append(f"{unit.name}: {unit.message}")
        for index, test in enumerate(unit.tests, start=1):
            if test.status == "skipped":  # worth nothing on every machine; say so once
                skipped += 1
                continue
            tests.append({
                "name": f"{unit.title}: {test.name}",
                "number": f"{number}.{index}",
                "score": test.score,
                "max_score": test.max_score,
                "status": test.status,
                "output": test.output,
                "tags": [unit.name],
                "visibility": "visible" if test.visibility == "visible" else "after_published",
            })
    if skipped:
        notes.append(f"{skipped} informational checks (worth no points) were skipped on this machine.")
    return {
        "score": result.score,
        "execution_time": round(execution_time),
        "output": "\n".join(notes),
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def _failed_submission(message: str, execution_time: float) -> dict:
    return {"score": 0.0, "execution_time": round(execution_time), "output": f"{message}\n{EXPLANATION}",
            "stdout_visibility": "hidden", "tests": []}


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8") as handle:
        handle.write(text)
    os.replace(handle.name, path)


def run(root: Path, course: Course) -> dict:
    """Grade ``root/submission`` and write ``root/results/results.json``."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            folder = collect(root / "submission", Path(tmp) / "submission", course)
        except SubmissionError as error:
            data = _failed_submission(str(error), time.monotonic() - start)
        else:
            data = to_gradescope(grade(course, [folder])[0], time.monotonic() - start)
    _atomic_write(root / "results" / "results.json", json.dumps(data, indent=2, ensure_ascii=False))
    return data


def export(course: Course, out: Path) -> Path:
    """Write the autograder zip: the engine, the course manifest, stand-ins and
    suites; never the reference solutions, which grading does not need."""
    folders = ["autograder", "course/stand_ins", "tests/hidden", "tests/public"]
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        setup = SETUP_SH.format(torch=requirement("torch"), hypothesis=requirement("hypothesis"))
        for script, text in (("setup.sh", setup), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(script)
            info.external_attr = 0o755 << 16
            zf.writestr(info, text)
        zf.write(course.root / "course" / "course.toml", "course/course.toml")
        for folder in folders:
            for path in sorted((course.root / folder).rglob("*.py")):
                zf.write(path, path.relative_to(course.root).as_posix())
    return out


def main() -> int:
    root = Path(os.environ.get("ATTN_GRADESCOPE_ROOT", "/autograder"))
    run(root, load_course(root / "source"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
