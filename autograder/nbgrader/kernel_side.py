"""What the notebook's cells call, inside the student's kernel: a student running the
notebook, or a plain ``nbgrader autograde``. Nothing here counts for the course's own
``nbgrader autograde`` (:mod:`autograder.nbgrader.pipeline`), which runs no kernel: it
grades every grade cell outside the notebook.
"""
from __future__ import annotations

import types
import warnings
from pathlib import Path

from autograder.core.i18n import _
from autograder.core.manifest import Course, load_course

_siblings: dict[str, dict[str, types.ModuleType]] = {}  # unit -> its siblings, loaded once per kernel
_spoken: list[str] = []  # the language a cell of this kernel chose: what later cells print in


def speak(namespace: dict | None = None, *, default: bool = True) -> str:
    """The language this kernel's cells print in (test results, the demos' lines, plot labels): the
    notebook's own, which its setup cell sets (``LANG``; a lesson or notebook built in Chinese says
    "zh") once that cell has run; else the one an earlier cell chose; else, with ``default``,
    course.toml's ``[course] language`` (a student bundle's is the one it was released in). Chosen
    for the whole kernel (:func:`autograder.core.i18n.choose`); a language the course has no
    catalogue in is a ValueError naming those it has."""
    from autograder.core import i18n

    lang = (namespace or {}).get("LANG")
    if lang is None and (_spoken or not default):
        return i18n.language()
    course = load_course()
    lang = lang or course.language
    if i18n.language() != lang or i18n.course_locale() != course.locale:
        i18n.choose(lang, course.locale)
    _spoken[:] = [lang]
    return lang


def sibling(unit: str, name: str) -> types.ModuleType:
    """The sibling ``name`` that ``unit``'s notebook uses: the grader's trusted stand-in where the
    course has it (the instructor's and the grader's machines), else the student's own file,
    in the course's assignments folder, as ``check`` uses it (a student's copy of the course
    holds no stand-ins). Loaded once, so every name a cell imports comes from one module."""
    course = load_course()
    spec = course.units[unit]
    if name not in spec.stand_ins:
        raise ImportError(f"{unit} has no stand-in for {name} in course.toml")
    if unit not in _siblings:
        from autograder.trust.loader import load_folder, load_stand_ins

        trusted = all((course.root / path).is_file() for path in spec.stand_ins.values())
        _siblings[unit] = load_stand_ins(course, spec) if trusted else load_folder(course, course.assignments)
    if name not in _siblings[unit]:
        raise ImportError(f"this notebook needs your {course.units[name].file} in {course.assignments}")
    return _siblings[unit][name]


def _kernel_subject(course: Course, unit: str, namespace: dict):
    from autograder.trust.subject import InProcessSubject

    # The folder of the code under test: a failure names its file and line there (a lesson may test
    # the student's assignments/ file, not the notebook's own cells).
    where = Path(namespace["__file__"]).resolve().parent if namespace.get("__file__") else Path.cwd()
    subject = InProcessSubject(course, where, isolate=False)
    subject.provide(unit, namespace)
    return subject


def public_test(unit: str, test_id: str, namespace: dict) -> None:
    """Run one public test on the notebook's own definitions; raise if it fails."""
    import importlib.util

    from autograder.grading.determinism import use_profile
    from autograder.grading.messages import failure_message
    from autograder.core.cases import UnitSubject

    speak(namespace)
    course = load_course()
    filename, function = test_id.split("::")
    path = course.public_tests / filename
    spec = importlib.util.spec_from_file_location(f"_notebook_public_{path.stem}", path)
    assert spec is not None and spec.loader is not None  # a .py file's
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    test = getattr(module, function)
    doc = _((test.__doc__ or function).strip().splitlines()[0])  # the property's title, as check shows it
    use_profile()
    message: str | None  # None: the test passed
    with warnings.catch_warnings(record=True) as caught:  # warnings to stdout: stderr would read as a failure
        warnings.simplefilter("always")
        try:
            test(UnitSubject(_kernel_subject(course, unit, namespace), unit))
        except Exception as error:  # noqa: BLE001 - reported as the test's failure
            message = failure_message(error)
        else:
            message = None
    for warning in caught:
        print(_("warning: {kind}: {message}").format(kind=warning.category.__name__, message=warning.message))
    if message is not None:
        raise AssertionError(_("{title}: {message}").format(title=doc, message=message)) from None
    print(_("passed: {title}").format(title=doc))


def _course_dir_of_autograded() -> Path | None:
    """During ``nbgrader autograde`` the kernel runs in <course>/autograded/<student>/<assignment>."""
    cwd = Path.cwd()
    return cwd.parents[2] if len(cwd.parents) > 2 and cwd.parents[1].name == "autograded" else None


def hidden_tests(unit: str) -> None:
    """The hidden properties, graded out of this kernel by the CLI's ``grade``.

    Where the kernel can read the course (a plain ``nbgrader autograde`` without the
    sandbox), it grades the notebook file being autograded (never the kernel's objects) in a
    subprocess, prints each failed property with its counterexample, and raises if any
    failed. Elsewhere (a student's own run, the sandboxed kernel) it says where they run.
    """
    from autograder.nbgrader.extract import module_source, read_notebook
    from autograder.nbgrader.rescore import grade_sources, hidden_report

    speak()
    course = load_course()
    course_dir = _course_dir_of_autograded() or course.nbgrader_course
    layout = read_notebook(course_dir / "source" / unit / f"{unit}.ipynb")  # nbgrader's own folder name
    submitted = read_notebook(Path.cwd() / f"{unit}.ipynb")
    if layout is None or submitted is None:
        print(_("The hidden properties run only when the instructor grades this notebook."))
        return
    result = grade_sources(course, {"notebook": {unit: module_source(layout, submitted, course.brand.metadata_key)}}, [unit])["notebook"]
    lines, failed = hidden_report(result, unit)
    print(lines)
    if failed:
        raise AssertionError(_("{failed} hidden properties failed").format(failed=failed))
