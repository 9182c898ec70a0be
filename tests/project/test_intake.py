"""One intake for every path (issue 43, item 2): the same hostile uploads through ``collect()``,
the CLI's ``grade``, ``grade-batch``, Gradescope, PrairieLearn and nbgrader's ``collect``, with
the same status text on each, and the honest control graded on its top-level copy.

The uploads are built by tests/hostile/intake/intake_cases.py. The paths that grade (the CLI,
grade-batch, Gradescope and PrairieLearn, sandboxed) run in full, container and plain mode
(tests/project/modes.py); nbgrader's collect grades nothing (it copies), so it runs once.
"""
from __future__ import annotations

import csv
import json
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import pytest

import modes
from conftest import ROOT
from autograder.core.manifest import load_course
from autograder.trust.uploads import STATUS_LIMIT, NothingFound, SubmissionError, intake
from autograder.delivery.gradescope import Gradescope
from autograder.delivery.prairielearn import PrairieLearn
from autograder.delivery.submissions import collect
from autograder.nbgrader import pipeline as steps

sys.path.insert(0, str(ROOT / "tests" / "hostile" / "intake"))
import intake_cases  # noqa: E402

COURSE = load_course(ROOT)
SOLUTION = COURSE.solutions / "attention.py"
CASES = list(intake_cases.EXPECTED)


def _status(take, *args, **kwargs) -> str:
    """The status of an upload that ``take(*args, **kwargs)`` refuses (not merely finds empty)."""
    with pytest.raises(SubmissionError) as refused:
        take(*args, **kwargs)
    assert not isinstance(refused.value, NothingFound), refused.value
    return str(refused.value)


@pytest.fixture(scope="module")
def uploads(tmp_path_factory):
    """Every case as a student's folder of one class, and the status ``collect()`` gives it."""
    subs = tmp_path_factory.mktemp("intake") / "subs"
    subs.mkdir()
    for case in [*CASES, "top_wins"]:
        intake_cases.build(case, subs / case, "attention.py", SOLUTION)
    scratch = tmp_path_factory.mktemp("collected")
    return subs, {case: _status(collect, subs / case, scratch / case, COURSE) for case in CASES}


@pytest.mark.parametrize("case", CASES)
def test_collect_refuses_each_case_with_a_status_that_names_it(uploads, case):
    status = uploads[1][case]
    assert intake_cases.EXPECTED[case].format(file="attention.py") in status, status
    assert len(status) <= STATUS_LIMIT and "\n" not in status and str(uploads[0]) not in status, status


def test_a_top_level_copy_is_graded_over_its_backups(uploads, tmp_path):
    folder = collect(uploads[0] / "top_wins", tmp_path / "out", COURSE)
    assert [p.name for p in folder.iterdir()] == ["attention.py"]
    assert (folder / "attention.py").read_bytes() == SOLUTION.read_bytes()


def test_a_zip_is_taken_in_by_the_rules_of_a_folder(tmp_path):
    """Its members as a folder's files: a top-level copy wins, a link of a wanted name is refused
    (naming it), and a zip inside it is never unpacked."""
    def upload(name: str, members: dict[str, tuple[bytes, int]]) -> Path:
        with zipfile.ZipFile(tmp_path / f"{name}.zip", "w") as zf:
            for member, (data, kind) in members.items():
                info = zipfile.ZipInfo(member)
                info.external_attr = (kind | 0o644) << 16
                zf.writestr(info, data)
        return tmp_path / f"{name}.zip"

    answer = SOLUTION.read_bytes()
    top = collect(upload("top", {"attention.py": (answer, stat.S_IFREG), "old/attention.py": (b"x", stat.S_IFREG)}),
                  tmp_path / "top", COURSE)
    assert (top / "attention.py").read_bytes() == answer
    linked = upload("linked", {"hw/attention.py": (str(SOLUTION).encode(), stat.S_IFLNK)})
    status = _status(collect, linked, tmp_path / "linked", COURSE)
    assert status == "hw/attention.py is a symlink; links are not followed: upload the file itself"
    (tmp_path / "inner").mkdir()
    inner = upload("inner/inner", {"attention.py": (answer, stat.S_IFREG)})
    outer = upload("outer", {"inner.zip": (inner.read_bytes(), stat.S_IFREG)})
    with pytest.raises(NothingFound, match=r"found inner\.zip\)"):
        collect(outer, tmp_path / "outer", COURSE)


@pytest.mark.parametrize("mode", modes.MODES)
def test_the_cli_reports_each_refusal_with_the_same_status(uploads, mode):
    modes.require(mode)
    subs, statuses = uploads
    cases = [*CASES, "top_wins"]
    out = json.loads(modes.attn_course(mode, "grade", *(str(subs / c) for c in cases), "--unit", "attention",
                                       "--jobs", "1", "--format", "json").stdout)
    results = dict(zip(cases, out))
    honest = results["top_wins"]
    assert honest["score"] == honest["max_score"] > 0, "the top-level copy, not the broken backup, is graded"
    for case in CASES:
        unit = results[case]["units"]["attention"]
        assert (unit["status"], unit["message"]) == ("unavailable", statuses[case]), (case, unit["message"])
        # 0 of the points a graded upload could earn (so --fail-under fails it), never 0 of 0.
        assert (unit["score"], unit["max_score"]) == (0, honest["max_score"]), case
        assert {t["output"] for t in unit["tests"]} == {statuses[case]}, case
    assert honest["submission"] == str((subs / "top_wins").resolve()), "never the intake's temporary copy"


@pytest.mark.parametrize("mode", modes.MODES)
def test_grade_batch_gives_each_refusal_the_same_status(uploads, tmp_path, mode):
    modes.require(mode)
    subs, statuses = uploads
    out = tmp_path / "out"
    # Every refused upload needs the instructor's attention: grade-batch says so by its exit code (4).
    proc = modes.attn_course(mode, "grade-batch", str(subs), "-o", str(out), "--unit", "attention", "--no-progress",
                             check=False)
    assert proc.returncode == 4, proc.stderr[-3000:]
    with (out / "gradebook.csv").open(newline="", encoding="utf-8") as handle:
        book = {row[0]: row for row in csv.reader(handle)}
    for case in CASES:
        assert book[case][1] == statuses[case], (case, book[case])
    assert book["top_wins"][1] == "graded" and float(book["top_wins"][2]) == float(book["Points Possible"][2]) > 0
    warning = json.loads((out / "summary.json").read_text(encoding="utf-8"))["isolation_warning"]
    assert (warning or "").startswith("" if mode == "full" else f"WARNING: {mode} mode") and bool(warning) != (mode == "full")


@pytest.mark.parametrize("case", CASES)
def test_gradescope_and_prairielearn_give_the_same_status(uploads, case, tmp_path):
    """What each path's intake answers, case by case (in this process, unsandboxed: the intake is
    the grader's side); the sandboxed runs in each mode are the next test."""
    status = uploads[1][case]
    scope = tmp_path / "gradescope"
    intake_cases.build(case, scope / "submission", "attention.py", SOLUTION)
    data = Gradescope().run(scope, COURSE, sandbox=False)
    assert (data["output"], data["score"], data["tests"]) == (status, 0.0, [])
    learn = tmp_path / "prairielearn"
    intake_cases.build(case, learn / "student", "attention.py", SOLUTION)
    data = PrairieLearn().run(learn, COURSE, sandbox=False)
    assert (data["gradable"], data["format_errors"]) == (False, [status])


RUN_PLATFORMS = """
import json, sys
from pathlib import Path
from autograder.core.manifest import load_course
from autograder.delivery.gradescope import Gradescope
from autograder.delivery.prairielearn import PrairieLearn
course, root = load_course(Path.cwd()), Path(sys.argv[1])
answers = {case.name: [Gradescope().run(case / "gs", course), PrairieLearn().run(case / "pl", course)]
           for case in sorted(root.iterdir())}
print(json.dumps(answers))
"""


@pytest.mark.parametrize("mode", modes.MODES)
def test_gradescope_and_prairielearn_sandboxed_in_each_mode(uploads, tmp_path, mode):
    """Every case and the honest control through both entry points, sandboxed, in one run per mode."""
    modes.require(mode)
    statuses = uploads[1]
    for case in [*CASES, "top_wins"]:
        intake_cases.build(case, tmp_path / case / "gs" / "submission", "attention.py", SOLUTION)
        intake_cases.build(case, tmp_path / case / "pl" / "student", "attention.py", SOLUTION)
    run = modes.run_python(mode, RUN_PLATFORMS, str(tmp_path), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    answers = json.loads(run.stdout.splitlines()[-1])
    for case in CASES:
        scope, learn = answers[case]
        assert (scope["output"], scope["score"], scope["tests"]) == (statuses[case], 0.0, []), case
        assert (learn["gradable"], learn["format_errors"]) == (False, [statuses[case]]), case
    scope, learn = answers["top_wins"]
    own = [t for t in scope["tests"] if t["tags"] == ["attention"]]  # (the units not uploaded score 0)
    assert scope["score"] == sum(t["max_score"] for t in own) > 0 and all(t["status"] == "passed" for t in own)
    learned = [t for t in learn["tests"] if t["name"].startswith(COURSE.units["attention"].title)]
    assert learned and all(t["points"] == t["max_points"] for t in learned), learn.get("output")


@pytest.fixture(scope="module")
def nbgrader_class(tmp_path_factory):
    """A course folder with its source notebooks, and an inbox of the hostile cases made of
    notebooks, pointed at the course's own source notebook (full marks if it were graded)."""
    base = tmp_path_factory.mktemp("nbgrader-intake")
    course_dir = base / "course"
    shutil.copytree(COURSE.nbgrader_source, course_dir / "source")
    source = course_dir / "source" / "attention" / "attention.ipynb"
    inbox = base / "inbox"
    for case in [*CASES, "top_wins"]:
        intake_cases.build(case, inbox / case, "attention.ipynb", source)
    secret = base / "secret.txt"
    secret.write_text("SECRET-OF-THE-GRADER", encoding="utf-8")
    (inbox / "top_wins" / "timestamp.txt").symlink_to(secret)  # read beside the notebook: never through a link
    return course_dir, inbox, source


def test_nbgrader_collect_refuses_the_same_uploads_with_the_same_status(uploads, nbgrader_class, tmp_path, capsys):
    course_dir, inbox, source = nbgrader_class
    found, refused = steps.step_collect(COURSE, course_dir, ["attention"], inbox)
    printed = capsys.readouterr().out
    assert found == ["top_wins/attention"] and set(refused) == set(CASES), (found, refused)
    for case in CASES:
        status = refused[case]
        assert status == _status(intake, inbox / case, tmp_path / case, {"attention.ipynb"},
                                 max_bytes=COURSE.limits.notebook_bytes), case
        assert f"not collected: {case}: {status}" in printed, case
        assert intake_cases.EXPECTED[case].format(file="attention.ipynb") in status, status
        if case != "oversize":  # (a notebook's limit is not a unit file's)
            assert status == uploads[1][case].replace("attention.py", "attention.ipynb"), case
        assert not (course_dir / "submitted" / case).exists(), f"{case}: collected despite its status"
    collected = course_dir / "submitted" / "top_wins" / "attention"
    assert (collected / "attention.ipynb").read_bytes() == source.read_bytes()
    assert "SECRET" not in (collected / "timestamp.txt").read_text(encoding="utf-8")
