"""Run a course's suites against submissions and collect the points."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from .manifest import Course
from .plugin import GradingPlugin
from .results import GradeResult
from .subject import InProcessSubject

SUITES = ("public", "hidden")


class GraderError(Exception):
    """The grader itself failed (not the submission): exit code 3."""


def grade(
    course: Course,
    folders: list[Path],
    *,
    units: list[str] | None = None,
    suites: tuple[str, ...] = SUITES,
    isolate: bool = True,
    timeout: float = 10.0,
    seed: int | None = None,
) -> list[GradeResult]:
    """Grade each folder on the selected units; one result per folder, in order.

    ``seed`` is for course authors exploring other examples: it turns off
    hypothesis's derandomization, so grades then depend on it.
    """
    selected = [u.name for u in course.select(units)]
    subjects = {
        f"submission{i}": InProcessSubject(course, Path(folder), isolate=isolate, timeout=timeout)
        for i, folder in enumerate(folders)
    }
    plugin = GradingPlugin(course, subjects, selected, explore=seed is not None)
    paths = [str(course.public_tests if suite == "public" else course.hidden_tests) for suite in suites]
    args = [
        *paths,
        "-c", os.devnull,  # the suites' own conventions, not the project's pytest settings
        "--rootdir", str(course.root),
        "-p", "no:cacheprovider",
        "--assert=plain",  # a rewritten assert would print test source to students
        "-q",
        *(["--hypothesis-seed", str(seed)] if seed is not None else []),
    ]
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        code = pytest.main(args, plugins=[plugin])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        raise GraderError(f"the test suite could not run (pytest exit code {int(code)}):\n{log.getvalue()[-3000:]}")
    by_id = plugin.results()
    return [by_id[sid] for sid in subjects]
