"""Instructors at scale (issue 59): a changed grader regrades what it touches, and only graded work
gets a number in a gradebook.

The class is graded by the real ``attn-course grade-batch`` against a copy of the course (its
manifest, stand-ins, catalogues, both suites and the API page, under ``$AUTOGRADER_COURSE_ROOT``),
so a test may change a hidden property's points without touching the repository's suites. The
gradebooks are the default one and the LMS layouts Canvas and Moodle import (their export layouts,
as tests/vendor/lms/ holds them).
"""
from __future__ import annotations

import csv
import json
import re
import shutil
import zipfile
from pathlib import Path

from conftest import ROOT, attn_course
from autograder.authoring.rubric import rubric
from autograder.core.manifest import load_course
from autograder.delivery import fingerprint
from autograder.delivery.formats import markdown_text

UNIT = "attention"
COURSE = load_course(ROOT)
TITLE = COURSE.units[UNIT].title
SOLUTION = (ROOT / "solutions" / "attention.py").read_text(encoding="utf-8")
# What grading reads of a course (the grader's own files are the installed engine).
COURSE_PARTS = ("course/course.toml", "course/stand_ins", "course/locale", "tests/hidden", "tests/public",
                "docs/course-api.md")
NEEDS_ATTENTION = 4
TOTAL = sum(r.points for r in rubric(COURSE, UNIT))  # the unit's points, as the suites declare them
POSSIBLE = f"{TOTAL:g}"


def course_copy(dest: Path) -> Path:
    for part in COURSE_PARTS:
        source, target = ROOT / part, dest / part
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copyfile(source, target)
    return dest


def batch(root: Path, subs: Path, out: Path, *extra: str):
    return attn_course("grade-batch", str(subs), "-o", str(out), "--unit", UNIT, "--no-progress", *extra,
                       check=False, env={"AUTOGRADER_COURSE_ROOT": str(root)})


def rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def a_class(subs: Path) -> None:
    """carol and frank honest (frank on no roster), a clash (zed/ and zed.zip), a corrupt zip (dave);
    erin is on the rosters and hands in nothing."""
    for name in ("carol", "frank"):
        (subs / name).mkdir(parents=True)
        (subs / name / "attention.py").write_text(SOLUTION, encoding="utf-8")
    (subs / "zed").mkdir()
    (subs / "zed" / "attention.py").write_text(SOLUTION, encoding="utf-8")
    with zipfile.ZipFile(subs / "zed.zip", "w") as zf:
        zf.writestr("attention.py", SOLUTION)
    (subs / "dave.zip").write_bytes(b"not a zip")


def canvas_roster(path: Path) -> str:
    column = f"{TITLE} (52001)"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([
            ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column],
            ["    Points Possible", "", "", "", "", POSSIBLE],
            *([f"{n.title()}, A", str(1001 + i), "", n, "A", ""] for i, n in enumerate(("carol", "zed", "dave", "erin")))])
    return column


def moodle_roster(path: Path) -> str:
    column = f"Assignment: {TITLE} (Real)"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([
            ["First name", "Last name", "ID number", "Email address", column],
            *([n.title(), "A", n, f"{n}@example.edu", "-" if n == "erin" else ""]
              for n in ("carol", "zed", "dave", "erin"))])
    return column


def test_refused_and_missing_students_are_blank_in_every_gradebook(tmp_path):
    """A clash, a refused upload and a missing one: blank (never 0) in gradebook.csv, Canvas's and
    Moodle's gradebooks; the reason in summary.md and in the closing line, which names the upload no
    roster holds; the exit code says some students need attention."""
    root, subs = course_copy(tmp_path / "root"), tmp_path / "subs"
    a_class(subs)
    first = batch(root, subs, tmp_path / "plain")
    assert first.returncode == NEEDS_ATTENTION, first.stderr[-2000:]
    book = {r[0]: r for r in rows(tmp_path / "plain" / "gradebook.csv")}
    assert book["carol"][1:] == ["graded", POSSIBLE, POSSIBLE] and book["frank"][1:] == ["graded", POSSIBLE, POSSIBLE]
    assert book["zed"][1].startswith("name clash") and book["zed"][2:] == ["", ""], book["zed"]
    assert "not a readable zip" in book["dave"][1] and book["dave"][2:] == ["", ""], book["dave"]
    summary = (tmp_path / "plain" / "summary.md").read_text(encoding="utf-8")
    assert "## Not graded (blank in every gradebook)" in summary and "name clash" in summary
    assert "not a readable zip" in summary
    closing = first.stdout.strip().splitlines()[-1]
    assert "2 not graded" in closing and "zed: name clash" in closing and "dave: " in closing, closing
    assert json.loads((tmp_path / "plain" / "summary.json").read_text())["needs_attention"] == 2

    column = canvas_roster(tmp_path / "canvas.csv")
    canvas = batch(root, subs, tmp_path / "canvas", "--csv", "canvas", "--roster", str(tmp_path / "canvas.csv"))
    assert canvas.returncode == NEEDS_ATTENTION, canvas.stderr[-2000:]
    out = rows(tmp_path / "canvas" / "gradebook.csv")
    cells = {r[3]: r[out[0].index(column)] for r in out[2:]}
    assert cells == {"carol": POSSIBLE, "zed": "", "dave": "", "erin": ""}, cells
    assert out[1][out[0].index(column)] == POSSIBLE
    closing = canvas.stdout.strip().splitlines()[-1]
    assert "1 uploads not on the roster: frank" in closing and "1 on the roster with no upload" in closing, closing
    unmatched = {r[0]: r for r in rows(tmp_path / "canvas" / "unmatched.csv")}
    assert unmatched["frank"][3:] == [POSSIBLE, POSSIBLE]

    column = moodle_roster(tmp_path / "moodle.csv")
    moodle = batch(root, subs, tmp_path / "moodle", "--csv", "moodle", "--roster", str(tmp_path / "moodle.csv"))
    assert moodle.returncode == NEEDS_ATTENTION
    out = rows(tmp_path / "moodle" / "gradebook.csv")
    cells = {r[2]: r[out[0].index(column)] for r in out[1:]}
    assert cells == {"carol": POSSIBLE, "zed": "", "dave": "", "erin": "-"}, cells  # "-": Moodle's own "no grade"

    # Everyone graded and on the roster: exit 0.
    for name in ("zed.zip", "dave.zip", "frank"):
        (subs / name).unlink() if name.endswith(".zip") else shutil.rmtree(subs / name)
    clean = batch(root, subs, tmp_path / "canvas", "--csv", "canvas", "--roster", str(tmp_path / "canvas.csv"))
    assert clean.returncode == 0, clean.stdout[-2000:] + clean.stderr[-2000:]


def test_nbgrader_export_blanks_reach_the_lms(tmp_path):
    """The `lms` path: the nbgrader export's blank scores (a notebook not submitted, a student not
    collected) stay blank in Canvas's gradebook, and nobody's graded score is lost."""
    grades = tmp_path / "grades.csv"
    grades.write_text("assignment,duedate,timestamp,student_id,last_name,first_name,email,raw_score,"
                      "late_submission_penalty,score,max_score,status\n"
                      f"{UNIT},,2026-01-02 10:00:00,carol,,,,{TOTAL},0.0,{TOTAL},{TOTAL},graded\n"
                      f"{UNIT},,,erin,,,,,,,{TOTAL},not submitted\n"
                      f"{UNIT},,,zed,,,,,,,{TOTAL},not collected: two copies of attention.ipynb\n", encoding="utf-8")
    column = canvas_roster(tmp_path / "canvas.csv")
    out = tmp_path / "canvas_import.csv"
    attn_course("lms", "canvas", str(grades), "--roster", str(tmp_path / "canvas.csv"), "-o", str(out),
                "--unit", UNIT)
    got = rows(out)
    cells = {r[3]: r[got[0].index(column)] for r in got[2:]}
    assert cells == {"carol": POSSIBLE, "zed": "", "dave": "", "erin": ""}, cells


def _raise_points(root: Path) -> str:
    """The first 2-point hidden property of the copy's suite made worth 5; returns its file's name."""
    suite = root / "tests" / "hidden" / f"test_{UNIT}_properties.py"
    text = suite.read_text(encoding="utf-8")
    assert "@pytest.mark.points(2)\n" in text
    suite.write_text(text.replace("@pytest.mark.points(2)\n", "@pytest.mark.points(5)\n", 1), encoding="utf-8")
    return suite.relative_to(root).as_posix()


def test_a_changed_grader_regrades_and_says_why(tmp_path):
    """A hidden property raised from 2 to 5 points: the next run grades every student again (not
    only the changed uploads), the gradebook's Points Possible and the honest score are 3 more, and the
    summary says what changed; a run after that grades nobody."""
    root, subs, out = course_copy(tmp_path / "root"), tmp_path / "subs", tmp_path / "out"
    for name in ("carol", "bob"):
        (subs / name).mkdir(parents=True)
        (subs / name / "attention.py").write_text(SOLUTION, encoding="utf-8")
    assert batch(root, subs, out).returncode == 0
    book = {r[0]: r for r in rows(out / "gradebook.csv")}
    assert book["Points Possible"][2] == book["carol"][2] == POSSIBLE
    assert batch(root, subs, out).returncode == 0
    assert json.loads((out / "summary.json").read_text())["graded_now"] == 0, "nothing changed: nothing regraded"

    changed = _raise_points(root)
    proc = batch(root, subs, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["graded_now"] == 2
    # (The course's files are named first: the engine's own may change too, under other hands.)
    [(reason, count)] = summary["regraded"].items()
    assert reason.startswith(f"grader changed: {changed}") and count == 2, summary["regraded"]
    assert markdown_text(f"grader changed: {changed}") in (out / "summary.md").read_text(encoding="utf-8")
    assert f"grader changed: {changed}" in proc.stdout
    book = {r[0]: r for r in rows(out / "gradebook.csv")}
    assert book["Points Possible"][2] == book["carol"][2] == book["bob"][2] == f"{TOTAL + 3:g}", book
    title = (out / "class_report.md").read_text(encoding="utf-8").splitlines()[0]
    assert "partial regrade" in title and "not graded" in title, "graded with --unit: a partial report says so"
    record = json.loads((out / "students" / "carol.json").read_text())
    assert record["result"]["units"][UNIT]["max_score"] == TOTAL + 3
    assert batch(root, subs, out).returncode == 0
    assert json.loads((out / "summary.json").read_text())["graded_now"] == 0


def test_the_fingerprint_covers_suites_stand_ins_manifest_engine_and_versions(tmp_path):
    course = load_course(course_copy(tmp_path / "root"))
    parts = fingerprint.parts(course)
    names = set(parts)
    assert {"course/course.toml", f"tests/hidden/test_{UNIT}_properties.py", "course/stand_ins/attention.py",
            "torch version", "hypothesis version", "pytest version", "python version"} <= names
    assert any(re.fullmatch(r"engine: autograder/core/\w+\.py", n) for n in names)
    before = fingerprint.fingerprint(course)
    (tmp_path / "root" / "course" / "stand_ins" / "attention.py").write_text("# changed\n", encoding="utf-8")
    after = fingerprint.fingerprint(course)
    assert after["digest"] != before["digest"]
    assert fingerprint.changed(before, after) == ["course/stand_ins/attention.py"]
    assert fingerprint.changed(None, after) == ["no fingerprint recorded"]
    many = fingerprint.reason([f"f{i}" for i in range(6)])
    assert many == "grader changed: f0, f1, f2, f3 and 2 more"
