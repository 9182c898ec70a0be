"""Gradescope: the autograder zip, and the program that runs inside it.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once
per image and ``run_autograder`` once per submission; the submission lies in
``/autograder/submission`` and the results go to
``/autograder/results/results.json`` (schema:
https://gradescope-autograders.readthedocs.io/en/latest/specs/). Gradescope
keeps what ``run_autograder`` prints as ``results/stdout``, for instructors:
the grader prints its log there, each line cut to ``LOG_LINE`` characters
(:mod:`autograder.delivery.platform`, which also holds what PrairieLearn shares with it).

Late work: Gradescope writes ``/autograder/submission_metadata.json`` beside the submission; its
``created_at`` (ISO 8601 with an offset, e.g. ``2018-07-01T14:22:32.365935-07:00``) is the
submission time, priced by course.toml's ``[late]`` policy against each unit's ``due`` (and the
student's extension, found by the ``users``' email, id or name) exactly as ``grade-batch`` prices
it (:mod:`autograder.core.lateness`): the results' ``score`` is after the penalty, the tests keep
the trusted points, and ``extra_data.late`` holds the score before it and each unit's penalty.

Environment variables, all optional, for running it elsewhere (the tests do):
``AUTOGRADER_GRADESCOPE_ROOT`` replaces ``/autograder`` in both scripts, and
``AUTOGRADER_PYTHON`` replaces ``$ROOT/venv/bin/python`` in ``run_autograder``;
``AUTOGRADER_UNSAFE_NO_SANDBOX=1`` grades in-process (for tests only: the verdict is
then forgeable).
"""
from __future__ import annotations

import datetime
import json
import zipfile
from pathlib import Path

from autograder.core import lateness
from autograder.core.manifest import Course
from autograder.core.results import GradeResult
from autograder.core.versions import requirement
from autograder.delivery.platform import HostedPlatform, grader_files, grader_packages, python_version, start_grader

EXPLANATION = (
    "Public tests are visible now. Hidden properties count too: their results appear "
    "when scores are published, so passing every visible test does not mean full marks."
)

METADATA = "submission_metadata.json"  # Gradescope's record of the submission, in its root
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


def submission_metadata(root: Path) -> tuple[datetime.datetime | None, list[str]]:
    """When the submission was handed in (``created_at``; None: no metadata, or no time in it),
    and its students' names as an extensions file may give them (each user's email, id, sid, name)."""
    try:
        data = json.loads((root / METADATA).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, []
    if not isinstance(data, dict):
        return None, []
    created = data.get("created_at")
    when = lateness.parse_timestamp(created) if isinstance(created, str) else None
    users = [u for u in data.get("users") or [] if isinstance(u, dict)]
    ids = [str(u[k]).strip() for u in users for k in ("email", "sid", "id", "name") if u.get(k) not in (None, "")]
    return when, ids


def priced(result: GradeResult, course: Course, submitted: datetime.datetime | None, students: list[str]) -> dict | None:
    """The late section of a graded submission (as grade-batch's records keep it: ``units`` -> the
    penalty and score after it; ``raw_score``, ``score``), or None when nothing has a due date or
    the time is unknown."""
    if submitted is None:
        return None
    problem = ""
    try:
        given = lateness.Extensions.load(course.root, course.late)
    except ValueError as error:  # priced as the manifest says, and the output says why
        given, problem = lateness.Extensions(), f" (no extension applied: {error})"
    units = {}
    for name, unit in result.units.items():
        due = course.units[name].due if name in course.units else None
        if due is not None:
            units[name] = lateness.assess(course.late, unit.score, submitted, given.due(name, due, *students)).to_dict()
    if not units:
        return None
    after = round(sum(units[n]["score"] if n in units else u.score for n, u in result.units.items()), 4)
    return {"submitted": submitted.isoformat(), "from": f"{METADATA} created_at",
            "policy": course.late.describe() + problem, "raw_score": result.score, "score": after, "units": units}


def late_note(late: dict) -> str:
    """What the output says of late work: when, the policy, each late unit, the score after it."""
    units = [f"{name} due {lateness.shown(datetime.datetime.fromisoformat(u['due']))}, "
             + lateness.note(u["days_late"], u["penalty"]) for name, u in late["units"].items() if u["days_late"]]
    when = lateness.shown(datetime.datetime.fromisoformat(late["submitted"]))
    if not units:
        return f"Handed in {when}: on time."
    return (f"Handed in {when}; late work: {late['policy']}. {'; '.join(units)}. "
            f"Score after it: {late['score']:g} (before it: {late['raw_score']:g}).")


class Gradescope(HostedPlatform):
    """Gradescope: the autograder zip, and its results.json."""

    name = "gradescope"
    root_variable, default_root = "AUTOGRADER_GRADESCOPE_ROOT", "/autograder"
    upload, source = "submission", "source"
    submitted: tuple[datetime.datetime | None, list[str]] = (None, [])  # (run: the submission's metadata)

    def run(self, root: Path, course: Course, *, sandbox: bool = True) -> dict:
        """Grade the submission, priced by its ``submission_metadata.json`` (when there is one)."""
        self.submitted = submission_metadata(root)
        return super().run(root, course, sandbox=sandbox)

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
            files = grader_files(course)
            if course.late.extensions and (course.root / course.late.extensions).is_file():  # (export again after editing it)
                files.setdefault(Path(course.late.extensions), course.root / course.late.extensions)
            for rel, path in files.items():
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
        data: dict  # Gradescope's results.json
        if isinstance(graded, str):  # nothing was graded, so there is no public test to speak of
            data = {"score": 0.0, "execution_time": round(seconds), "output": graded,
                    "output_format": "text", "stdout_visibility": "hidden", "tests": []}
        else:
            data = self.results(graded, course, seconds=seconds)
            late = priced(graded, course, *self.submitted)
            if late:  # the tests keep the trusted points; the score is after the penalty
                data["score"] = late["score"]
                data["extra_data"] = {"late": late}
                data["output"] += "\n" + late_note(late)
        if notice:  # the instructor sees what the isolation mode hid less (the output is theirs and the student's)
            data["output"] = f"{notice}\n{data['output']}"
        return data


if __name__ == "__main__":
    from autograder.core.shutdown import exit_code

    raise SystemExit(exit_code(Gradescope().main()))
