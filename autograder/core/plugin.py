"""The pytest plugin that turns a course's test suite into points.

Conventions a course's tests follow (checked at collection):
  * ``pytestmark = pytest.mark.unit("<unit>")`` in every test module;
  * ``@pytest.mark.points(N)`` on every test;
  * a docstring whose first line is the property students read;
  * a ``subject`` argument, through which the code under test is reached.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from autograder.core.forbidden import Use, scan_file
from autograder.core.loader import safe_str
from autograder.core.manifest import Course
from autograder.core.results import GradeResult, TestResult, UnitResult
from autograder.core.subject import StudentError

PROFILE = "attn-grading"
EXPLORE = "attn-explore"  # course authors only: fresh examples from --hypothesis-seed
# Grades are deterministic: derandomized examples, no example database, no deadline.
settings.register_profile(
    PROFILE,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    max_examples=20,
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
)
settings.register_profile(EXPLORE, settings.get_profile(PROFILE), derandomize=False)


def pin_local_constants():
    """Stop hypothesis mixing literals from whatever local modules are loaded into its examples.

    Since 6.131 hypothesis sometimes draws a constant found in any non-installed
    module in ``sys.modules``. The examples then depend on what this process
    happened to import: student code graded in-process, a wrapper script, the
    order units load. Grades must depend only on the test and the pinned
    hypothesis version, so the local pool is held empty while grading (its
    built-in constants stay). Returns the function that restores it. These are
    private names of the pinned version: a new version without them fails here,
    loudly, rather than grading on examples nobody has checked.
    """
    from hypothesis.internal.conjecture import providers

    original, empty = providers._get_local_constants, providers.Constants()

    def swap(function):
        providers._get_local_constants = function
        providers.CONSTANTS_CACHE.cache.clear()  # it holds the pool it was computed from

    swap(lambda: empty)
    return lambda: swap(original)


class CourseError(Exception):
    """The course's own tests break the conventions above (never the student's fault)."""


def _counterexample(error: BaseException) -> str:
    """The arguments of hypothesis's minimal failing example, without the test's name."""
    parts = []
    for note in getattr(error, "__notes__", ()):
        call = re.match(r"(?:Falsifying example|Failing test case): \w+\((.*)\)\s*$", note, re.S)
        draw = re.match(r"Draw \d+(?: \((\w+)\))?: (.*)$", note, re.S)
        if call:
            lines = [re.sub(r"\s+#.*$", "", line).strip() for line in call.group(1).splitlines()]
            args = [a.strip() for a in " ".join(lines).split(", ") if a.strip()]
            # The fixture and st.data() carry no information for a student.
            parts += [a.rstrip(",") for a in args if not a.startswith(("subject=", "data="))]
        elif draw:
            parts.append(f"{draw.group(1) or 'drawn'}={draw.group(2).strip()}")
    return ", ".join(p for p in parts if p)


def failure_message(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return failure_message(error.exceptions[0])
    if isinstance(error, StudentError):
        text = error.describe()
    elif isinstance(error, AssertionError):
        text = safe_str(error, 600) or "the property does not hold"
    elif isinstance(error, pytest.fail.Exception):
        text = error.msg
    else:
        text = f"{type(error).__name__}: {safe_str(error)}"
    example = _counterexample(error)
    return f"{text} (counterexample: {example})" if example else text


class GradingPlugin:
    def __init__(self, course: Course, subjects: dict, units: list[str], *, explore: bool = False):
        self.course, self.subjects, self.units = course, subjects, units
        self.profile = EXPLORE if explore else PROFILE
        self.records: dict[tuple[str, str], TestResult] = {}
        self.units_of: dict[tuple[str, str], str] = {}  # (submission, test id) -> unit, in run order

    # -- collection --------------------------------------------------------
    def pytest_configure(self, config):
        config.addinivalue_line("markers", "unit(name): the course unit a test module grades")
        config.addinivalue_line("markers", "points(n): what a test is worth")
        settings.load_profile(self.profile)
        self._restore_constants = pin_local_constants()

    def pytest_unconfigure(self, config):
        self._restore_constants()

    def pytest_generate_tests(self, metafunc):
        if "subject" in metafunc.fixturenames:
            metafunc.parametrize("subject", list(self.subjects.values()), ids=list(self.subjects), scope="session")

    def pytest_collection_modifyitems(self, session, config, items):
        kept = []
        for item in items:
            unit, points, name = self._describe(item)
            if unit in self.units:
                kept.append(item)
        items[:] = kept

    def _describe(self, item) -> tuple[str, float, str]:
        unit = item.get_closest_marker("unit")
        points = item.get_closest_marker("points")
        doc = (getattr(item.obj, "__doc__", None) or "").strip()
        if unit is None or points is None or not doc or "subject" not in item.fixturenames:
            raise CourseError(f"{item.nodeid}: a graded test needs a unit marker, a points marker, a docstring and `subject`")
        if unit.args[0] not in self.course.units:
            raise CourseError(f"{item.nodeid}: unknown unit {unit.args[0]!r}")
        return unit.args[0], float(points.args[0]), doc.splitlines()[0].strip()

    # -- running -----------------------------------------------------------
    def pytest_runtest_setup(self, item):
        unit, _, _ = self._describe(item)
        subject = item.callspec.params["subject"]
        subject.begin(item.nodeid)
        problem = subject.status(unit)
        if problem:
            pytest.fail(problem, pytrace=False)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        unit, points, name = self._describe(item)
        submission = _subject_id(item, self.subjects)
        test_id = f"{Path(str(item.path)).name}::{item.originalname}"
        key = (submission, test_id)
        visibility = "visible" if Path(str(item.path)).is_relative_to(self.course.public_tests) else "hidden"
        self.units_of.setdefault(key, unit)
        if report.failed:
            message = failure_message(call.excinfo.value) if call.excinfo else "failed"
            self.records[key] = TestResult(test_id, name, 0.0, points, "failed", message, visibility)
        elif report.skipped and key not in self.records:
            reason = call.excinfo.value.msg if call.excinfo and hasattr(call.excinfo.value, "msg") else "skipped"
            # A skipped test counts neither way, so scores do not depend on the machine.
            self.records[key] = TestResult(test_id, name, 0.0, 0.0, "skipped", reason, visibility)
        elif report.when == "call" and report.passed:
            self.records[key] = TestResult(test_id, name, points, points, "passed", "", visibility)

    # -- results -----------------------------------------------------------
    def results(self) -> dict[str, GradeResult]:
        graded = {sid: GradeResult(submission=str(s.folder)) for sid, s in self.subjects.items()}
        for name in self.units:
            spec = self.course.units[name]
            for sid, subject in self.subjects.items():
                unit = UnitResult(name=name, title=spec.title)
                unit.tests = [self.records[key] for key, u in self.units_of.items() if key[0] == sid and u == name]
                problem = subject.status(name)
                if problem:
                    unit.status, unit.message = "unavailable", problem
                else:
                    self._enforce_forbidden(unit, spec, subject)
                graded[sid].units[name] = unit
        return graded

    def _enforce_forbidden(self, unit: UnitResult, spec, subject) -> None:
        uses = scan_file(subject.folder / spec.file, spec.forbidden)
        static = {u.name for u in uses}
        uses += [Use(name, None) for name in sorted(subject.runtime_uses(spec.name) - static)]
        if not uses:
            return
        unit.status = "forbidden"
        unit.message = (
            f"{'; '.join(u.describe(spec.file) for u in uses)}. This unit must not call the function it teaches, "
            "nor use constructs that hide what it calls (the API page lists both), so it scores 0: "
            "write it from basic tensor operations."
        )
        for test in unit.tests:
            if test.score:
                test.score, test.status, test.output = 0.0, "failed", "no points: the unit calls a forbidden function"


def _subject_id(item, subjects: dict) -> str:
    subject = item.callspec.params["subject"]
    return next(sid for sid, s in subjects.items() if s is subject)
