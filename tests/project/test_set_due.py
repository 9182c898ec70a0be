"""``attn-course set-due UNIT DATE`` (issue 59): due dates set without editing TOML by hand.

The command edits a copy of the shipped course.toml in place (``$AUTOGRADER_COURSE_ROOT``): one
line added or changed, every comment and every other line as it was, and the manifest reads the
new date back; a date without its UTC offset, or a unit the course lacks, is refused and the file
is left alone.
"""
from __future__ import annotations

import datetime
import difflib
import shutil

import pytest

from conftest import ROOT, attn_course
from autograder.delivery import due_dates
from autograder.core.manifest import load_course

UNIT = "attention"
PLUS_ONE = datetime.timezone(datetime.timedelta(hours=1))


def _copy(tmp_path):
    (tmp_path / "course").mkdir()
    shutil.copyfile(ROOT / "course" / "course.toml", tmp_path / "course" / "course.toml")
    return tmp_path / "course" / "course.toml"


def _changed(before: str, after: str) -> list[str]:
    return [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:1] in "+-"]


def test_set_due_adds_then_changes_one_line_and_keeps_comments(tmp_path):
    manifest = _copy(tmp_path)
    before = manifest.read_text(encoding="utf-8")
    env = {"AUTOGRADER_COURSE_ROOT": str(tmp_path)}
    proc = attn_course("set-due", UNIT, "2027-03-01T23:59:00+01:00", env=env)
    assert "due = 2027-03-01T23:59:00+01:00" in proc.stdout
    after = manifest.read_text(encoding="utf-8")
    assert _changed(before, after) == ["+ due = 2027-03-01T23:59:00+01:00"]
    assert load_course(tmp_path).units[UNIT].due == datetime.datetime(2027, 3, 1, 23, 59, tzinfo=PLUS_ONE)
    assert all(load_course(tmp_path).units[u].due is None for u in load_course(tmp_path).units if u != UNIT)
    # A second date replaces the line, keeping a comment written after it.
    manifest.write_text(after.replace("due = 2027-03-01T23:59:00+01:00", "due = 2027-03-01T23:59:00+01:00  # week 3"),
                        encoding="utf-8")
    attn_course("set-due", UNIT, "2027-03-08T12:00:00Z", env=env)
    again = manifest.read_text(encoding="utf-8")
    assert _changed(before, again) == ["+ due = 2027-03-08T12:00:00Z  # week 3"]
    assert load_course(tmp_path).units[UNIT].due == datetime.datetime(2027, 3, 8, 12, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize("args, says", [((UNIT, "2027-03-01T23:59:00"), "no UTC offset"),
                                        ((UNIT, "next friday"), "no ISO 8601"),
                                        (("no_such_unit", "2027-03-01T23:59:00+01:00"), "no unit")])
def test_set_due_refuses_and_leaves_the_file_alone(tmp_path, args, says):
    manifest = _copy(tmp_path)
    before = manifest.read_bytes()
    proc = attn_course("set-due", *args, check=False, env={"AUTOGRADER_COURSE_ROOT": str(tmp_path)})
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert manifest.read_bytes() == before


def test_the_line_edit_and_tomlkit_agree(tmp_path):
    """Without tomlkit the one-line edit is used; with it (where installed), tomlkit's edit reads
    back as the same manifest."""
    manifest = _copy(tmp_path)
    when, how = due_dates.set_due(manifest, UNIT, "2027-03-01T23:59:00+01:00", use_tomlkit=False)
    assert how == "line edit" and load_course(tmp_path).units[UNIT].due == when
    pytest.importorskip("tomlkit")
    other = _copy(tmp_path / "other")
    assert due_dates.set_due(other, UNIT, "2027-03-01T23:59:00+01:00")[1] == "tomlkit"
    assert load_course(tmp_path / "other").units[UNIT].due == when
    assert len(_changed((ROOT / "course" / "course.toml").read_text(), other.read_text())) == 1
