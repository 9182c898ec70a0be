"""Gradescope: the autograder zip, and the program that runs inside it.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once
per image and ``run_autograder`` once per submission; the submission lies in
``/autograder/submission`` and the results go to
``/autograder/results/results.json`` (schema:
https://gradescope-autograders.readthedocs.io/en/latest/specs/). Gradescope
keeps what ``run_autograder`` prints as ``results/stdout``, for instructors:
the grader prints its log there, each line cut to ``LOG_LINE`` characters
(:mod:`autograder.delivery.platform`, which also holds what PrairieLearn shares with it).

Environment variables, all optional, for running it elsewhere (the tests do):
``AUTOGRADER_GRADESCOPE_ROOT`` replaces ``/autograder`` in both scripts, and
``AUTOGRADER_PYTHON`` replaces ``$ROOT/venv/bin/python`` in ``run_autograder``;
``AUTOGRADER_UNSAFE_NO_SANDBOX=1`` grades in-process (for tests only: the verdict is
then forgeable).
"""
from __future__ import annotations

import zipfile
from pathlib import Path

from autograder.core.manifest import Course
from autograder.core.results import GradeResult
from autograder.core.versions import requirement
from autograder.delivery.platform import HostedPlatform, grader_files, grader_packages, python_version, start_grader

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
# or more back at once (MALLOC_MMAP_THRESHOLD_): with its default, sliding threshold, a long
# sequence's float64 reference left about 250 MiB of freed tensors resident.
""" + start_grader("$ROOT/venv/bin/python", "autograder.delivery.gradescope", MALLOC_MMAP_THRESHOLD_="1048576")


class Gradescope(HostedPlatform):
    """Gradescope: the autograder zip, and its results.json."""

    name = "gradescope"
    root_variable, default_root = "AUTOGRADER_GRADESCOPE_ROOT", "/autograder"
    upload, source = "submission", "source"

    def export(self, course: Course, out: Path) -> Path:
        """Write the autograder zip ``out``: the two scripts and the grader's files."""
        out.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            setup = SETUP_SH.format(torch=requirement("torch"), packages=grader_packages(), uv=UV,
                                    python=python_version())
            for script, text in (("setup.sh", setup), ("run_autograder", RUN_AUTOGRADER)):
                info = zipfile.ZipInfo(script)
                info.external_attr = 0o755 << 16
                zf.writestr(info, text)
            for rel, path in grader_files(course).items():
                zf.write(path, rel.as_posix())
        return out

    def results(self, result: GradeResult, course: Course, *, seconds: float = 0.0) -> dict:
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
            "execution_time": round(seconds),
            "output": "\n".join(notes),
            # Student code controls the messages: plain text, never rendered as HTML or Markdown.
            "output_format": "text",
            "test_output_format": "text",
            "stdout_visibility": "hidden",
            "tests": tests,
        }

    def results_file(self, graded: GradeResult | str, notice: str | None, course: Course, seconds: float) -> dict:
        if isinstance(graded, str):  # nothing was graded, so there is no public test to speak of
            data = {"score": 0.0, "execution_time": round(seconds), "output": graded,
                    "output_format": "text", "stdout_visibility": "hidden", "tests": []}
        else:
            data = self.results(graded, course, seconds=seconds)
        if notice:  # the instructor sees what the isolation mode hid less (the output is theirs and the student's)
            data["output"] = f"{notice}\n{data['output']}"
        return data


if __name__ == "__main__":
    from autograder.core.shutdown import exit_code

    raise SystemExit(exit_code(Gradescope().main()))
