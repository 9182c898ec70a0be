"""What a unit's tests are worth: the rubric the grading plugin records when it collects the suites
(:class:`autograder.grading.plugin.Rubric`, the same record a grade's results are made from), never
a second reading of the points markers.

The collection imports the suites (torch, hypothesis, the course's helpers), so it runs in a
process of its own (``python -m autograder.authoring.rubric``; its imports and collection take
1.4 s on the 2-core machine at low load): its pytest session would otherwise leave its modules,
``sys.path`` entries and hypothesis profile in the caller, which may be a grading process, a
test run or a build, and the suites of two course folders (a copy beside the original) cannot
share one process's module names. Its answer is kept for this process until a suite file or
the manifest changes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

from autograder.core.manifest import MANIFEST, ROOT_ENV, Course, load_course
from autograder.grading.plugin import Rubric
from autograder.core.errors import GraderError

__all__ = ["Rubric", "rubric", "rubrics"]

TIMEOUT = 600.0  # seconds for the collection (a few at most)
# (course root, what its suites and manifest were) -> unit -> its rubric
_KNOWN: dict[tuple, dict[str, list[Rubric]]] = {}


def rubric(course: Course, unit: str) -> list[Rubric]:
    """The graded tests of ``unit`` (public first, then hidden), each worth its points once."""
    return rubrics(course).get(unit, [])


def rubrics(course: Course) -> dict[str, list[Rubric]]:
    """Every unit's rubric, collected by the grading plugin in a process of its own."""
    key = (str(course.root), _fingerprint(course))
    if key not in _KNOWN:
        _KNOWN[key] = _collect(course)
    return {unit: list(tests) for unit, tests in _KNOWN[key].items()}


def _fingerprint(course: Course) -> tuple:
    """What the rubric depends on: every file of the suites' folders, and the manifest."""
    files = [course.root / MANIFEST]
    for folder in (course.public_tests, course.hidden_tests):
        if folder.is_dir():
            files += sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    stats = []
    for path in files:
        try:
            info = path.stat()
        except OSError:
            continue
        stats.append((str(path), info.st_mtime_ns, info.st_size))
    return tuple(stats)


def _collect(course: Course) -> dict[str, list[Rubric]]:
    try:
        proc = subprocess.run([sys.executable, "-m", __name__], cwd=course.root, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=TIMEOUT,
                              env={**os.environ, ROOT_ENV: str(course.root)})
    except (OSError, subprocess.TimeoutExpired) as error:
        raise GraderError(f"the suites could not be collected for their rubric: {error}") from None
    if proc.returncode != 0:
        raise GraderError(f"the suites could not be collected for their rubric:\n{proc.stderr[-3000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return {unit: [Rubric(**test) for test in tests] for unit, tests in found.items()}


def main() -> int:
    """The collection itself (the course from $AUTOGRADER_COURSE_ROOT): one JSON line on stdout."""
    from autograder.core.heavy_imports import collection_paused

    with collection_paused():  # the grader's heavy imports, as a grading process makes them
        from autograder.grading.grade import collect_rubric
    found = collect_rubric(load_course())
    print(json.dumps({unit: [asdict(test) for test in tests] for unit, tests in found.items()}))
    return 0


if __name__ == "__main__":
    from autograder.core.shutdown import exit_code

    try:
        code = main()
    except GraderError as error:  # the suites break the conventions, or do not import: the caller says why
        print(error, file=sys.stderr)
        code = 1
    raise SystemExit(exit_code(code))
