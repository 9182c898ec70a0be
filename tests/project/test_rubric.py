"""One rubric: what a test is worth is what the grading plugin records when it collects the suites
(``autograder.authoring.rubric``), for the CLI's refused folders, the batch's gradebook, the
notebooks' cells and these tests alike; nothing reads the points markers a second time.

A parametrized graded test is one property (``autograder/grading/plugin.py``): one test id, worth
its points once in the rubric and in the grade, failed when any of its items fails.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import mutants
from autograder.authoring.rubric import rubric, rubrics
from autograder.core.manifest import MANIFEST, ROOT_ENV, load_course
from autograder.core.errors import GraderError
from conftest import ROOT, attn_course, grade_json

COURSE = load_course(ROOT)


def worth(tests) -> list[tuple]:
    """(id, name, points, visibility) of each test of a rubric, or of a grade's records."""
    return [(t.test_id, t.name, t.points, t.visibility) if hasattr(t, "test_id")
            else (t["id"], t["name"], t["max_score"], t["visibility"]) for t in tests]


@pytest.mark.parametrize("unit", mutants.grouped(COURSE.units))
def test_the_rubric_is_what_a_grade_of_the_reference_records(unit):
    """The same tests, in the same order, with the same names, points and visibility. (The
    reference's grade of one unit, in-process: the one the unit's mutant catalogue grades, so a
    whole run grades it once.)"""
    (graded,) = grade_json([COURSE.solutions], [unit], "--no-sandbox")
    tests, expected = graded["units"][unit]["tests"], rubric(COURSE, unit)
    assert [(t["id"], t["name"], t["visibility"]) for t in tests] == [
        (r.test_id, r.name, r.visibility) for r in expected] != []
    # What each is worth: its max_score, but for a skipped test, which counts neither way (the
    # informational CPU/CUDA ones, worth 0, on a machine without a GPU).
    for test, r in zip(tests, expected):
        assert test["status"] in ("passed", "skipped"), test
        assert test["max_score"] == (r.points if test["status"] == "passed" else 0.0), test
    assert graded["units"][unit]["max_score"] == sum(r.points for r in expected)


def test_a_units_tests_are_in_its_own_suites():
    """What the registry's check reads from each suite's ``pytestmark``, the collection agrees with."""
    for unit, tests in rubrics(COURSE).items():
        assert {t.test_id.split("::")[0] for t in tests} == {f"test_{unit}_public.py", f"test_{unit}_properties.py"}


def test_the_rubric_leaves_this_process_alone():
    """The suites are collected in a process of their own: none of their modules is imported here."""
    rubrics(COURSE)
    suites = (COURSE.public_tests, COURSE.hidden_tests)
    here = [name for name, module in list(sys.modules.items())
            if any(Path(getattr(module, "__file__", None) or "/").is_relative_to(s) for s in suites)]
    assert here == []


# A course of one unit whose hidden property is parametrized over three cases.
MANIFEST_TEXT = """[course]
name = "toy-course"

[paths]
solutions = "solutions"
assignments = "assignments"
hidden_tests = "tests/hidden"
public_tests = "tests/public"
lessons = "course/lessons"
nbgrader_course = "course"
api = "docs/api.md"
student_readme = "course/readme.md"
student_bundle = []

[branding]
command = "toy-course"
student_package = "toy-course-student"
metadata_key = "toy_course"
demo_tag = "toy-course-demo"

[units.toy]
title = "A toy unit"
file = "toy.py"
"""
PUBLIC = '''import pytest

pytestmark = pytest.mark.unit("toy")


@pytest.mark.points(1)
def test_double_two(subject):
    """double(2) is 4"""
    assert subject.call("double", 2) == 4
'''
HIDDEN = '''import pytest

pytestmark = pytest.mark.unit("toy")


@pytest.mark.points(3)
@pytest.mark.parametrize("x", [1, 2, 3])
def test_double_doubles(subject, x):
    """double(x) is 2x, for x in 1, 2, 3"""
    assert subject.call("double", x) == 2 * x
'''
SOLUTIONS = {"solutions": "def double(x):\n    return 2 * x\n",
             "buggy": "def double(x):\n    return 2 * x if x > 1 else x\n"}  # only the first case fails


def toy_course(root: Path, hidden: str = HIDDEN):
    for rel, text in {MANIFEST: MANIFEST_TEXT, "tests/public/test_toy_public.py": PUBLIC,
                      "tests/hidden/test_toy_properties.py": hidden,
                      **{f"{folder}/toy.py": code for folder, code in SOLUTIONS.items()}}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return load_course(root)


def test_a_parametrized_test_counts_once_in_the_rubric_and_in_the_grade(tmp_path):
    course = toy_course(tmp_path)
    expected = [("test_toy_public.py::test_double_two", "double(2) is 4", 1.0, "visible"),
                ("test_toy_properties.py::test_double_doubles", "double(x) is 2x, for x in 1, 2, 3", 3.0, "hidden")]
    assert worth(rubric(course, "toy")) == expected

    proc = attn_course("grade", str(tmp_path / "solutions"), str(tmp_path / "buggy"), "--no-sandbox",
                       "--format", "json", env={ROOT_ENV: str(tmp_path)})
    good, buggy = (result["units"]["toy"] for result in json.loads(proc.stdout))
    assert worth(good["tests"]) == worth(buggy["tests"]) == expected
    assert good["score"] == good["max_score"] == buggy["max_score"] == 4.0
    # Its first case fails and the two after it pass: the property fails, and is worth nothing.
    assert [(t["score"], t["status"]) for t in buggy["tests"]] == [(1.0, "passed"), (0.0, "failed")]
    assert buggy["score"] == 1.0


def test_the_items_of_a_test_must_agree_on_its_points(tmp_path):
    """A points marker per case, not one for the test: the rubric refuses cases worth different points."""
    hidden = HIDDEN.replace("@pytest.mark.points(3)\n", "").replace(
        "[1, 2, 3]", "[pytest.param(x, marks=pytest.mark.points(x)) for x in (1, 2, 3)]")
    assert hidden.count("points(") == 1
    course = toy_course(tmp_path, hidden)
    with pytest.raises(GraderError, match="disagree on what it is worth"):
        rubric(course, "toy")


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "in-process"])
def test_a_unit_that_does_not_load_fails_each_test_of_its_rubric_alike(tmp_path, sandbox):
    """The plugin records a unit's later tests without running them once its first has failed to
    load it, and the sandbox's host answers a missing file without a worker: neither may change the
    grade, so every test of the rubric is still in it, in order, failed with the load's own message."""
    (tmp_path / "attention.py").write_text("def softmax(x:\n", encoding="utf-8")  # a syntax error
    units = ["attention", "multi_head"]
    proc = attn_course("grade", str(tmp_path), *(a for u in units for a in ("--unit", u)), "--format", "json",
                       *([] if sandbox else ["--no-sandbox"]), check=False)
    graded = json.loads(proc.stdout)["units"]
    for unit in units:
        tests, expected = graded[unit]["tests"], rubric(COURSE, unit)
        assert worth(tests) == worth(expected) != [], unit
        said = {t["output"] for t in tests}
        assert len(said) == 1 and {t["status"] for t in tests} == {"failed"}, (unit, said)
        assert graded[unit]["score"] == 0, unit
    assert graded["multi_head"]["tests"][0]["output"] == "multi_head.py was not found in the submission"
    assert "attention.py" in graded["attention"]["tests"][0]["output"], graded["attention"]["tests"][0]["output"]
