"""The pytest plugin that turns a course's test suite into points.

Conventions a course's tests follow (checked at collection):
  * ``pytestmark = pytest.mark.unit("<unit>")`` in every test module;
  * ``@pytest.mark.points(N)`` on every test;
  * a docstring whose first line is the property students read;
  * a ``subject`` argument, through which the code under test is reached.

The rubric (what each graded test is worth) is what this plugin records at collection, the same
:class:`Rubric` a grade's records are made from: a plugin given no submission collects one item
per test and runs nothing (:func:`autograder.grading.grade.collect_rubric`).

A parametrized graded test (``pytest.mark.parametrize`` beside ``subject``) is one property: its
test id is ``<file>::<function>`` for every item, it is worth its ``points`` once, and it passes
only when every item passes (a failed item fails it, whatever the items after it do; it is
skipped only when every item is). Its items must agree on unit, points and name.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder.core.errors import AutograderError
from autograder.grading.determinism import memoize_digests, pin_local_constants, use_profile
from autograder.core.i18n import _, translate_text
from autograder.core.manifest import Course
from autograder.grading.messages import failure_message
from autograder.core import cases
from autograder.core.cases import UnitSubject
from autograder.core.protocol import Subject
from autograder.core.results import GradeResult, TestResult
from autograder.grading.scoring import unit_result


# What this process's sessions learnt at collection: test module (path, mtime, size) -> the units
# its tests grade. A later session of this process skips a module none of whose units it grades
# (:meth:`GradingPlugin.pytest_ignore_collect`), which its items would be dropped from anyway:
# a batch's grader process grades chunk after chunk, each its own session.
# (None: a module that cannot be stat'ed, looked up but never learnt.)
_UNITS_OF_MODULE: dict[tuple[str, int, int] | None, frozenset[str]] = {}


def _module_key(path: Path) -> tuple[str, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return str(path), info.st_mtime_ns, info.st_size


class CourseError(AutograderError):
    """The course's own tests break the conventions above (never the student's fault)."""


@dataclass(frozen=True)
class Rubric:
    """What one graded test is worth, as a grade records it."""

    test_id: str  # "<file>::<function>", as in the CLI's JSON (one id for all items of a parametrized test)
    name: str  # its docstring's first line
    points: float
    visibility: str  # "visible" (public suite) | "hidden"


# The one parameter id of ``subject`` in a collection without submissions (the rubric's).
NO_SUBMISSION = "rubric"


class GradingPlugin:
    def __init__(self, course: Course, subjects: dict[str, Subject], units: list[str], *, explore: bool = False):
        self.course, self.subjects, self.units, self.explore = course, subjects, units, explore
        self.views: dict[tuple[str, str], UnitSubject] = {}  # (submission, unit) -> what its tests get
        self.records: dict[tuple[str, str], TestResult] = {}
        self.units_of: dict[tuple[str, str], str] = {}  # (submission, test id) -> unit, in run order
        # unit -> test id -> what the test is worth, in collection order (public suite first)
        self.rubric: dict[str, dict[str, Rubric]] = {}
        self.unloaded: dict[UnitSubject, str] = {}  # a (submission, unit) view -> why that unit did not load

    # -- collection --------------------------------------------------------
    def pytest_configure(self, config):
        config.addinivalue_line("markers", "unit(name): the course unit a test module grades")
        config.addinivalue_line("markers", "points(n): what a test is worth")
        config.addinivalue_line("markers", "aspect(name): the side aspect a property checks (a device, a dtype, a "
                                           "layout...); unmarked, it checks values")
        use_profile(explore=self.explore)
        self._restore = [pin_local_constants(), memoize_digests()]

    def pytest_unconfigure(self, config):
        for restore in self._restore:
            restore()

    def pytest_generate_tests(self, metafunc):
        if "subject" in metafunc.fixturenames:
            marker = metafunc.definition.get_closest_marker("unit")
            if marker is None or not marker.args:
                raise CourseError(f"{metafunc.definition.nodeid}: a graded test module needs pytestmark = pytest.mark.unit(...)")
            if not self.subjects:  # the rubric's collection: one item per test, which never runs
                metafunc.parametrize("subject", [None], ids=[NO_SUBMISSION], scope="session")
                return
            views = [self.views.setdefault((sid, marker.args[0]), UnitSubject(s, marker.args[0]))
                     for sid, s in self.subjects.items()]
            metafunc.parametrize("subject", views, ids=list(self.subjects), scope="session")

    def pytest_ignore_collect(self, collection_path: Path, config):
        units = _UNITS_OF_MODULE.get(_module_key(collection_path))  # (only modules are ever learnt)
        return True if units is not None and units.isdisjoint(self.units) else None

    def pytest_collection_modifyitems(self, session, config, items):
        learnt: dict[Path, set[str]]  # test module -> the units its items grade
        kept, learnt = [], {}
        for item in items:
            unit, worth = self._rubric_of(item)
            learnt.setdefault(Path(str(item.path)), set()).add(unit)
            if unit in self.units:
                kept.append(item)
                known = self.rubric.setdefault(unit, {}).setdefault(worth.test_id, worth)
                if known != worth:
                    raise CourseError(f"{item.nodeid}: the items of {worth.test_id} disagree on what it is "
                                      f"worth ({known} and {worth}): a parametrized test is one property")
        items[:] = kept
        for path, units in learnt.items():
            if (key := _module_key(path)) is not None:
                _UNITS_OF_MODULE[key] = frozenset(units)

    def _describe(self, item) -> tuple[str, float, str]:
        unit = item.get_closest_marker("unit")
        points = item.get_closest_marker("points")
        doc = (getattr(item.obj, "__doc__", None) or "").strip()
        if unit is None or points is None or not doc or "subject" not in item.fixturenames:
            raise CourseError(f"{item.nodeid}: a graded test needs a unit marker, a points marker, a docstring and `subject`")
        if unit.args[0] not in self.course.units:
            raise CourseError(f"{item.nodeid}: unknown unit {unit.args[0]!r}")
        return unit.args[0], float(points.args[0]), doc.splitlines()[0].strip()

    def _rubric_of(self, item) -> tuple[str, Rubric]:
        """(unit, what the test is worth): the same for every item of one test function."""
        unit, points, name = self._describe(item)
        path = Path(str(item.path))
        visibility = "visible" if path.is_relative_to(self.course.public_tests) else "hidden"
        return unit, Rubric(f"{path.name}::{item.originalname}", name, points, visibility)

    # -- running -----------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """A unit that did not load fails every test in its setup, with the same message (a subject
        keeps a unit's status): after its first test, the others are recorded so without running
        pytest's protocol for each (a submission missing five units cost 0.6 s in it)."""
        view = getattr(item, "callspec", None) and item.callspec.params.get("subject")
        problem = self.unloaded.get(view) if view is not None else None
        if problem is None:
            return None
        # What pytest's own teardown of the item does (its private state: the public hook would run the
        # logging and capture teardowns of a setup that never ran).
        item.session._setupstate.teardown_exact(nextitem)
        cases.forget()
        self._record(item, _unloaded(problem))
        return True

    def pytest_runtest_setup(self, item):
        view = item.callspec.params["subject"]
        view.subject.begin(item.nodeid)
        cases.forget()
        problem = view.subject.status(view.unit)
        if problem:
            self.unloaded[view] = problem
            raise _unloaded(problem)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.failed:
            self._record(item, call.excinfo.value if call.excinfo else None)
            return
        key, _unit, name, worth = self._key(item)
        test_id, points, visibility = worth.test_id, worth.points, worth.visibility
        before = self.records.get(key)
        if before is not None and before.status == "failed":
            pass  # an item of the same test failed: a later item's pass or skip does not undo it
        elif report.skipped and before is None:
            reason = call.excinfo.value.msg if call.excinfo and hasattr(call.excinfo.value, "msg") else "skipped"
            # A skipped test counts neither way, so scores do not depend on the machine.
            self.records[key] = TestResult(test_id, name, 0.0, 0.0, "skipped", reason, visibility)
        elif report.when == "call" and report.passed:
            self.records[key] = TestResult(test_id, name, points, points, "passed", "", visibility)

    def _key(self, item) -> tuple[tuple[str, str], str, str, Rubric]:
        """((submission, test id), unit, the title in the student's language, what the test is worth)."""
        unit, worth = self._rubric_of(item)
        key = (_subject_id(item, self.subjects), worth.test_id)  # a parametrized test's items share it
        self.units_of.setdefault(key, unit)
        return key, unit, _(worth.name), worth  # the id as it is

    def _record(self, item, error: BaseException | None) -> None:
        """``item`` failed with ``error``: its test fails, whatever its other items do."""
        key, unit, name, worth = self._key(item)
        repro = f"{self.course.brand.command} repro {unit} {item.originalname}"
        message = failure_message(error, repro) if error is not None else _("failed")
        self.records[key] = TestResult(worth.test_id, name, 0.0, worth.points, "failed", message, worth.visibility)

    # -- results -----------------------------------------------------------
    def results(self) -> dict[str, GradeResult]:
        graded = {sid: GradeResult(submission=str(s.folder)) for sid, s in self.subjects.items()}
        for name in self.units:
            for sid, subject in self.subjects.items():
                tests = [self.records[key] for key, u in self.units_of.items() if key[0] == sid and u == name]
                graded[sid].units[name] = unit_result(self.course.units[name], subject, tests, self.course.rules,
                                                      tuple(self.course.units))
        return graded


def _unloaded(problem: str) -> BaseException:
    """The failure of a test whose unit did not load (the subject's words, maybe from the sandbox's
    box: in English)."""
    return pytest.fail.Exception(translate_text(problem), pytrace=False)


def _subject_id(item, subjects: dict) -> str:
    subject = item.callspec.params["subject"].subject
    return next(sid for sid, s in subjects.items() if s is subject)
