"""LMS gradebooks that import as they are (issue 46, item 2).

Canvas and Moodle import the layout they export, so the gradebook is the instructor's own export
filled in. Each test starts from a sample written in the LMS's exact export layout
(tests/vendor/lms/, SOURCE.md says from which documentation and source), parses it, fills it, and
reads the result back by the rules the LMS's importer applies: the same header, the rostered
students with their own IDs, an upload nobody on the roster has listed apart (never given an ID),
and no cell a spreadsheet would run as a formula.
"""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from conftest import ROOT
from autograder.core.manifest import load_course
from autograder.delivery.lms import (CANVAS_POINTS_LABEL, lms_columns, lms_gradebook, read_lms_roster,
                                     records_from_nbgrader_csv, unmatched_csv)
from autograder.delivery.lms_settings import LmsSettings, lms_settings, parse_lms_settings

SAMPLES = ROOT / "tests" / "vendor" / "lms"
CANVAS = SAMPLES / "canvas_export.csv"
MOODLE = SAMPLES / "moodle_export.csv"
FORMULA = ("=", "+", "-", "@", "\t", "\r")
HOSTILE_UPLOAD = '=HYPERLINK("http://evil.example","x")'

NAMES = ["attention", "multi_head"]
POSSIBLE = {"attention": 62.0, "multi_head": 30.0}
TITLES = {"attention": "Scaled dot-product attention", "multi_head": "Multi-head attention",
          "positional_encoding": "Positional encodings"}
# The Canvas sample titles multi_head's assignment "HW 2 - Multi-head (52002)": found by its id.
CANVAS_SETTINGS = LmsSettings(TITLES, canvas_ids={"multi_head": "52002"})
MOODLE_SETTINGS = LmsSettings(TITLES, moodle_identifier="Email address", moodle_feedback=True)


def _record(student: str, attention: float, multi_head: float, status: str = "graded") -> dict:
    return {"student": student, "status": status, "result": {"units": {
        "attention": {"score": attention, "status": "graded", "message": ""},
        "multi_head": {"score": multi_head, "status": "graded", "message": ""}}}}


def _formulas(cells: list[str]) -> list[str]:
    """The cells a spreadsheet could run: a leading = + - @ tab or CR, but for a plain number or
    Moodle's "-" (no grade)."""
    return [c for c in cells if c.startswith(FORMULA) and not re.fullmatch(r"-?\d+([.,]\d+)?|-", c)]


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _sample(path: Path) -> list[list[str]]:
    return _rows(path.read_text(encoding="utf-8"))


def _canvas_import(rows: list[list[str]]) -> dict:
    """What Canvas's importer (lib/gradebook_importer.rb) reads from a file: the header check, the
    assignments by the id in '<title> (<id>)', the points row, the rows it skips, and the students
    by ID (their scores per assignment id)."""
    header = rows[0]
    assert "Student" in header[0] and "ID" in header[1], "Canvas refuses the header"
    student_cols = [i for i, h in enumerate(header) if h in ("Student", "ID", "SIS User ID", "SIS Login ID",
                                                             "Integration ID", "Root Account", "Section")]
    assert student_cols == list(range(len(student_cols))) and header[student_cols[-1]] == "Section"
    totals = re.compile("Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade")
    ids = {}
    for i, h in enumerate(header[len(student_cols):], len(student_cols)):
        m = re.fullmatch(r"(.*)\s\((\d+)\)", h, re.S)
        if m and not totals.search(h):
            ids[i] = m[2]
    points, students = None, {}
    for row in rows[1:]:
        if "Points Possible" in row[0]:
            points = {ids[i]: row[i] for i in ids}
        elif all(re.fullmatch(r"\s*(Muted|Manual Posting.*)?\s*", c, re.I) for c in row):
            continue
        else:
            students[row[1]] = {"row": row, "scores": {ids[i]: row[i] for i in ids}}
    return {"ids": set(ids.values()), "points": points, "students": students}


# -- Canvas -------------------------------------------------------------------------------

def test_canvas_export_filled_keeps_its_header_its_students_and_their_ids():
    roster = read_lms_roster("canvas", CANVAS)
    records = [_record("1001", 60, 2.5),  # Alice, by Canvas ID
               _record("bjones@example.edu", 41, 30),  # Bob, by SIS Login ID
               _record("S1003", 50, 20, status="graded; attention 1 day late: -6.2 points"),  # Carol, by SIS User ID
               _record("zed", 10, 10), _record(HOSTILE_UPLOAD, 5, 5, status="graded")]
    book = lms_gradebook("canvas", NAMES, POSSIBLE, records, roster, CANVAS_SETTINGS)
    sample, out = _sample(CANVAS), _rows(book.text)

    assert out[0] == sample[0], "the header is Canvas's export header, exactly"
    assert book.columns == {"attention": "Scaled dot-product attention (52001)",
                            "multi_head": "HW 2 - Multi-head (52002)"}
    assert out[1] == sample[1], "the Manual Posting row as exported"
    assert out[2][0] == CANVAS_POINTS_LABEL == sample[2][0]
    col = {h: i for i, h in enumerate(out[0])}
    assert out[2][col["Scaled dot-product attention (52001)"]] == "62"
    assert out[2][col["HW 2 - Multi-head (52002)"]] == "30"
    assert out[2][col["Midterm exam (52010)"]] == "100.00" and out[2][col["Current Score"]] == "(read only)"
    assert any("25 points possible" in w and "52002" in w for w in book.warnings), book.warnings

    # Every rostered student keeps their row, in order, with their IDs, sections and other cells.
    sample_students, out_students = sample[3:], out[3:]
    assert [r[1:5] for r in out_students] == [r[1:5] for r in sample_students]
    unit_cols = {col["Scaled dot-product attention (52001)"], col["HW 2 - Multi-head (52002)"]}
    for before, after in zip(sample_students, out_students):
        for i, cell in enumerate(before):
            if i not in unit_cols and i != 0:
                assert after[i] == cell, f"{before[1]}: {out[0][i]} changed"
    canvas = _canvas_import(out)
    assert canvas["ids"] >= {"52001", "52002", "52010"}
    assert canvas["points"]["52001"] == "62"
    scores = {sid: s["scores"] for sid, s in canvas["students"].items()}
    assert scores["1001"]["52001"] == "60" and scores["1001"]["52002"] == "2.5"
    assert scores["1002"]["52001"] == "41" and scores["1002"]["52002"] == "30"
    assert scores["1003"]["52001"] == "EX", "an excused cell is the instructor's"
    assert scores["1003"]["52002"] == "20"
    assert scores["1005"]["52001"] == "" and scores["1005"]["52002"] == "N/A", "no upload: blank; not assigned: kept"
    assert scores["1099"]["52001"] == "", "the Test Student is on the roster too (no upload: blank)"
    assert scores["1002"]["52010"] == "71.00", "another assignment's score is left as exported"

    # The uploads no roster row names are listed apart: no row, no made-up ID.
    assert [u["student"] for u in book.unmatched] == ["zed", HOSTILE_UPLOAD]
    assert len(out) == len(sample)
    unmatched = _rows(unmatched_csv(NAMES, book.unmatched))
    assert unmatched[0] == ["student", "reason", "status", "attention", "multi_head", "total"]
    assert unmatched[1][:1] == ["zed"] and unmatched[1][3:] == ["10", "10", "20"]
    assert "SIS Login ID" in unmatched[1][1]


def test_canvas_cells_are_formula_safe():
    """A hostile roster name (Canvas exports one that starts with @ as it is), a hostile upload name
    in the unmatched list: no cell starts as a formula, and the numbers stay numbers."""
    roster = read_lms_roster("canvas", CANVAS)
    book = lms_gradebook("canvas", NAMES, POSSIBLE, [_record(HOSTILE_UPLOAD, 1, 1)], roster, CANVAS_SETTINGS)
    out = _rows(book.text)
    mallory = next(r for r in out if r[1] == "1005")
    assert mallory[0] == "'@SUM(1+1), Mallory"
    cells = [c for row in out for c in row] + [c for row in _rows(unmatched_csv(NAMES, book.unmatched)) for c in row]
    assert not _formulas(cells)
    assert _rows(unmatched_csv(NAMES, book.unmatched))[1][0] == "'" + HOSTILE_UPLOAD


def test_canvas_two_uploads_for_one_student_leave_the_row_out():
    """Nothing is guessed: two uploads that both name Bob (his ID, his login) leave his row out of the
    import (Canvas keeps what it has) and are both listed until --map settles whose each is."""
    roster = read_lms_roster("canvas", CANVAS)
    book = lms_gradebook("canvas", NAMES, POSSIBLE, [_record("1002", 1, 1), _record("bjones@example.edu", 2, 2)],
                         roster, CANVAS_SETTINGS)
    ids = [row[1] for row in _rows(book.text)[3:]]
    assert "1002" not in ids and len(ids) == len(roster.students) - 1
    assert sorted(u["student"] for u in book.unmatched) == ["1002", "bjones@example.edu"]
    assert any("--map" in w for w in book.warnings)


def test_canvas_units_matched_by_title_by_id_or_refused():
    roster = read_lms_roster("canvas", CANVAS)
    # multi_head's Canvas title is not its title: without its id the gradebook is refused, before grading.
    with pytest.raises(ValueError, match=r"multi_head.*canvas_ids\.multi_head"):
        lms_columns("canvas", roster, NAMES, LmsSettings(TITLES))
    # A configured name finds it too; an id the export lacks adds '<title> (<id>)', which Canvas fills by id.
    named = LmsSettings(TITLES, names={"multi_head": "hw 2 -  multi-head"}, canvas_ids={"positional_encoding": "52003"})
    columns = lms_columns("canvas", roster, [*NAMES, "positional_encoding"], named)
    assert columns == {"attention": "Scaled dot-product attention (52001)", "multi_head": "HW 2 - Multi-head (52002)",
                       "positional_encoding": "Positional encodings (52003)"}
    book = lms_gradebook("canvas", ["positional_encoding"], {"positional_encoding": 10}, [], roster, named)
    assert _rows(book.text)[0] == [*_sample(CANVAS)[0], "Positional encodings (52003)"]
    assert any("52003" in w for w in book.warnings)
    # Two units on one column are refused.
    with pytest.raises(ValueError, match="both match"):
        lms_columns("canvas", roster, NAMES, LmsSettings(TITLES, names={"multi_head": "Scaled dot-product attention"}))


def test_canvas_roster_of_uploads_needs_assignment_ids(tmp_path):
    """The roster of old (a folder column beside Canvas's identity columns) has no assignment
    columns: each unit needs its Canvas id, and a row with no ID at all is left out."""
    roster_csv = tmp_path / "roster.csv"
    roster_csv.write_text("folder,Student,ID,SIS Login ID,Section\nalice,\"Smith, Alice\",1001,asmith@example.edu,A\n"
                          "nobody,Nobody,,,B\n", encoding="utf-8")
    roster = read_lms_roster("canvas", roster_csv)
    with pytest.raises(ValueError, match="canvas_ids"):
        lms_columns("canvas", roster, NAMES, LmsSettings(TITLES))
    settings = LmsSettings(TITLES, canvas_ids={"attention": "52001", "multi_head": "52002"})
    book = lms_gradebook("canvas", NAMES, POSSIBLE, [_record("alice", 3, 4), _record("nobody", 5, 5)], roster,
                         settings)
    out = _rows(book.text)
    assert out[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                      "Scaled dot-product attention (52001)", "Multi-head attention (52002)"]
    assert out[1] == [CANVAS_POINTS_LABEL, "", "", "", "", "62", "30"]
    assert out[2:] == [["Smith, Alice", "1001", "", "asmith@example.edu", "A", "3", "4"]]
    assert [u["student"] for u in book.unmatched] == ["nobody"]


def test_canvas_semicolon_export_stays_semicolon(tmp_path):
    """Canvas writes ';' (and decimal commas) in some locales; the gradebook keeps the separator."""
    text = CANVAS.read_text(encoding="utf-8")
    rows = _rows(text)
    semi = tmp_path / "export.csv"
    with semi.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, delimiter=";", lineterminator="\n").writerows(rows)
    book = lms_gradebook("canvas", NAMES, POSSIBLE, [_record("1001", 1.5, 2)], read_lms_roster("canvas", semi),
                         CANVAS_SETTINGS)
    out = list(csv.reader(io.StringIO(book.text), delimiter=";"))
    assert out[0] == rows[0]
    assert next(r for r in out if r[1] == "1001")[6] == "1.5"


# -- Moodle -------------------------------------------------------------------------------

def test_moodle_export_filled_keeps_its_header_its_users_and_feedback():
    roster = read_lms_roster("moodle", MOODLE)
    records = [_record("asmith@example.edu", 60, 2.5), _record("S1002", 41, 30, status="graded; late"),
               _record("ghost@example.edu", 1, 1)]
    book = lms_gradebook("moodle", NAMES, POSSIBLE, records, roster, MOODLE_SETTINGS)
    sample, out = _sample(MOODLE), _rows(book.text)
    assert out[0] == sample[0], "the header is Moodle's export header, exactly"
    assert book.columns == {"attention": "Assignment: Scaled dot-product attention (Real)",
                            "multi_head": "Assignment: Multi-head attention (Real)"}
    col = {h: i for i, h in enumerate(out[0])}
    by_email = {row[col["Email address"]]: row for row in out[1:]}
    assert list(by_email) == [row[col["Email address"]] for row in sample[1:]], "every user, in order"
    for before in sample[1:]:
        after = by_email[before[col["Email address"]]]
        for name in ("Last name", "ID number", "Institution", "Department", "Quiz: Week 1 quiz (Real)",
                     "Course total (Real)", "Last downloaded from this course"):
            assert after[col[name]] == before[col[name]], name
    alice, bob = by_email["asmith@example.edu"], by_email["bjones@example.edu"]
    assert alice[col["Assignment: Scaled dot-product attention (Real)"]] == "60"
    assert alice[col["Assignment: Multi-head attention (Real)"]] == "2.5"
    assert alice[col["Assignment: Scaled dot-product attention (Feedback)"]] == "60/62"
    assert bob[col["Assignment: Multi-head attention (Real)"]] == "30"
    assert bob[col["Assignment: Multi-head attention (Feedback)"]] == "30/30; graded; late"
    carol = by_email["cnguyen@example.edu"]  # no upload: a grade Moodle holds stays, and so does its '-' (none)
    assert carol[col["Assignment: Scaled dot-product attention (Real)"]] == "-"
    assert carol[col["Assignment: Scaled dot-product attention (Feedback)"]] == "no upload matched this student"
    assert carol[col["Quiz: Week 1 quiz (Real)"]] == "-"
    # Moodle aborts the whole import on a user it cannot find: an unknown upload has no row.
    assert [u["student"] for u in book.unmatched] == ["ghost@example.edu"]
    assert len(out) == len(sample)
    # Every grade cell is a number Moodle's importer reads (unformat_float), its '-' (no grade) or blank.
    for row in out[1:]:
        for name in book.columns.values():
            assert re.fullmatch(r"-?\d+(\.\d+)?|-|", row[col[name]]), row[col[name]]
    # A hostile first name in the roster is written formula-safe.
    assert not _formulas([c for row in out for c in row])
    assert any(row[0] == "'=cmd|' /C calc'!A0" for row in out)


def test_a_student_no_upload_matches_keeps_what_the_lms_holds():
    """Nothing the LMS holds is overwritten by a guess: with no upload, a graded cell (and its
    feedback) stays; an empty one (Canvas's blank, Moodle's '-') stays empty, never 0."""
    canvas = _canvas_import(_rows(lms_gradebook("canvas", NAMES, POSSIBLE, [], read_lms_roster("canvas", CANVAS),
                                                CANVAS_SETTINGS).text))["students"]
    assert canvas["1003"]["scores"]["52001"] == "EX" and canvas["1003"]["scores"]["52002"] == "12.50"
    assert canvas["1002"]["scores"]["52001"] == "40.00" and canvas["1002"]["scores"]["52002"] == ""
    moodle = _rows(lms_gradebook("moodle", NAMES, POSSIBLE, [], read_lms_roster("moodle", MOODLE), MOODLE_SETTINGS).text)
    bob = next(row for row in moodle if row[5] == "bjones@example.edu")
    assert bob[6:10] == ["40.00", "Good start", "-", "no upload matched this student"], "Moodle's own no-grade stays"


def test_moodle_roster_without_grade_columns_gets_the_import_layout(tmp_path):
    """A roster that is only the users (as in Moodle's own import fixture, 'First name,Last name,Email
    address,<item>'): one column per unit, named as configured, and its feedback column."""
    roster_csv = tmp_path / "roster.csv"
    roster_csv.write_text("folder,First name,Last name,Email address\nalice,Alice,Smith,asmith@example.edu\n"
                          "nomail,No,Mail,\n", encoding="utf-8")
    settings = LmsSettings(TITLES, names={"attention": "Homework 1"}, moodle_feedback=True)
    book = lms_gradebook("moodle", NAMES, POSSIBLE, [_record("alice", 7, 8), _record("nomail", 1, 1)],
                         read_lms_roster("moodle", roster_csv), settings)
    out = _rows(book.text)
    assert out[0] == ["First name", "Last name", "Email address", "Homework 1", "Homework 1 (Feedback)",
                      "Multi-head attention", "Multi-head attention (Feedback)"]
    assert out[1:] == [["Alice", "Smith", "asmith@example.edu", "7", "7/62", "8", "8/30"]]
    assert [u["student"] for u in book.unmatched] == ["nomail"], "a user with no email: Moodle could not find them"
    with pytest.raises(ValueError, match="ID number"):
        lms_columns("moodle", read_lms_roster("moodle", roster_csv), NAMES,
                    LmsSettings(TITLES, moodle_identifier="ID number"))


# -- the nbgrader pipeline's export, and the settings ------------------------------------

def test_nbgrader_export_to_canvas(tmp_path):
    """The nbgrader pipeline's CSV (nbgrader's columns and the pipeline's status) fills the same
    Canvas export; its student ids are the inbox folders' names."""
    grades = tmp_path / "grades.csv"
    grades.write_text(
        "assignment,duedate,timestamp,student_id,last_name,first_name,email,raw_score,late_submission_penalty,"
        "score,max_score,status\n"
        "attention,,2026-01-02 10:00:00,1001,,,,61.0,0.0,61.0,63.0,graded\n"
        "attention,,,'=evil,,,,0.0,0.0,0.0,63.0,not submitted\n"
        "multi_head,,2026-01-02 10:00:00,1001,,,,30.0,3.0,27.0,31.0,graded; 1 day late: -3 points\n"
        "multi_head,,,'=evil,,,,0.0,0.0,0.0,31.0,not submitted\n", encoding="utf-8")
    names, possible, records = records_from_nbgrader_csv(grades)
    assert names == NAMES and possible == {"attention": 63.0, "multi_head": 31.0}
    assert records[0]["status"] == "multi_head: graded; 1 day late: -3 points"
    book = lms_gradebook("canvas", names, possible, records, read_lms_roster("canvas", CANVAS), CANVAS_SETTINGS)
    out = _rows(book.text)
    assert out[0] == _sample(CANVAS)[0]
    alice = next(r for r in out if r[1] == "1001")
    assert alice[6:8] == ["61", "27"]
    assert [u["student"] for u in book.unmatched] == ["'=evil"]


def test_lms_settings_from_the_manifest_and_refused_settings():
    course = load_course(ROOT)
    settings = lms_settings(course)
    assert settings.titles == {n: u.title for n, u in course.units.items()}
    assert settings.moodle_identifier == "Email address"
    unit = next(iter(course.units))
    ok = parse_lms_settings({"canvas_ids": {unit: 52001}, "names": {unit: "HW 1"}, "moodle_feedback": True},
                            {unit: "T"})
    assert ok.canvas_ids == {unit: "52001"} and ok.label(unit) == "HW 1" and ok.moodle_feedback
    for table, message in (({"canvas_ids": {"nope": 1}}, "no unit nope"),
                           ({"canvas_ids": {unit: "x1"}}, "number"),
                           ({"colour": "red"}, "unknown key"),
                           ({"moodle_feedback": "yes"}, "true or false")):
        with pytest.raises(ValueError, match=message):
            parse_lms_settings(table, {unit: "T"})


def test_not_an_export_is_refused(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text("name,score\nalice,1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a Canvas gradebook export"):
        read_lms_roster("canvas", other)
    with pytest.raises(ValueError, match="Email address"):
        lms_columns("moodle", read_lms_roster("moodle", other), NAMES, LmsSettings(TITLES))
