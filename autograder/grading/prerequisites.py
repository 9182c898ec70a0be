"""Point at the unit at fault: what a unit's result owes to the units it builds on.

A unit builds on another when its file imports it (``from .other import ...``, at any depth of
the file, followed from file to file: a unit also builds on what its siblings import). Where
those files are missing or do not parse, the course's ``stand_ins`` say it instead. Nothing here
knows a course: every unit, file and stand-in comes from the manifest and the submission.

Two ways a grade runs a unit's siblings, and so two truthful things to say:

* **Own siblings** (``check``: the public tests on the student's own files, in process). A unit
  that fails while a unit it builds on fails its own checks is told so first: which of the
  student's files it uses, how many of their own checks they fail, which to fix first, and which
  of the unit's points are at stake there. Those points are measured: while each test runs,
  :class:`Watch` records which unit files' code ran (``sys.settrace``, a call-event filter that
  asks nothing of the code under test), so a failed check counts only where it ran the failing
  file's code (measured: a public check of every unit took 0.75 CPU-s watched, 0.60 unwatched).
  Where nothing was recorded (a sandboxed check, whose code runs in a worker), the sentence says
  which points those could be, not which they are.
* **Stand-ins** (``grade``, a platform's grade, ``grade-batch``, an isolated Classroom check). The unit was graded
  with the course's trusted stand-ins in place of the student's siblings, so none of its points
  depend on them; a unit whose stood-in sibling fails its own checks says so, whether or not the
  unit lost points: the student learns why ``check`` and the grade disagree, and where to look.

The sentence goes in the unit's ``message`` (a graded unit has none of its own), which every
report writes first: the table's row above the unit's results, Markdown's status column, the
JUnit suite's ``message`` property, Gradescope's and PrairieLearn's ``output`` notes, the
Classroom payload's leading note, the JSON's ``message`` (Gradescope's results.json admits no key
of its own, so its ``output`` text carries it). A unit that is not graded (unavailable,
forbidden) keeps its own message.
"""
from __future__ import annotations

import ast
import contextlib
import sys
from pathlib import Path

from autograder.core.i18n import _
from autograder.core.manifest import CourseUnits
from autograder.core.results import GradeResult, UnitResult


# -- which unit builds on which ------------------------------------------------------------------

def imports(course: CourseUnits, folder: Path) -> dict[str, list[str]]:
    """unit -> the sibling units its file in ``folder`` imports directly, in course order; a unit
    whose file is missing or does not parse falls back on its ``stand_ins`` (what the course
    says it builds on)."""
    stems = {Path(u.file).stem: u.name for u in course.units.values()}
    order = list(course.units)
    found: dict[str, list[str]] = {}
    for unit in course.units.values():
        named = _imported(folder / unit.file, stems)
        if named is None:
            named = set(unit.stand_ins) & set(order)
        named.discard(unit.name)
        found[unit.name] = [u for u in order if u in named]
    return found


def _imported(path: Path, stems: dict[str, str]) -> set[str] | None:
    """The units ``path`` imports relatively (``from .x import``, ``from . import x``), or None."""
    try:
        tree = ast.parse(path.read_bytes())  # (bytes: Python's own reading of a coding cookie)
    except (OSError, SyntaxError, ValueError, LookupError):
        return None
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.module:
                head = node.module.split(".")[0]
                if head in stems:
                    found.add(stems[head])
            else:
                found |= {stems[a.name] for a in node.names if a.name in stems}
    return found


def reach(graph: dict[str, list[str]], unit: str) -> dict[str, str | None]:
    """Every unit ``unit`` builds on, directly or not -> None where it imports it itself, else the
    unit it imports through which it is reached first (breadth first, in course order)."""
    via: dict[str, str | None] = {}
    queue: list[tuple[str, str | None]] = [(d, None) for d in graph.get(unit, [])]
    while queue:
        dep, through = queue.pop(0)
        if dep == unit or dep in via:
            continue
        via[dep] = through
        queue += [(d, through or dep) for d in graph.get(dep, [])]
    return via


# -- which unit files' code each test ran --------------------------------------------------------

_WATCHES: list["Watch"] = []


def watchers() -> list:
    """The pytest plugins of the watches now open (:func:`autograder.grading.grade._run` adds them)."""
    return [w.plugin for w in _WATCHES if w.plugin is not None]


class Watch:
    """While open, records for each test of a submission graded in this process which of its
    unit files' code ran during the test's call (never its set-up, where a unit's module loads):
    :meth:`units_ran`. ``traced`` says whether any test was watched here at all (a sandboxed
    grade runs the code in a worker: nothing is)."""

    def __init__(self, course: CourseUnits, folders: list[Path]):
        self.files = {str(Path(f).resolve() / u.file): u.name for f in folders for u in course.units.values()}
        self.ran: dict[tuple[str, str], set[str]] = {}  # (folder, "<file>::<function>") -> units
        self.traced = False
        self.plugin: object | None = None

    def __enter__(self) -> "Watch":
        self.plugin = _Plugin(self)
        _WATCHES.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _WATCHES.remove(self)

    def units_ran(self, folder: Path, test_id: str) -> set[str]:
        """The units whose files' code a test of ``folder`` ran (``test_id`` as the results give it)."""
        return self.ran.get((str(Path(folder).resolve()), test_id), set())


class _Plugin:
    """The watch's pytest hook (pytest is imported by the grader, never by this module's import)."""

    def __init__(self, watch: Watch):
        import pytest

        self.watch = watch

        def pytest_runtest_call(item):
            yield from self._call(item)

        self.pytest_runtest_call = pytest.hookimpl(hookwrapper=True)(pytest_runtest_call)

    def _call(self, item):
        params = getattr(getattr(item, "callspec", None), "params", {})
        folder = getattr(getattr(params.get("subject"), "subject", None), "folder", None)
        if folder is None:
            yield
            return
        key = (str(Path(folder).resolve()), f"{Path(str(item.path)).name}::{item.originalname}")
        hits = self.watch.ran.setdefault(key, set())
        files, previous = self.watch.files, sys.gettrace()

        def trace(frame, event, arg):  # called at each new frame only: it returns no local tracer of its own
            unit = files.get(frame.f_code.co_filename)
            if unit is not None:
                hits.add(unit)
            return previous(frame, event, arg) if previous is not None else None

        self.watch.traced = True
        sys.settrace(trace)
        try:
            yield
        finally:
            sys.settrace(previous)


@contextlib.contextmanager
def watch(course: CourseUnits, folders: list[Path], *, enabled: bool = True):
    """A :class:`Watch` over ``folders``, open while the block grades (``enabled`` false: one
    that records nothing, for a grade whose code runs elsewhere)."""
    found = Watch(course, folders)
    if not enabled:
        yield found
        return
    with found:
        yield found


# -- what the report says -----------------------------------------------------------------------

def _failed(unit: UnitResult) -> list:
    return [t for t in unit.tests if t.status == "failed"]


def _checks(unit: UnitResult) -> int:
    return sum(t.status != "skipped" for t in unit.tests)


def annotate(course: CourseUnits, result: GradeResult, folder: Path, *, stand_ins: bool,
             watched: Watch | None = None) -> GradeResult:
    """Set the message of each graded unit of ``result`` whose result owes something to a unit it
    builds on that fails its own checks (``folder``: the submission as graded). ``stand_ins``:
    the unit was graded with the course's stand-ins in place of its siblings (``grade``);
    otherwise with the student's own (``check``), ``watched`` saying which code each test ran."""
    graph = imports(course, Path(folder))
    for unit in result.units.values():
        if unit.status != "graded" or unit.message:
            continue
        via = reach(graph, unit.name)
        if stand_ins:
            via = {d: v for d, v in via.items() if d in course.units[unit.name].stand_ins}
        failing = [d for d in course.units if d in via and d in result.units and _failed(result.units[d])]
        if not failing:
            continue
        if stand_ins:
            unit.message = _graded_with_stand_ins(course, result, unit, failing)
        elif _failed(unit):
            unit.message = _uses_yours(course, result, unit, failing, via, graph, folder, watched)
    return result


def _join(items: list[str], template: str) -> str:
    """``items`` joined two by two with ``template`` (its ``{first}`` and ``{second}``), translated:
    each language its own list and sentence punctuation."""
    joined = items[0]
    for item in items[1:]:
        joined = template.format(first=joined, second=item)
    return joined


def _files(course: CourseUnits, units: list[str]) -> str:
    return _join([course.units[u].file for u in units], _("{first}, {second}"))


def _graded_with_stand_ins(course: CourseUnits, result: GradeResult, unit: UnitResult, failing: list[str]) -> str:
    yours = _join([_("your {file} fails {failed} of its {total} checks").format(
        file=course.units[d].file, failed=len(_failed(result.units[d])), total=_checks(result.units[d]))
        for d in failing], _("{first}; {second}"))
    return _("{unit} was graded with the course's own {files} in place of yours, so none of its points depend on "
             "yours: {yours}.").format(unit=unit.name, files=_files(course, failing), yours=yours)


def _uses_yours(course: CourseUnits, result: GradeResult, unit: UnitResult, failing: list[str],
                via: dict[str, str | None], graph: dict[str, list[str]], folder: Path, watched: Watch | None) -> str:
    clauses = []
    for dep in sorted(failing, key=lambda d: via[d] is not None):  # what it imports itself first
        counts = {"unit": unit.name, "file": course.units[dep].file, "failed": len(_failed(result.units[dep])),
                  "total": _checks(result.units[dep])}
        importer = via[dep]
        if importer is None:
            clauses.append(_("{unit} uses your {file}, which fails {failed} of its {total} checks").format(**counts))
        else:
            clauses.append(_("{unit} uses your {file} through {via}, and {file} fails {failed} of its {total} "
                             "checks").format(via=course.units[importer].file, **counts))
    # Fix first the failing units that build on no other failing one.
    roots = [d for d in failing if not any(o in reach(graph, d) for o in failing if o != d)] or failing
    lead = _("{uses}: fix {units} first.").format(uses=_join(clauses, _("{first}; {second}")),
                                                  units=_join(roots, _("{first}, {second}")))
    failed = _failed(unit)
    files = _files(course, failing)
    sentences = _("{first} {second}")
    if watched is None or not watched.traced:
        stake = _("Points at stake: up to {points:g}, in {unit}'s {failed} failed checks (which of them run your "
                  "{files} is not recorded when the checks run sandboxed).").format(
            points=sum(t.max_score for t in failed), unit=unit.name, failed=len(failed), files=files)
        return sentences.format(first=lead, second=stake)
    through = [t for t in failed if watched.units_ran(folder, t.id) & set(failing)]
    if not through:
        stake = _("None of {unit}'s {failed} failed checks runs your {files}: those failures are {unit}'s "
                  "own.").format(unit=unit.name, failed=len(failed), files=files)
    else:
        stake = _("Points at stake: {points:g}, in {count} of {unit}'s {failed} failed checks, which run your "
                  "{files}.").format(points=sum(t.max_score for t in through), count=len(through), unit=unit.name,
                                     failed=len(failed), files=files)
    return sentences.format(first=lead, second=stake)
