"""PrairieLearn: a question folder for its external grader, and the grader's entrypoint.

PrairieLearn copies the question's ``tests/`` to ``/grade/tests`` and the
student's files to ``/grade/student``, runs the ``entrypoint`` named in
``info.json`` inside the question's Docker image, and reads
``/grade/results/results.json`` (docs/externalGrading.md in
PrairieLearn/PrairieLearn): ``gradable``, ``score`` in 0..1, ``message``,
``output``, and ``tests`` with ``name``, ``points``, ``max_points``,
``message``, ``output``. An upload with nothing gradable is ``gradable:
false`` with ``format_errors``, which costs the student no attempt.

Late work: the ``score`` is the raw one, never priced here. PrairieLearn applies lateness itself,
to the score a grader reports, by the ``credit`` of the access rules of the *assessment* that holds
the question (``allowAccess`` in its infoAssessment.json, docs/assessment/accessControl.md), and the
grading job is given no submission time (``/grade/data/data.json`` is the question's ``data``). The
export writes no access rule: a question's info.json cannot hold one (PrairieLearn's question schema
has no such property and refuses unknown ones), one question holds every unit while an assessment
has one timeline, and ``credit`` is a cap (``min(credit, score)``, the best score kept), which
expresses ``none`` and ``zero`` but not ``per_day`` (a cap at 90% leaves a 26/62 submission its
42%, where every other path takes 10% of its points).
The README's PrairieLearn section says which rules give each policy.

Environment variables, all optional: ``AUTOGRADER_PRAIRIELEARN_ROOT`` replaces
``/grade``; ``AUTOGRADER_UNSAFE_NO_SANDBOX=1`` grades in-process (for tests only: the
verdict is then forgeable).
"""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from autograder.core.manifest import Course
from autograder.core.results import GradeResult
from autograder.core.versions import requirement
from autograder.delivery.platform import HostedPlatform, grader_files, grader_packages, python_version, start_grader

IMAGE = "{course}/grader"  # the default image name: build it from the exported Dockerfile and push it under this name

ENTRYPOINT = """#!/usr/bin/env bash
# PrairieLearn's entrypoint: grade /grade/student, write /grade/results/results.json.
ROOT="${AUTOGRADER_PRAIRIELEARN_ROOT:-/grade}"
cd "$ROOT/tests" || exit 1
""" + start_grader("python3", "autograder.delivery.prairielearn")

DOCKERFILE = """# The grading image: the grader's own Python, torch (CPU wheel) and hypothesis.
FROM python:{python}-slim
RUN pip install --no-cache-dir {torch} --index-url https://download.pytorch.org/whl/cpu \\
 && pip install --no-cache-dir {packages}
"""

QUESTION_HTML = """<pl-question-panel>
  <p>Upload any of your unit files. Each unit is graded by its public tests and hidden properties;
  a missing file costs that unit's points only.</p>
</pl-question-panel>
<pl-file-upload optional-file-names="{files}"></pl-file-upload>
<pl-submission-panel>
  <pl-external-grader-results></pl-external-grader-results>
  <pl-file-preview></pl-file-preview>
</pl-submission-panel>
"""


class PrairieLearn(HostedPlatform):
    """PrairieLearn: a question folder for its external grader, and its results.json."""

    name = "prairielearn"
    root_variable, default_root = "AUTOGRADER_PRAIRIELEARN_ROOT", "/grade"
    upload, source = "student", "tests"

    def info_json(self, course: Course, image: str) -> dict:
        return {
            # Stable across exports, so re-exporting updates the same question.
            "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"autograder:{course.name}")),
            "title": f"{course.name}: all units",
            "topic": "Autograder",
            "tags": ["code"],
            "type": "v3",
            "singleVariant": True,
            "gradingMethod": "External",
            "externalGradingOptions": {
                "enabled": True,
                "image": image,
                "entrypoint": "/grade/tests/run.sh",
                "timeout": course.limits.prairielearn_timeout,  # seconds; PrairieLearn's ceiling is 600
                "enableNetworking": False,
            },
        }

    def export(self, course: Course, out: Path, image: str | None = None) -> Path:
        """Write the question folder ``out``: info.json, question.html, the image's
        Dockerfile, and tests/ (the entrypoint and the grader's files)."""
        tests = out / "tests"
        tests.mkdir(parents=True, exist_ok=True)
        for rel, path in grader_files(course).items():
            (tests / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, tests / rel)
        entry = tests / "run.sh"
        entry.write_text(ENTRYPOINT, encoding="utf-8")
        entry.chmod(0o755)
        image = image or IMAGE.format(course=course.name)
        (out / "info.json").write_text(json.dumps(self.info_json(course, image), indent=2) + "\n", encoding="utf-8")
        files = ", ".join(u.file for u in course.units.values())
        (out / "question.html").write_text(QUESTION_HTML.format(files=files), encoding="utf-8")
        (out / "Dockerfile").write_text(DOCKERFILE.format(python=python_version(), torch=requirement("torch"),
                                                          packages=grader_packages()), encoding="utf-8")
        return out

    def results(self, result: GradeResult, course: Course, *, seconds: float = 0.0) -> dict:
        """results.json for a graded submission: every property is one test, the score a fraction."""
        tests = [
            {
                "name": f"{unit.title}: {test.name}",
                "points": test.score,
                "max_points": test.max_score,
                "message": test.output if test.status != "passed" else "",
                "output": "" if test.status == "passed" else f"{test.status}: {test.output}",
            }
            for unit in result.units.values() for test in unit.tests if test.status != "skipped"
        ]
        notes = [f"{u.name}: {u.score:g}/{u.max_score:g}" + (f" ({u.message})" if u.message else "")
                 for u in result.units.values()]
        return {
            "gradable": True,
            "score": round(result.score / result.max_score, 6) if result.max_score else 0.0,
            "message": f"{result.score:g}/{result.max_score:g} points",
            "output": "\n".join(notes),
            "tests": tests,
        }

    def results_file(self, graded: GradeResult | str, notice: str | None, course: Course, seconds: float) -> dict:
        data: dict  # PrairieLearn's results.json
        if isinstance(graded, str):  # not gradable: costs the student no attempt
            data = {"gradable": False, "format_errors": [graded], "message": graded, "output": "", "tests": []}
        else:
            data = self.results(graded, course, seconds=seconds)
        data["output"] = "\n".join(filter(None, [notice, data["output"], f"graded in {seconds:.1f} s"]))
        return data


if __name__ == "__main__":
    from autograder.core.shutdown import exit_code

    raise SystemExit(exit_code(PrairieLearn().main()))
