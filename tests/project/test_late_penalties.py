"""Late work (issue 46, item 1): due dates and a penalty policy in course.toml, priced on the
trusted (re-scored) points, on both paths that know when work was handed in.

A student one day late under 10% a started day keeps 90% of the points the trusted grader gave
(26 of 62 -> 23.4), under ``zero`` nothing, and a classmate on time loses nothing: through the
real nbgrader, headless (the pipeline's own steps, as tests/project/test_nbgrader.py drives them),
and through ``attn-course grade-batch``. Both run the course with a due date and a policy of the
test's (the shipped course.toml sets none), given as a changed manifest object.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import mutants
from conftest import ROOT
from test_nbgrader import BUG, COURSE, _gid, _manual, _nb, fill
from autograder.core import lateness
from autograder.core.lateness import LatePolicy
from autograder.core.manifest import load_course
from autograder.delivery.batch import submission_time
from autograder.nbgrader import pipeline as steps

UNIT = "attention"
DUE = datetime.datetime(2027, 3, 1, 23, 59, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
ON_TIME = DUE - datetime.timedelta(hours=2)
ONE_DAY_LATE = DUE + datetime.timedelta(hours=20)  # one started day
PER_DAY = LatePolicy("per_day", 10.0)
ZERO = LatePolicy("zero")


def with_late(course, policy: LatePolicy):
    """``course`` with UNIT due at DUE under ``policy``."""
    units = {**course.units, UNIT: dataclasses.replace(course.units[UNIT], due=DUE)}
    return dataclasses.replace(course, units=units, late=policy)


def nbgrader_stamp(when: datetime.datetime) -> str:
    """A ``timestamp.txt`` as nbgrader's exchange writes it."""
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


# -- the policy ------------------------------------------------------------------------------

def test_days_are_started_days():
    day = 86_400
    assert [lateness.days_late(s) for s in (-5, 0, 1, day - 1, day, day + 1, 3 * day)] == [0, 0, 1, 1, 1, 2, 3]


def test_the_penalty_is_a_share_of_the_points_given_never_more():
    assert PER_DAY.penalty(26, 1) == 2.6 and PER_DAY.penalty(26, 86_401) == 5.2
    assert lateness.assess(PER_DAY, 26, ONE_DAY_LATE, DUE).score == 23.4
    assert PER_DAY.penalty(26, 12 * 86_400) == 26  # 120%: all of it, no score below 0
    assert ZERO.penalty(26, 1) == 26 and lateness.assess(ZERO, 26, ONE_DAY_LATE, DUE).score == 0
    assert LatePolicy().penalty(26, 10 * 86_400) == 0
    for policy in (PER_DAY, ZERO, LatePolicy()):
        assert policy.penalty(26, 0) == 0 and policy.penalty(26, -3600) == 0 and policy.penalty(0, 86_400) == 0
        assert lateness.assess(policy, 26, ON_TIME, DUE).score == 26


def _manifest(tmp_path: Path, units: str, late: str = "") -> Path:
    (tmp_path / "course").mkdir(parents=True, exist_ok=True)
    paths = "\n".join(f'{k} = "{k}"' for k in ("solutions", "assignments", "hidden_tests", "public_tests", "lessons",
                                                "nbgrader_course", "api", "student_readme"))
    (tmp_path / "course" / "course.toml").write_text(
        f'[course]\nname = "c"\n[paths]\n{paths}\nstudent_bundle = []\n'
        f'[branding]\ncommand = "c"\nstudent_package = "c"\nmetadata_key = "c"\ndemo_tag = "c"\n'
        f'{late}\n[units.u]\ntitle = "U"\nfile = "u.py"\n{units}\n', encoding="utf-8")
    return tmp_path


def test_course_toml_due_dates_and_policy(tmp_path):
    """``due``: a TOML offset date-time or ISO 8601 text with an offset; ``[late]``: the policy."""
    course = load_course(_manifest(tmp_path, "due = 2027-03-01T23:59:00+01:00", '[late]\npolicy = "per_day"\nrate = 10'))
    assert course.units["u"].due == DUE and course.late == PER_DAY
    assert load_course(_manifest(tmp_path, 'due = "2027-03-01T22:59:00Z"')).units["u"].due == DUE
    plain = load_course(_manifest(tmp_path, ""))
    assert plain.units["u"].due is None and plain.late == LatePolicy("none")
    for units, late, says in (("due = 2027-03-01T23:59:00", "", "no UTC offset"),
                              ("due = 2027-03-01", "", "no date-time"),
                              ("", '[late]\npolicy = "weekly"', "not one of"),
                              ("", '[late]\npolicy = "per_day"', "needs a rate"),
                              ("", '[late]\npolicy = "zero"\nrate = 10', "per_day only")):
        with pytest.raises(ValueError, match=says):
            load_course(_manifest(tmp_path, units, late))


def test_submission_time_timestamp_txt_wins_over_modification_times(tmp_path):
    def folder(name: str, mtime: datetime.datetime, stamp: str | None = None) -> Path:
        (tmp_path / name).mkdir()
        (tmp_path / name / "attention.py").write_text("x = 1\n")
        os.utime(tmp_path / name / "attention.py", (mtime.timestamp(),) * 2)
        if stamp is not None:
            (tmp_path / name / "timestamp.txt").write_text(stamp)
        return tmp_path / name

    assert submission_time(folder("stamped", ON_TIME, nbgrader_stamp(ONE_DAY_LATE))) == (ONE_DAY_LATE, "timestamp.txt")
    assert submission_time(folder("iso", ON_TIME, ONE_DAY_LATE.isoformat())) == (ONE_DAY_LATE, "timestamp.txt")
    assert submission_time(folder("plain", ON_TIME)) == (ON_TIME, "modification time")
    assert submission_time(folder("junk", ON_TIME, "yesterday-ish")) == (ON_TIME, "modification time (timestamp.txt unreadable)")
    archive = tmp_path / "zipped.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("timestamp.txt", nbgrader_stamp(ON_TIME))  # inside a zip: never read
        zf.writestr("attention.py", "x = 1\n")
    os.utime(archive, (ONE_DAY_LATE.timestamp(),) * 2)
    assert submission_time(archive) == (ONE_DAY_LATE, "modification time")


# -- nbgrader ----------------------------------------------------------------------------------

def _export(course, course_dir: Path, out: Path) -> dict[str, dict]:
    steps.step_export(course, course_dir, out)
    with out.open(newline="", encoding="utf-8") as handle:
        return {r["student_id"]: r for r in csv.DictReader(handle) if r["assignment"] == UNIT}


def test_nbgrader_prices_the_rescored_points(tmp_path, monkeypatch):
    """The real nbgrader gives unexecuted test cells full marks before the trusted re-scoring: the
    penalty must be a share of the re-scored points (10% of 26, not of 62), and be the only one,
    even with nbgrader's own plugin set to take everything."""
    course_dir = tmp_path / "course"
    (course_dir / "source").mkdir(parents=True)
    shutil.copytree(ROOT / "course" / "source" / UNIT, course_dir / "source" / UNIT)
    config = (ROOT / "course" / "nbgrader_config.py").read_text(encoding="utf-8")
    (course_dir / "nbgrader_config.py").write_text(config + '\nc.LateSubmissionPlugin.penalty_method = "zero"\n',
                                                   encoding="utf-8")
    per_day = with_late(COURSE, PER_DAY)
    steps.step_generate(per_day, course_dir, [UNIT])
    release, source = _nb(course_dir / "release" / UNIT / f"{UNIT}.ipynb"), _nb(course_dir / "source" / UNIT / f"{UNIT}.ipynb")
    inbox = tmp_path / "inbox"
    for student, when in (("late", ONE_DAY_LATE), ("ontime", ON_TIME)):
        (inbox / student).mkdir(parents=True)
        (inbox / student / f"{UNIT}.ipynb").write_text(json.dumps(fill(release, source, UNIT, bug=True)), encoding="utf-8")
        (inbox / student / "timestamp.txt").write_text(nbgrader_stamp(when), encoding="utf-8")
    steps.step_collect(per_day, course_dir, [UNIT], inbox)
    done = steps.step_autograde(per_day, course_dir, [UNIT])
    trusted = done["results"]["late"]["units"][UNIT]["score"]
    maximum = done["results"]["late"]["units"][UNIT]["max_score"]
    assert 0 < trusted < maximum and done["results"]["ontime"]["units"][UNIT]["score"] == trusted
    steps.step_feedback(per_day, course_dir, [UNIT])
    rows = _export(per_day, course_dir, tmp_path / "per_day.csv")

    def numbers(student: str) -> tuple[float, float, float]:
        row = rows[student]
        return float(row["raw_score"]), float(row["late_submission_penalty"] or 0), float(row["score"])

    assert numbers("late") == pytest.approx((trusted, 0.1 * trusted, 0.9 * trusted), abs=1e-6)
    assert rows["late"]["status"] == f"graded; 1 day late: -{round(0.1 * trusted, 4):g} points"
    assert numbers("ontime") == pytest.approx((trusted, 0, trusted), abs=1e-6) and rows["ontime"]["status"] == "graded"
    assert rows["late"]["duedate"].startswith("2027-03-01 22:59:00")  # the manifest's due date, in UTC
    feedback = {s: (course_dir / "feedback" / s / UNIT / f"{UNIT}.html").read_text(encoding="utf-8") for s in rows}
    assert f"Late submission penalty (Score: -{round(0.1 * trusted, 2):g})" in feedback["late"]
    assert "Late submission penalty" not in feedback["ontime"]

    # The same class under `zero`: the late unit scores 0, its penalty the trusted points (never 62).
    zero = with_late(COURSE, ZERO)
    monkeypatch.setattr(steps.rescore, "grade_sources", lambda course, files, units: {s: done["results"][s] for s in files})
    steps.step_autograde(zero, course_dir, [UNIT])
    rows = _export(zero, course_dir, tmp_path / "zero.csv")
    assert numbers("late") == pytest.approx((trusted, trusted, 0), abs=1e-6)
    assert numbers("ontime") == pytest.approx((trusted, 0, trusted), abs=1e-6)


def _formgrader_put(db_url: str, student: str, gid: str, manual: float | None, extra: float | None) -> None:
    """An instructor scoring a cell in formgrader: what its GradeHandler.put writes into nbgrader's
    gradebook (nbgrader/server_extensions/formgrader/apihandlers.py, line for line)."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        grade = gb.find_grade(gid, UNIT, UNIT, student)
        grade.manual_score, grade.extra_credit = manual, extra
        grade.needs_manual_grade = grade.manual_score is None and grade.auto_score is None
        gb.db.commit()


def test_nbgrader_grade_is_the_same_whatever_the_order_of_steps(tmp_path):
    """issue 59: a notebook's grade is a function of its trusted points, the points given in
    formgrader, its one submission time, its due date (extended) and the policy, whatever the order.
    A written answer scored after autograde (1 point and 0.5 extra credit) is priced by the next
    export and feedback as a second autograde prices it: 10% of all the points, the same figures in
    both exports (before, the export took 10% of the trusted points only until the next autograde:
    12.4 then 13.0 for the same work). And the course's extensions file is written into nbgrader's
    gradebook as nbgrader's own extension: a student a day late with two days' extension is on time
    in nbgrader's gradebook, its export and its feedback."""
    from nbgrader.api import Gradebook

    course_dir = tmp_path / "course"
    (course_dir / "source").mkdir(parents=True)
    shutil.copytree(ROOT / "course" / "source" / UNIT, course_dir / "source" / UNIT)
    shutil.copy(ROOT / "course" / "nbgrader_config.py", course_dir)
    (tmp_path / "extensions.csv").write_text(f"student,unit,days\next,{UNIT},2\n", encoding="utf-8")
    course = with_late(COURSE, dataclasses.replace(PER_DAY, extensions=str(tmp_path / "extensions.csv")))
    steps.step_generate(course, course_dir, [UNIT])
    release, source = _nb(course_dir / "release" / UNIT / f"{UNIT}.ipynb"), _nb(course_dir / "source" / UNIT / f"{UNIT}.ipynb")
    inbox = tmp_path / "inbox"
    for student, when in (("late", ONE_DAY_LATE), ("ext", ONE_DAY_LATE), ("ontime", ON_TIME)):
        (inbox / student).mkdir(parents=True)
        (inbox / student / f"{UNIT}.ipynb").write_text(json.dumps(fill(release, source, UNIT, bug=True)), encoding="utf-8")
        (inbox / student / "timestamp.txt").write_text(nbgrader_stamp(when), encoding="utf-8")
    steps.step_collect(course, course_dir, [UNIT], inbox)
    first = steps.step_autograde(course, course_dir, [UNIT])
    trusted = first["results"]["late"]["units"][UNIT]["score"]
    assert 0 < trusted and all(first["results"][s]["units"][UNIT]["score"] == trusted for s in ("ext", "ontime"))
    assert set(first["late"]) == {("late", UNIT)}  # ext: on time by the extension

    db_url = "sqlite:///" + str(course_dir / "gradebook.db")
    with Gradebook(db_url) as gb:  # the extension, as nbgrader's own (formgrader shows it)
        extension = {s: gb.find_submission(UNIT, s).extension for s in ("late", "ext", "ontime")}
    assert extension == {"late": None, "ext": datetime.timedelta(days=2), "ontime": None}

    answer = next(_gid(c) for c in source["cells"] if _manual(c))
    for student in ("late", "ext", "ontime"):
        _formgrader_put(db_url, student, answer, 1.0, 0.5)
    points = trusted + 1.5
    expected = {s: tuple(round(x, 6) for x in v) for s, v in {
        "late": (points, round(0.1 * points, 4), points - round(0.1 * points, 4)),
        "ext": (points, 0.0, points), "ontime": (points, 0.0, points)}.items()}

    def figures(rows: dict[str, dict]) -> dict[str, tuple[float, float, float]]:
        return {s: tuple(round(float(r[k] or 0), 6) for k in ("raw_score", "late_submission_penalty", "score"))
                for s, r in rows.items()}

    after_manual = _export(course, course_dir, tmp_path / "after_manual.csv")  # autograde, then the manual points
    assert figures(after_manual) == expected
    assert after_manual["late"]["status"] == f"graded; 1 day late: -{round(0.1 * points, 4):g} points"
    assert after_manual["ext"]["status"] == after_manual["ontime"]["status"] == "graded"
    steps.step_feedback(course, course_dir, [UNIT])
    feedback = {s: (course_dir / "feedback" / s / UNIT / f"{UNIT}.html").read_text(encoding="utf-8") for s in expected}
    assert f"Late submission penalty (Score: -{round(0.1 * points, 2):g})" in feedback["late"]
    assert "Late submission penalty" not in feedback["ext"] + feedback["ontime"]

    steps.step_autograde(course, course_dir, [UNIT])  # the manual points, then (another) autograde
    regraded = _export(course, course_dir, tmp_path / "regraded.csv")
    assert figures(regraded) == figures(after_manual)
    assert [regraded[s]["status"] for s in expected] == [after_manual[s]["status"] for s in expected]
    with Gradebook(db_url) as gb:
        assert gb.find_submission(UNIT, "ext").extension == datetime.timedelta(days=2)


# -- grade-batch -------------------------------------------------------------------------------

# attn-course grade-batch, with the manifest given a due date and a policy (the test's own).
BATCH = """
import dataclasses, datetime, json, os, sys
from autograder import cli
from autograder.core.lateness import LatePolicy

spec = json.loads(os.environ["LATE_TEST"])
real = cli.load_course

def load_course(root=None):
    course = real(root)
    due = datetime.datetime.fromisoformat(spec["due"])
    units = {**course.units, spec["unit"]: dataclasses.replace(course.units[spec["unit"]], due=due)}
    return dataclasses.replace(course, units=units, late=LatePolicy(spec["policy"], spec["rate"]))

cli.load_course = load_course
sys.exit(cli.main(sys.argv[1:]))
"""


def _batch(subs: Path, out: Path, policy: LatePolicy) -> subprocess.CompletedProcess:
    env = {**os.environ, "LATE_TEST": json.dumps({"unit": UNIT, "due": DUE.isoformat(), "policy": policy.policy,
                                                  "rate": policy.rate})}
    proc = subprocess.run([sys.executable, "-c", BATCH, "grade-batch", str(subs), "-o", str(out), "--unit", UNIT,
                           "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_grade_batch_prices_the_trusted_points(tmp_path):
    """One student a day late by the upload's timestamp.txt (whose files' times say on time: the
    file wins), one on time by the files' modification time; then the same class under `zero`,
    re-priced from the records without grading again."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    buggy = mutants.mutated_source((ROOT / "solutions" / "attention.py").read_text(encoding="utf-8"), BUG)
    for name in ("late", "ontime"):
        (subs / name).mkdir(parents=True)
        (subs / name / "attention.py").write_text(buggy, encoding="utf-8")
        os.utime(subs / name / "attention.py", (ON_TIME.timestamp(),) * 2)
    (subs / "late" / "timestamp.txt").write_text(nbgrader_stamp(ONE_DAY_LATE), encoding="utf-8")
    proc = _batch(subs, out, PER_DAY)
    assert "1 handed in late" in proc.stdout

    def read() -> tuple[dict, dict]:
        records = {n: json.loads((out / "students" / f"{n}.json").read_text(encoding="utf-8")) for n in ("late", "ontime")}
        book = {row[0]: row for row in csv.reader((out / "gradebook.csv").open(encoding="utf-8"))}
        return records, book

    records, book = read()
    trusted = records["late"]["result"]["units"][UNIT]["score"]
    maximum = records["late"]["result"]["units"][UNIT]["max_score"]
    assert 0 < trusted < maximum and records["ontime"]["result"]["units"][UNIT]["score"] == trusted
    late = records["late"]["late"]
    assert late["from"] == "timestamp.txt" and late["units"][UNIT]["days_late"] == 1
    assert (late["units"][UNIT]["penalty"], late["units"][UNIT]["score"]) == pytest.approx((0.1 * trusted, 0.9 * trusted))
    assert float(book["late"][2]) == pytest.approx(0.9 * trusted) == float(book["late"][3])
    assert book["late"][1] == f"graded; {UNIT} 1 day late: -{round(0.1 * trusted, 4):g} points"
    feedback = (out / "students" / "late.md").read_text(encoding="utf-8")
    assert "Late work" in feedback and f"| {UNIT} |" in feedback and f"-{round(0.1 * trusted, 4):g} |" in feedback
    assert records["ontime"]["late"]["units"][UNIT]["days_late"] == 0
    assert (book["ontime"][1], float(book["ontime"][2])) == ("graded", trusted)

    _batch(subs, out, ZERO)
    assert json.loads((out / "summary.json").read_text())["graded_now"] == 0  # re-priced, not re-graded
    records, book = read()
    assert records["late"]["late"]["units"][UNIT]["penalty"] == trusted and float(book["late"][2]) == 0
    assert book["late"][1] == f"graded; {UNIT} 1 day late: -{trusted:g} points"
    assert (book["ontime"][1], float(book["ontime"][2])) == ("graded", trusted)


# -- issue 59: extensions, Gradescope, set-due ------------------------------------------------------

def test_extensions_file_days_or_a_new_due_date(tmp_path):
    """``[late] extensions``: per student and unit (``*``: all), days added or a new due date; a row
    naming the unit wins over ``*``; a bad file is refused, never ignored."""
    course = load_course(_manifest(tmp_path, "due = 2027-03-01T23:59:00+01:00",
                                   '[late]\npolicy = "per_day"\nrate = 10\nextensions = "extensions.csv"'))
    assert course.late == PER_DAY and course.late.extensions == "extensions.csv"
    (tmp_path / "extensions.csv").write_text("student,unit,days,due\nann,*,2,\nann,u,,2027-03-10T12:00:00Z\n"
                                             "bob,*,1.5,\n", encoding="utf-8")
    given = lateness.Extensions.load(tmp_path, course.late)
    assert given.due("u", DUE, "ann") == datetime.datetime(2027, 3, 10, 12, tzinfo=datetime.timezone.utc)
    assert given.due("other", DUE, "ann") == DUE + datetime.timedelta(days=2)
    assert given.due("u", DUE, "nobody", "bob") == DUE + datetime.timedelta(days=1.5)
    assert given.due("u", DUE, "carl") == DUE
    for text, says in (("student,unit,days\nann,u,two\n", "not a number"), ("name,days\nann,1\n", "columns"),
                       ("student,unit,days,due\nann,u,1,2027-03-10T12:00:00Z\n", "not both"),
                       ("student,unit,due\nann,u,2027-03-10T12:00:00\n", "no UTC offset")):
        with pytest.raises(ValueError, match=says):
            lateness.Extensions.parse(text)
    (tmp_path / "extensions.csv").unlink()
    with pytest.raises(ValueError, match="cannot be read"):
        lateness.Extensions.load(tmp_path, course.late)
    with pytest.raises(ValueError, match="extensions is a CSV"):
        load_course(_manifest(tmp_path, "", '[late]\npolicy = "none"\nextensions = 3'))


def test_grade_batch_prices_against_the_students_extension(tmp_path):
    """grade-batch's pricing (the records' ``late`` section) asks the extensions file for each
    student's due date: a student a day late with two days' extension is on time."""
    from autograder.delivery.batch_records import Student, late

    (tmp_path / "extensions.csv").write_text(f"student,unit,days\next,{UNIT},2\n", encoding="utf-8")
    course = dataclasses.replace(with_late(COURSE, dataclasses.replace(PER_DAY, extensions="extensions.csv")),
                                 root=tmp_path)
    result = {"units": {UNIT: {"score": 26.0}}}
    priced = {name: late(course, Student(name, tmp_path, "d", ONE_DAY_LATE, "timestamp.txt"), result)
              for name in ("ext", "plain")}
    assert priced["ext"]["units"][UNIT]["days_late"] == 0 and priced["ext"]["units"][UNIT]["score"] == 26
    assert datetime.datetime.fromisoformat(priced["ext"]["units"][UNIT]["due"]) == DUE + datetime.timedelta(days=2)
    assert priced["plain"]["units"][UNIT]["penalty"] == pytest.approx(2.6)


def _metadata(created: datetime.datetime, email: str) -> str:
    """Gradescope's submission_metadata.json (its documented fields; created_at as it writes it)."""
    return json.dumps({"id": 123456, "created_at": created.isoformat(timespec="microseconds"),
                       "assignment": {"due_date": DUE.isoformat(), "late_due_date": None, "title": "PA 1",
                                      "total_points": "62.0"},
                       "submission_method": "upload",
                       "users": [{"email": email, "id": 1234, "name": "Student User"}],
                       "previous_submissions": []})


def test_gradescope_prices_created_at_with_the_same_policy_and_extensions(tmp_path):
    """The exported autograder, its course.toml given a due date by ``attn-course set-due`` and an
    extensions file: Gradescope's ``created_at`` one day late costs 10% of the trusted points (the
    tests keep them, the score is after the penalty); the same time with a two-day extension (found
    by the user's email) costs nothing; no metadata, no penalty."""
    from test_delivery_platforms import _gradescope, _unzip_autograder

    root = _unzip_autograder(tmp_path / "gs")
    source = root / "source"
    manifest = source / "course" / "course.toml"
    set_due = subprocess.run([sys.executable, "-m", "autograder.cli", "set-due", UNIT, DUE.isoformat()], cwd=ROOT,
                             env={**os.environ, "AUTOGRADER_COURSE_ROOT": str(source)}, capture_output=True, text=True)
    assert set_due.returncode == 0, set_due.stderr
    text = manifest.read_text(encoding="utf-8")
    assert "[late]\npolicy" in text
    manifest.write_text(text.replace("[late]\n", '[late]\nextensions = "extensions.csv"\n', 1), encoding="utf-8")
    (source / "extensions.csv").write_text(f"student,unit,days\next@example.edu,{UNIT},2\n", encoding="utf-8")
    assert load_course(source).units[UNIT].due == DUE
    solution = (ROOT / "solutions" / "attention.py").read_text(encoding="utf-8")
    results = {}
    for case, metadata in (("late", _metadata(ONE_DAY_LATE, "late@example.edu")),
                           ("extended", _metadata(ONE_DAY_LATE, "ext@example.edu")), ("unknown", None)):
        case_root = tmp_path / case
        case_root.mkdir()
        (case_root / "source").symlink_to(source)
        if metadata:
            (case_root / "submission_metadata.json").write_text(metadata, encoding="utf-8")
        results[case] = _gradescope(case_root, {"attention.py": solution})[0]
    mine = [t for t in results["late"]["tests"] if t["tags"] == [UNIT]]  # (the other units: no file, 0)
    trusted = sum(t["score"] for t in mine)
    assert trusted > 0 and trusted == sum(t["max_score"] for t in mine) == sum(t["score"] for t in results["late"]["tests"])
    assert results["late"]["score"] == pytest.approx(0.9 * trusted)
    late = results["late"]["extra_data"]["late"]
    assert late["raw_score"] == trusted and late["units"][UNIT]["days_late"] == 1
    assert "1 day late" in results["late"]["output"] and "Score after it" in results["late"]["output"]
    assert results["extended"]["score"] == trusted
    assert results["extended"]["extra_data"]["late"]["units"][UNIT]["days_late"] == 0
    assert results["unknown"]["score"] == trusted and "extra_data" not in results["unknown"]
