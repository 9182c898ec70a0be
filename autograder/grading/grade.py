"""Run a course's suites against submissions and collect the points."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
import torch

from autograder.core.i18n import _
from autograder.core.manifest import Course
from autograder.grading import prerequisites
from autograder.core.errors import GraderError
from autograder.grading.plugin import GradingPlugin, Rubric
from autograder.core.results import GradeResult
from autograder.core.protocol import Subject
from autograder.trust.subject import InProcessSubject

SUITES = ("public", "hidden")


def grade(
    course: Course,
    folders: list[Path],
    *,
    units: list[str] | None = None,
    suites: tuple[str, ...] = SUITES,
    isolate: bool = True,
    timeout: float | None = None,
    seed: int | None = None,
    sandbox: bool = True,
) -> list[GradeResult]:
    """Grade each folder on the selected units; one result per folder, in order.

    ``seed`` is for course authors exploring other examples: it turns off
    hypothesis's derandomization, so grades then depend on it. With
    ``sandbox`` (the default) student code runs in sandboxed worker
    processes (:mod:`autograder.sandbox.host`); without it, in this process.
    Every limit is the course's (``course.limits``: course.toml ``[limits]``,
    :mod:`autograder.core.settings`); ``timeout``, one call's, overrides its ``call_timeout``.
    """
    selected = [u.name for u in course.select(units)]
    torch.set_num_threads(1)  # the trusted side's oracles too: one reduction order on every machine
    subjects: dict[str, Subject] = {}
    try:
        for i, folder in enumerate(folders):
            subjects[f"submission{i}"] = _subject(course, Path(folder), sandbox=sandbox, isolate=isolate, timeout=timeout)
        return _run(course, subjects, selected, suites, seed)
    finally:
        for subject in subjects.values():
            subject.close()


def _subject(course: Course, folder: Path, *, sandbox: bool, isolate: bool, timeout: float | None) -> Subject:
    if not sandbox:
        return InProcessSubject(course, folder, isolate=isolate, timeout=timeout)
    from autograder.sandbox.host import SandboxError, SandboxSubject

    try:
        return SandboxSubject(course, folder, isolate=isolate, timeout=timeout)
    except (SandboxError, OSError) as error:
        raise GraderError(_("the sandbox could not be set up: {problem}").format(problem=error)) from None


def collect_suites(course: Course, units: list[str] | None = None) -> None:
    """Collect the suites as a grade does, running nothing: their test modules are then imported
    in this process, and the units of each known (:mod:`autograder.grading.plugin`). A class batch
    does it before it forks its grader processes, which then start grading with both."""
    _run(course, {}, [u.name for u in course.select(units)], SUITES, None, collect_only=True)


def collect_rubric(course: Course) -> dict[str, list[Rubric]]:
    """Every unit's rubric (public tests first, then hidden), as the grading plugin records it at
    a grade's collection: a collection without submissions, running nothing. A suite folder that
    is not there has no tests. It imports the suites in this process (torch, hypothesis): call it
    where that is wanted (:func:`autograder.authoring.rubric.rubric` runs it in a process of its own)."""
    suites = tuple(s for s in SUITES if (course.public_tests if s == "public" else course.hidden_tests).is_dir())
    found: dict[str, list[Rubric]] = {unit: [] for unit in course.units}
    if suites:
        plugin = GradingPlugin(course, {}, list(course.units))
        _run(course, {}, list(course.units), suites, None, collect_only=True, plugin=plugin)
        for unit, tests in plugin.rubric.items():
            found[unit] = list(tests.values())
    return found


def _run(course: Course, subjects: dict, selected: list[str], suites: tuple[str, ...], seed: int | None,
         *, collect_only: bool = False, plugin: GradingPlugin | None = None) -> list[GradeResult]:
    if plugin is None:
        plugin = GradingPlugin(course, subjects, selected, explore=seed is not None)
    paths = [str(course.public_tests if suite == "public" else course.hidden_tests) for suite in suites]
    args = [
        *paths,
        "-c", os.devnull,  # the suites' own conventions, not the project's pytest settings
        "--rootdir", str(course.root),
        "-p", "no:cacheprovider",
        # Its clean-up runs a full gc.collect five times over the grade's objects (0.9 s of a
        # 10 s grade, in cProfile); an unraisable exception in student code is no grade's business.
        "-p", "no:unraisableexception",
        # Its log capture, set up and taken down in each phase of each test, is 2.4% of a catalogue's
        # grade in cProfile; no suite reads a log record.
        "-p", "no:logging",
        "--assert=plain",  # a rewritten assert would print test source to students
        # pytest formats every failure's traceback although the grade reads only the exception:
        # its default style parses each frame's whole source file (torch's among them) with ast,
        # 31 s of a 70 s profiled grade of eight mutants; the native style only reads lines.
        "--tb=native",
        "-q",
        *(["--hypothesis-seed", str(seed)] if seed is not None else []),
        *(["--collect-only"] if collect_only else []),
    ]
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        # (and the watches that record which unit files each test ran: autograder/grading/prerequisites.py)
        code = pytest.main(args, plugins=[plugin, *prerequisites.watchers()])
    ran = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, *([pytest.ExitCode.NO_TESTS_COLLECTED] if collect_only else []))
    if code not in ran:
        raise GraderError(_("the test suite could not run (pytest exit code {code}):").format(code=int(code))
                          + f"\n{log.getvalue()[-3000:]}")
    broken = [s.failure for s in subjects.values() if s.failure]
    if broken:
        # The sandbox failed, not the submission: no grade rather than a wrong one.
        raise GraderError(_("the sandbox failed: {problem}").format(problem=broken[0]))
    by_id = plugin.results()
    return [by_id[sid] for sid in subjects]
