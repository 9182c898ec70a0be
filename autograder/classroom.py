"""GitHub Classroom: a workflow for student repositories, and result payloads
in the format ``classroom-resources/autograding-grading-reporter`` reads.

The reporter takes a list of runner ids; for each it decodes the environment
variable ``<ID>_RESULTS`` (base64 JSON: version, status, max_score, tests with
name, status, score, message) and prints "Points X/Y". Here each unit is one
runner, so students see their points unit by unit.
"""
from __future__ import annotations

import base64
import json

from .manifest import Course
from .results import GradeResult
from .versions import requirement

STEP_ID = "public-tests"


def payloads(result: GradeResult) -> dict[str, dict]:
    """Unit name -> the reporter's result object for that unit."""
    out = {}
    for unit in result.units.values():
        tests = [
            {
                "name": test.name,
                "status": "pass" if test.status == "passed" else "fail",
                "message": test.output or None,
                "line_no": None,
                "execution_time": "0ms",
                "score": test.score,
            }
            for test in unit.tests
            if test.status != "skipped"  # worth nothing; the reporter would count it as a failure
        ]
        status = "error" if unit.status == "unavailable" else "pass" if all(t["status"] == "pass" for t in tests) else "fail"
        out[unit.name] = {"version": 1, "status": status, "max_score": unit.max_score, "tests": tests}
    return out


def github_output(result: GradeResult) -> str:
    """``name=value`` lines for ``$GITHUB_OUTPUT``: one base64 payload per unit."""
    return "".join(
        f"{unit}={base64.b64encode(json.dumps(payload).encode()).decode()}\n"
        for unit, payload in payloads(result).items()
    )


def workflow(course: Course) -> str:
    """The text of ``.github/workflows/classroom.yml`` for a student repository
    (torch pinned to this grader's version; the bundle's pyproject pins hypothesis)."""
    torch_spec = requirement("torch")
    units = list(course.units)
    env = "\n".join(f"          {u.upper()}_RESULTS: \"${{{{ steps.{STEP_ID}.outputs.{u} }}}}\"" for u in units)
    return f"""name: Autograding Tests
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
        uses: actions/checkout@v4
      - name: Set up Python
        uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install (torch first, as the CPU wheel)
        run: |
          pip install {torch_spec} --index-url https://download.pytorch.org/whl/cpu
          pip install -e .
      - name: Public tests
        id: {STEP_ID}
        run: attn-course check --format classroom --output "$GITHUB_OUTPUT"
      - name: Autograding Reporter
        uses: classroom-resources/autograding-grading-reporter@v1
        env:
{env}
        with:
          runners: {",".join(units)}
"""
