"""`attn-course grade` as instructors and CI use it: scores, reports, exit codes, bad input."""
from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hypothesis import given, settings, strategies as st

import mutants
from conftest import ROOT, attn_course, grade_json
from autograder.core.manifest import load_course
from autograder.grading.determinism import pin_local_constants
from autograder.core.errors import GraderError

COURSE = load_course(ROOT)
BUILT = [u.name for u in COURSE.units.values() if (COURSE.solutions / u.file).is_file()]


def test_json_result_model():
    (result,) = grade_json([COURSE.solutions], ["attention"])
    assert set(result) >= {"score", "max_score", "units"}
    unit = result["units"]["attention"]
    assert set(unit) >= {"score", "max_score", "tests"}
    for test in unit["tests"]:
        assert set(test) >= {"name", "score", "max_score", "status", "output"}
        assert test["status"] in {"passed", "failed", "skipped"}
    assert result["score"] == sum(u["score"] for u in result["units"].values())


def test_grades_are_deterministic_across_runs(tmp_path):
    mutant = next(m for m in mutants.load("attention") if m["name"] == "mask_after_softmax")
    paths = [COURSE.solutions, mutants.write("attention.py", mutant, tmp_path / "m")]
    # Two new interpreters: each its own hash seed, as two graders' runs would have.
    first = attn_course("grade", *map(str, paths), "--unit", "attention", "--format", "json", fresh=True).stdout
    second = attn_course("grade", *map(str, paths), "--unit", "attention", "--format", "json", fresh=True).stdout
    assert first == second


def test_jobs_grade_as_one_process_does(tmp_path):
    """Units spread over grading processes (--jobs) give the result of one process, in course
    order, for every submission: the reference, and a mutant that loses points in one unit."""
    units = ["positional_encoding", "attention"]  # given out of course order
    paths = [COURSE.solutions, mutants.write("positional_encoding.py", mutants.load("positional_encoding")[0], tmp_path / "m")]
    alone = grade_json(paths, units)  # --jobs 1
    spread = attn_course("grade", *map(str, paths), *(a for u in units for a in ("--unit", u)),
                         "--jobs", "2", "--format", "json").stdout
    for one, many in zip(alone, json.loads(spread)):
        many["submission"] = one["submission"]
        assert list(many["units"]) == [u for u in COURSE.units if u in units]
        assert many == one
    assert alone[0]["score"] == alone[0]["max_score"] > alone[1]["score"]


def _fake_grade(fail: dict[str, str], pid_file=None):
    """A stand-in for ``grade``: ``fail[unit]`` says how grading that unit's group goes wrong."""
    from autograder.core.results import GradeResult

    def grade(course, folders, units, **options):
        how = next((fail[u] for u in units if u in fail), None)
        if how == "raise once the other runs":
            deadline = time.monotonic() + 30
            while not pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            how = "raise"
        if how == "raise":
            raise RuntimeError(f"boom while grading {units}")
        if how == "die":
            os._exit(9)
        if how == "hang":
            pid_file.write_text(str(os.getpid()))
            time.sleep(60)
        return [GradeResult(submission=str(f), units={}) for f in folders]
    return grade


@pytest.mark.parametrize("how, expected", [("raise", r"(?s)grading attention failed \(exit 1\): .*boom while grading"),
                                           ("die", r"grading attention failed \(exit 9\)")])
def test_a_group_that_fails_fails_the_grade_with_its_message(monkeypatch, how, expected):
    """A forked group's process that raises or dies: a grader failure naming its units, with
    what it printed; never a grade without them."""
    from autograder.grading import grade as grading, parallel

    monkeypatch.setattr(grading, "grade", _fake_grade({"attention": how}))
    with pytest.raises(GraderError, match=expected):
        parallel.grade_in_groups(COURSE, [COURSE.solutions], ["recurrent_cells", "attention"], 2, {})


def test_a_failure_in_this_process_group_ends_the_others(monkeypatch, tmp_path):
    """When the group this process grades itself fails, the forked ones are killed, not left
    grading for nobody."""
    from autograder.grading import grade as grading, parallel

    pid_file = tmp_path / "pid"
    monkeypatch.setattr(grading, "grade", _fake_grade({"recurrent_cells": "raise once the other runs",
                                                       "attention": "hang"}, pid_file))
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="boom"):
        parallel.grade_in_groups(COURSE, [COURSE.solutions], ["recurrent_cells", "attention"], 2, {})
    assert time.monotonic() - started < 30, "the other group's process was waited for, not killed"
    assert not Path(f"/proc/{pid_file.read_text()}").exists()


def test_check_prints_each_repro_command_on_a_line_of_its_own(tmp_path):
    """A student copies the command from under the table: whole (shlex reads it back as the
    failure's own command, its JSON intact), on one line however wide the terminal, never
    folded into the table's Reason cell."""
    mutant = next(m for m in mutants.load("attention") if m["name"] == "no_scale")
    mutants.write("attention.py", mutant, tmp_path / "mine")
    report = attn_course("check", "attention", "--path", str(tmp_path / "mine"), check=False,
                         env={"COLUMNS": "80"})
    assert report.returncode == 0, report.stderr[-2000:]
    table, _, below = report.stdout.partition("To see your answer beside the expected one")
    assert "attn-course repro" not in table, "the command is not in the table"
    commands = [line.strip() for line in below.splitlines() if line.strip().startswith("attn-course repro attention ")]
    assert commands, below[:2000]
    for command in commands:
        args = shlex.split(command)
        assert args[:3] == ["attn-course", "repro", "attention"] and args[4] == "--example", args[:5]
        assert json.loads(args[5])["unit"] == "attention"


def test_every_message_is_the_same_on_every_run():
    """The stubs fail every test of every unit, so every message shows its case (inputs included):
    a test that drew its inputs from torch's unseeded global generator shows other ones each run."""
    # One process a run (each its own hash seed): --jobs' groups would start torch and a zygote
    # twice a run for the same result (test_jobs_grade_as_one_process_does).
    runs = [attn_course("grade", str(COURSE.assignments), "--jobs", "1", "--format", "json", fresh=True).stdout
            for _ in range(2)]
    assert "reproduce: " in runs[0]
    assert runs[0] == runs[1]


def test_examples_ignore_the_constants_of_loaded_modules(tmp_path, monkeypatch):
    """Hypothesis draws literals of any loaded local module (student code graded in-process,
    say); while grading that pool is pinned, so examples depend on the test alone."""
    marker = 0.123456789
    (tmp_path / "student_constants.py").write_text(f"X = {marker!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("student_constants")

    def drawn() -> list[float]:
        seen = []

        @settings(derandomize=True, database=None, max_examples=200)
        @given(st.floats(0.1234567, 0.1234568))  # only the marker is a constant in this range
        def probe(x):
            seen.append(x)

        probe()
        return seen

    assert marker in drawn(), "hypothesis no longer draws local constants: pin_local_constants can go"
    restore = pin_local_constants()
    try:
        assert marker not in drawn()
    finally:
        restore()
    assert marker in drawn()


def test_report_names_the_bug_and_shows_no_test_source(tmp_path):
    mutant = next(m for m in mutants.load("attention") if m["name"] == "no_scale")
    path = mutants.write("attention.py", mutant, tmp_path / "no_scale")
    report = attn_course("grade", str(path), "--unit", "attention").stdout
    assert "did you forget to divide the scores by sqrt(d_k)?" in report
    assert "counterexample: shapes=" in report
    hidden = {line.strip() for p in COURSE.hidden_tests.glob("*.py") for line in p.read_text().splitlines()}
    shown = [line for line in hidden if len(line) > 25 and not line.startswith(('"""', "#")) and line in report]
    assert not shown, f"hidden test source in the report: {shown[:3]}"


def _broken_submissions(tmp_path):
    cases = {
        "syntax_error": b"def softmax(x:\n",
        "not_utf8": b"# \xff\xfe caf\xe9\ndef softmax(x): pass\n",
        "raises_on_import": b"raise RuntimeError('boom at import')\n",
        "exits_on_import": b"import sys\nsys.exit(0)\n",
    }
    paths = {}
    for name, body in cases.items():
        folder = tmp_path / name
        shutil.copytree(COURSE.solutions, folder)
        (folder / "attention.py").write_bytes(body)
        paths[name] = folder
    empty = tmp_path / "empty"
    empty.mkdir()
    paths["missing"] = empty
    return paths


def test_bad_submissions_cost_only_their_unit(tmp_path):
    paths = _broken_submissions(tmp_path)
    others = [u for u in BUILT if u != "attention"][:1]
    results = dict(zip(paths, grade_json(list(paths.values()), ["attention", *others])))
    expected = {
        "syntax_error": ("unavailable", "attention.py line 1"),
        "not_utf8": ("unavailable", "not valid UTF-8"),
        "raises_on_import": ("unavailable", "RuntimeError: boom at import"),
        # The allow-list refuses `import sys` (and the unit's builtins refuse it at run time): named as such.
        "exits_on_import": ("forbidden", "import of sys"),
        "missing": ("unavailable", "attention.py was not found"),
    }
    for name, (status, text) in expected.items():
        unit = results[name]["units"]["attention"]
        assert unit["status"] == status and unit["score"] == 0, (name, unit["status"])
        assert text in unit["message"], (name, unit["message"])
        for other in others:
            got = results[name]["units"][other]
            if name != "missing":
                assert got["score"] == got["max_score"], f"{name}: a broken attention.py cost points in {other}"


def test_exit_codes(tmp_path):
    assert attn_course("grade", str(tmp_path / "nowhere"), check=False).returncode == 2
    assert attn_course("grade", "solutions", "--unit", "no_such_unit", check=False).returncode == 2
    nowhere = attn_course("grade", "solutions", check=False, env={"AUTOGRADER_COURSE_ROOT": str(tmp_path / "no_course")})
    assert nowhere.returncode == 2 and "course.toml" in nowhere.stderr and "Traceback" not in nowhere.stderr, nowhere.stderr
    # A course whose own test breaks the conventions is a grader failure, not a zero.
    course = tmp_path / "course_root"
    shutil.copytree(ROOT / "course", course / "course")
    shutil.copytree(COURSE.solutions, course / "solutions")
    (course / "tests" / "hidden").mkdir(parents=True)
    (course / "tests" / "public").mkdir()
    (course / "tests" / "hidden" / "test_bad.py").write_text(
        "import pytest\npytestmark = pytest.mark.unit('attention')\ndef test_x(subject):\n    pass\n"
    )
    proc = attn_course("grade", str(COURSE.solutions), "--unit", "attention", check=False, env={"AUTOGRADER_COURSE_ROOT": str(course)})
    assert proc.returncode == 3, proc.stderr
    assert "points marker" in proc.stderr


def test_unit_filter_limits_the_run():
    (result,) = grade_json([COURSE.solutions], ["attention"])
    assert list(result["units"]) == ["attention"]


def test_the_warm_runner_reports_what_a_new_interpreter_reports(tmp_path):
    """The tests run `attn-course` forked from a warm interpreter (conftest's ``attn_course``,
    ``cli_runner``): for the same command, its exit code, stdout and stderr are a new
    interpreter's, whether the command fails on its arguments, grades in process, or reads its
    course root from the environment given."""
    commands = [
        (("grade", str(tmp_path / "nowhere")), None),
        (("grade", "assignments", "--unit", "attention", "--no-sandbox", "--format", "json"), None),
        (("grade", "solutions", "--unit", "attention"), {"AUTOGRADER_COURSE_ROOT": str(tmp_path / "no_course")}),
    ]
    for args, env in commands:
        warm, fresh = attn_course(*args, check=False, env=env), attn_course(*args, check=False, env=env, fresh=True)
        assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr), args
    assert warm.returncode == 2 and "no_course" in warm.stderr


COLLECTION_PROBE = """
import gc, json
from autograder.core.heavy_imports import collection_paused

def collections():
    return sum(s["collections"] for s in gc.get_stats())

out = {}
frozen, before = gc.get_freeze_count(), collections()
with collection_paused():
    out["enabled_inside"] = gc.isenabled()
    kept = [[] for _ in range(100_000)]  # as many containers as an import makes: collection would run
    out["collections_inside"] = collections() - before
out["enabled_after"] = gc.isenabled()
out["newly_frozen"] = gc.get_freeze_count() - frozen
gc.disable()
with collection_paused():
    pass
out["still_disabled"] = not gc.isenabled()
print(json.dumps(out))
"""


def test_heavy_imports_run_without_collection_and_stay_frozen():
    """A grading process's heavy imports: no collection during them, their objects frozen after,
    and collection as it was before (in a process of its own: freezing would keep the test's heap)."""
    proc = subprocess.run([sys.executable, "-c", COLLECTION_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["enabled_inside"] is False and out["collections_inside"] == 0
    assert out["enabled_after"] is True and out["newly_frozen"] >= 100_000
    assert out["still_disabled"] is True
