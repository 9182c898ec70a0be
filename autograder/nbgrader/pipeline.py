"""``<command> nbgrader``: grade a class with the real nbgrader, scored by the CLI.

The course directory is ``course/`` (``nbgrader_config.py``, ``source/``);
nbgrader writes ``release/``, ``submitted/``, ``autograded/``, ``feedback/``
and ``gradebook.db`` there. The steps::

    build       regenerate course/source/ from solutions/ and the lessons (--check: exit 1 if stale)
    generate    nbgrader generate_assignment, one assignment per unit
    collect     copy INBOX/<student>/**/<unit>.ipynb to submitted/<student>/<unit>/<unit>.ipynb
    autograde   the trusted grade, then nbgrader autograde executing no notebook (below)
    feedback    nbgrader generate_feedback
    export      nbgrader export to CSV
    all         generate, collect, autograde, feedback, export

Why re-score. The student's code would run in the same kernel as nbgrader's
test cells, so anything a kernel says can be patched (``torch.allclose =
lambda *a, **k: True``). So a kernel's verdict never counts: each submitted
notebook's answer cells are read (by nbgrader ``grade_id``, from the JSON),
put between the instructor's read-only parts into the unit's ``.py`` file,
and graded by the CLI's ``grade`` in a separate process (sandboxed by the
CLI). Only then does nbgrader autograde run, so a failed grade stops the step
before nbgrader writes anything. The score of every autograded cell in
nbgrader's gradebook is then the CLI's: a visible test cell gets its public
test's points, the hidden-test cell the sum of the hidden properties'. Manual
scores and extra credit are put back as they were, and every output of the
autograded notebooks is the trusted report (test cells) or nothing.

No kernel. Since nothing a kernel computes would reach the gradebook or the
feedback, this autograde executes no notebook (``--Execute.enabled=False``):
nbgrader still sanitizes, restores the locked cells and records the submission
and its time, and the whole step costs about what ``grade`` does.

Late work (:mod:`autograder.nbgrader.late`): nbgrader's own late penalty is off in this
autograde (it would price nbgrader's full marks); the pipeline prices the re-scored points by the
manifest's ``[late]`` policy, extensions included, into each notebook's
``late_submission_penalty``, which nbgrader's feedback shows and its export subtracts.
``feedback`` and ``export`` price it again from the gradebook as it stands, so points given
in formgrader after ``autograde`` are priced too, whatever the order of the steps.
A plain ``nbgrader autograde`` still executes every notebook, in the sandboxed
kernel of :mod:`autograder.nbgrader.kernel_manager` (set in the course's
``nbgrader_config.py``), and there the kernel's verdict is nbgrader's.

Written answers. The lessons' questions have nbgrader *manually graded answer*
cells (markdown, ``grade`` and ``solution``), which the CLI's rubric does not
hold: they stay nbgrader's own (0 when left as released, else "needs manual
grading" in formgrader until an instructor scores them), so nbgrader's total
is the CLI's plus what the instructor gives for them. They are never executed
(a markdown cell, its type restored by :class:`~autograder.nbgrader.restore.RestoreCellMetadata` before nbgrader
records it) and the trusted side never reads them.

Tampering. :class:`~autograder.nbgrader.restore.RestoreCellMetadata` (in nbgrader's sanitize step, see
``course/nbgrader_config.py``) restores each nbgrader cell's flags and, for
locked cells, its source from the gradebook before nbgrader's own
OverwriteCells; so an edited or flag-flipped test cell is restored (never a
crash, never free points) and a deleted one is added back.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from autograder.core.errors import AutograderError
from autograder.authoring import notebook
from autograder.nbgrader import extract, rescore
from autograder.nbgrader.export import NOT_COLLECTED, REPORT, _db_url, add_status
from autograder.nbgrader.late import _timestamp, after_penalty, reprice, write_due_dates, write_penalties
from autograder.core import lateness
from autograder.core.manifest import Course, load_course
from autograder.core.safe_text import safe_name
from autograder.trust.uploads import SubmissionError, intake
from autograder.delivery import class_report
from autograder.grading.session import isolation_notice

CONFIG = "nbgrader_config.py"


class PipelineError(AutograderError):
    """A step of the pipeline failed (not a student's fault): exit code 3."""


# -- running nbgrader -----------------------------------------------------------------

def use_environment_tools() -> None:
    """nbgrader calls ``alembic`` (and kernels ``python``) by name: find them next to this interpreter."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def run_nbgrader(course_dir: Path, *args: str, per_student: bool = False) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course directory. With ``per_student``, a
    failure that nbgrader reports for some submissions only (a notebook it
    could not read) is printed and grading goes on."""
    use_environment_tools()
    command = [sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(command, cwd=str(course_dir), capture_output=True, text=True)
    failed = re.findall(r"There was an error processing assignment '([^']*)' for student '([^']*)'", proc.stdout + proc.stderr)
    if proc.returncode != 0 and per_student and failed:
        for assignment, student in failed:
            print(f"warning: nbgrader {args[0]} failed for {student}/{assignment} (its trusted score still counts)")
        return proc
    if proc.returncode != 0:
        raise PipelineError(f"`nbgrader {' '.join(args)}` failed (exit {proc.returncode}):\n"
                            f"{(proc.stdout + proc.stderr)[-4000:]}")
    return proc


def assignments(course: Course, course_dir: Path, units: list[str] | None) -> list[str]:
    """The units (= assignments = notebooks) to work on, in course order."""
    chosen = [u.name for u in course.select(units)]
    return [u for u in chosen if (course_dir / "source" / u / f"{u}.ipynb").is_file()]


def patterns(course_dir: Path, units: list[str]) -> list[str]:
    """nbgrader assignment ids to run: one glob for every assignment when all
    are selected (one nbgrader process, not one per unit: each costs seconds)."""
    every = sorted(p.name for p in (course_dir / "source").iterdir() if p.is_dir())
    return ["*"] if sorted(units) == every else list(units)


def students(course_dir: Path, unit: str) -> list[str]:
    folder = course_dir / "submitted"
    return sorted(p.name for p in folder.iterdir() if (p / unit).is_dir()) if folder.is_dir() else []


# -- steps ------------------------------------------------------------------------------

def step_generate(course: Course, course_dir: Path, units: list[str]) -> None:
    if course_dir.resolve() == course.nbgrader_course.resolve():
        old = notebook.stale(course)
        if old:
            raise PipelineError(f"stale notebooks ({', '.join(old)}): run `{course.brand.command} build` first")
    for pattern in patterns(course_dir, units):
        run_nbgrader(course_dir, "generate_assignment", pattern, "--force")
    write_due_dates(_db_url(course_dir), course, units)
    print(f"released {', '.join(units)} in {course_dir / 'release'}")


def step_collect(course: Course, course_dir: Path, units: list[str], inbox: Path) -> tuple[list[str], dict[str, str]]:
    """INBOX/<student>/**/<unit>.ipynb -> submitted/<student>/<unit>/<unit>.ipynb; returns the
    "student/unit" collected and {student: status} of the students collected from not at all.

    Each student's folder goes through the intake every delivery path uses
    (:func:`autograder.trust.uploads.intake`, rules in :mod:`autograder.delivery.submissions`):
    a link is never followed (a notebook linked to the course's own source would otherwise be
    graded as the student's), and a folder with a link, a special file or two copies of one
    notebook is not collected; its status is printed, the same text the other paths give."""
    wanted = {f"{unit}.ipynb": unit for unit in units}
    found, refused = [], {}
    # Folders, and links to be refused: a link to a folder is no student's folder to read.
    students = sorted(p for p in inbox.iterdir() if p.is_symlink() or p.is_dir())
    with tempfile.TemporaryDirectory(prefix="attn-collect-") as tmp:
        for i, student_dir in enumerate(students):
            student, taken_to = student_dir.name, Path(tmp) / f"{i:05d}"
            try:
                # One notebook's limit: its outputs (plots) make it far larger than a unit file.
                taken = intake(student_dir, taken_to, wanted, max_bytes=course.limits.notebook_bytes,
                               limits=course.limits)
            except SubmissionError as error:
                refused[student] = str(error)
                print(f"not collected: {safe_name(student)}: {error}")
                continue
            for name, origin in taken.items():
                target = course_dir / "submitted" / student / wanted[name] / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(taken_to / name, target)
                (target.parent / lateness.TIMESTAMP).write_text(_timestamp(origin or target), encoding="utf-8")
                found.append(f"{student}/{wanted[name]}")
    # The refused of this collect, for the export (the file is rewritten each collect: a student
    # collected now is no longer refused).
    (course_dir / NOT_COLLECTED).write_text(json.dumps(refused, indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"collected {len(found)} notebooks from {inbox}"
          + (f"; {len(refused)} students not collected (above)" if refused else ""))
    return found, refused


def extract_files(course: Course, course_dir: Path, units: list[str]) -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
    """(layouts, {student: {unit: file text}}) from the source and submitted
    notebooks, read as JSON."""
    layouts = {}
    for unit in units:
        layout = extract.read_notebook(course_dir / "source" / unit / f"{unit}.ipynb")
        if layout is None:
            raise PipelineError(f"source/{unit}/{unit}.ipynb is missing or unreadable")
        layouts[unit] = layout
    files: dict[str, dict[str, str]] = {}
    for unit in units:
        for student in students(course_dir, unit):
            path = course_dir / "submitted" / student / unit / f"{unit}.ipynb"
            submitted = extract.read_notebook(path)
            # An unreadable notebook grades as the untouched stubs (nbgrader cannot run it either).
            files.setdefault(student, {})[unit] = extract.module_source(layouts[unit], submitted, course.brand.metadata_key)
    return layouts, files


def _grade_cells(layout: dict, key: str) -> dict[str, list[str]]:
    """grade_id -> the CLI test ids it stands for, for every test cell (the autograded grade cells)."""
    cells = {}
    for cell in layout["cells"]:
        part = cell.get("metadata", {}).get(key, {})
        if part.get("part") == "test":
            cells[cell["metadata"]["nbgrader"]["grade_id"]] = list(part["tests"])
    return cells


def _snapshot(db_url: str, pairs: list[tuple[str, str]]) -> dict[tuple, tuple]:
    """(student, unit, grade_id) -> (manual_score, extra_credit) before nbgrader's autograde resets them."""
    saved = {}
    with Gradebook(db_url) as gb:
        for student, unit in pairs:
            try:
                submission = gb.find_submission_notebook(unit, unit, student)
            except MissingEntry:
                continue
            for grade in submission.grades:
                saved[(student, unit, grade.name)] = (grade.manual_score, grade.extra_credit)
    return saved


def trusted_points(layouts: dict[str, dict], results: dict[str, dict], key: str) -> dict[tuple, tuple[float, float]]:
    """(student, unit, grade_id) -> (the CLI's points, the cell's maximum) for every test cell;
    raises when a notebook and the CLI's rubric disagree. The manually graded answer cells are
    no test cells: nbgrader's own grades stand there."""
    points = {}
    for student, result in results.items():
        for unit, layout in layouts.items():
            if unit not in result["units"]:
                continue
            scores = rescore.test_scores(result, unit)
            for gid, test_ids in _grade_cells(layout, key).items():
                records = [scores[t] for t in test_ids if t in scores]
                expected = next(c for c in layout["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == gid)
                max_score = float(expected["metadata"]["nbgrader"]["points"])
                graded_max = sum(r["max_score"] for r in records)
                if records and abs(graded_max - max_score) > 1e-9:
                    raise PipelineError(f"{unit} cell {gid} is worth {max_score:g} in the notebook but "
                                        f"{graded_max:g} in the CLI rubric: run the CLI's build")
                points[(student, unit, gid)] = (float(sum(r["score"] for r in records)), max_score)
    return points


def write_points(db_url: str, points: dict[tuple, tuple[float, float]], saved: dict) -> dict[tuple, float]:
    """Write the trusted points into every test cell's grade; returns {(student, unit): autograded score}."""
    totals: dict[tuple, float] = {}
    missing = set()
    with Gradebook(db_url) as gb:
        for (student, unit, gid), (score, max_score) in points.items():
            if (student, unit) in missing:
                continue
            cell = gb.find_grade_cell(gid, unit, unit)
            cell.max_score = max_score  # as generated, whatever nbgrader's run wrote into the database
            try:
                grade = gb.find_grade(gid, unit, unit, student)
            except MissingEntry:
                print(f"warning: no nbgrader submission for {student}/{unit}: not in the gradebook")
                missing.add((student, unit))
                continue
            grade.auto_score = score
            grade.needs_manual_grade = False
            grade.manual_score, grade.extra_credit = saved.get((student, unit, gid), (None, None))
            totals[(student, unit)] = totals.get((student, unit), 0.0) + score
        gb.db.commit()
    return totals


def _stream(text: str):
    return nbformat.v4.new_output("stream", name="stdout", text=text.rstrip("\n") + "\n")


def trusted_outputs(course_dir: Path, layouts: dict, results: dict, key: str) -> None:
    """Replace every output of the autograded notebooks: a test cell shows the
    trusted report, any other cell nothing."""
    for student, result in results.items():
        for unit, layout in layouts.items():
            path = course_dir / "autograded" / student / unit / f"{unit}.ipynb"
            if not path.is_file() or unit not in result["units"]:
                continue
            nb = nbformat.read(str(path), as_version=4)
            cells = _grade_cells(layout, key)
            for cell in nb.cells:
                gid = cell.metadata.get("nbgrader", {}).get("grade_id")
                if cell.cell_type == "code":
                    if gid in cells:
                        hidden = gid == notebook.grade_id(unit, "hidden")
                        text = (rescore.hidden_report(result, unit)[0] if hidden
                                else rescore.visible_report(result, unit, cells[gid][0]))
                        cell.outputs = [_stream(text)]
                    else:
                        cell.outputs = []
                if gid not in cells:  # a student's copy of the markers would crash ClearHiddenTests
                    cell.source = cell.source.replace(notebook.HIDDEN_BEGIN, "### (marker removed)") \
                                             .replace(notebook.HIDDEN_END, "### (marker removed)")
            nbformat.write(nb, str(path))


def step_autograde(course: Course, course_dir: Path, units: list[str]) -> dict:
    """The trusted grade, then nbgrader autograde executing no notebook, then the trusted
    points and reports into the gradebook and the autograded notebooks; returns the scores
    and the results.

    nbgrader gives an unexecuted test cell all its points, so none of them may stand: the
    trusted grade comes first (a failure there stops the step before nbgrader writes
    anything), and its points are written even when nbgrader stops half-way."""
    db_url = _db_url(course_dir)
    layouts, files = extract_files(course, course_dir, units)
    if not files:
        print("nothing to autograde: submitted/ is empty")
        return {"scores": {}}
    started = time.perf_counter()
    present = [u for u in units if any(u in handed for handed in files.values())]
    try:
        graded = rescore.grade_sources(course, files, present)
    except RuntimeError as error:
        raise PipelineError(str(error)) from None
    trusted_done = time.perf_counter() - started
    results = {student: {"units": {u: graded[student]["units"][u] for u in us}} for student, us in files.items()}
    key = course.brand.metadata_key
    points = trusted_points(layouts, results, key)
    pairs = [(s, u) for s, us in files.items() for u in us]
    saved = _snapshot(db_url, pairs)
    write_due_dates(db_url, course, units)
    try:
        for pattern in patterns(course_dir, units):
            if pattern == "*" or students(course_dir, pattern):
                # No kernel: every output of an autograded notebook is replaced by the trusted report.
                # No late penalty of nbgrader's: it would price nbgrader's full marks (write_penalties).
                run_nbgrader(course_dir, "autograde", pattern, "--force", "--Execute.enabled=False",
                             "--AssignLatePenalties.enabled=False", per_student=True)
    finally:
        scores = write_points(db_url, points, saved)
        late = write_penalties(db_url, course, pairs)
    trusted_outputs(course_dir, layouts, results, key)
    # The class report, and the sandbox mode the trusted grade ran in (the CLI's own, probed alike).
    notice = isolation_notice()
    if notice:
        print(f"{course.brand.command}: {notice}", file=sys.stderr)
    every, priced = sorted(p.name for p in (course_dir / "source").iterdir() if p.is_dir()), after_penalty(graded, late, course.late)
    title = "Class report (nbgrader)" if sorted(units) == every else class_report.title("Class report (nbgrader)", units, every)
    class_report.write(course_dir / REPORT, [class_report.from_result(r, priced.get(s)) for s, r in graded.items()],
                       title=title, isolation=notice)
    n_notebooks = sum(len(us) for us in files.values())
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"autograded {n_notebooks} notebooks of {len(files)} students in {time.perf_counter() - started:.1f} s "
          f"(trusted grading {trusted_done:.1f} s, then nbgrader; CPU {cpu.ru_utime + cpu.ru_stime:.1f} s)")
    for (student, unit), (days, penalty) in sorted(late.items()):
        print(f"late: {safe_name(student)}/{unit}: {lateness.note(days, penalty)}")
    zero = rescore.all_zero_warning(results)
    if zero:
        print(zero)
    return {"scores": scores, "results": results, "late": late}


def step_feedback(course: Course, course_dir: Path, units: list[str]) -> None:
    """nbgrader's feedback, after every penalty is priced again from the gradebook as it stands
    (:func:`~autograder.nbgrader.late.reprice`: points given in formgrader since ``autograde``)."""
    reprice(_db_url(course_dir), course)
    for pattern in patterns(course_dir, units):
        if pattern == "*" or students(course_dir, pattern):
            run_nbgrader(course_dir, "generate_feedback", pattern, "--force", per_student=True)
    print(f"feedback in {course_dir / 'feedback'}")


def step_export(course: Course, course_dir: Path, output: Path) -> Path:
    """nbgrader's CSV with a status column (:func:`~autograder.nbgrader.export.add_status`), after
    every penalty is priced again from the gradebook as it stands, as for the feedback."""
    output = output if output.is_absolute() else Path.cwd() / output
    reprice(_db_url(course_dir), course)
    run_nbgrader(course_dir, "export", f"--to={output}")
    add_status(course_dir, output)
    print(f"wrote {output}")
    return output


# -- command line -------------------------------------------------------------------------

def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--course", type=Path, help="the nbgrader course directory (default: the manifest's nbgrader_course)")
    parser.add_argument("--unit", action="append", dest="units", metavar="UNIT", help="only this unit (repeatable)")
    sub = parser.add_subparsers(dest="step", required=True)
    build = sub.add_parser("build", help="regenerate the source notebooks from the solutions and the lessons")
    build.add_argument("--check", action="store_true", help="only report stale notebooks (exit 1 if any)")
    sub.add_parser("generate", help="nbgrader generate_assignment for every unit")
    sub.add_parser("collect", help="copy INBOX/<student>/**/<unit>.ipynb into submitted/").add_argument("inbox", type=Path)
    sub.add_parser("autograde", help="nbgrader autograde, scored by the grade command")
    sub.add_parser("feedback", help="nbgrader generate_feedback")
    export = sub.add_parser("export", help="nbgrader export to CSV")
    every = sub.add_parser("all", help="generate, collect INBOX, autograde, feedback, export")
    every.add_argument("inbox", type=Path)
    for cmd in (export, every):
        cmd.add_argument("-o", "--output", type=Path, default=Path("grades.csv"), help="CSV file (default: grades.csv)")
    return parser


def main(argv: list[str] | None = None) -> int:
    course = load_course()
    prog = f"{course.brand.command} nbgrader"
    args = _parser(prog).parse_args(argv)
    use_environment_tools()
    course_dir = (args.course or course.nbgrader_course).resolve()
    try:
        if args.step == "build":
            if args.check:
                old = notebook.stale(course)
                print("stale: " + ", ".join(old) if old else "all notebooks are current")
                return 1 if old else 0
            for path in notebook.build(course):
                print(f"wrote {path.relative_to(course.root)}")
            return 0
        if not (course_dir / CONFIG).is_file():
            print(f"{prog}: no {CONFIG} in {course_dir}", file=sys.stderr)
            return 2
        course.select(args.units)
        if args.step in ("generate", "all"):
            step_generate(course, course_dir, assignments(course, course_dir, args.units))
        units = assignments(course, course_dir, args.units)
        if args.step in ("collect", "all"):
            if not args.inbox.is_dir():
                print(f"{prog}: no such folder: {args.inbox}", file=sys.stderr)
                return 2
            step_collect(course, course_dir, units, args.inbox)
        if args.step in ("autograde", "all"):
            step_autograde(course, course_dir, units)
        if args.step in ("feedback", "all"):
            step_feedback(course, course_dir, units)
        if args.step in ("export", "all"):
            step_export(course, course_dir, args.output)
    except ValueError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    except PipelineError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    from autograder.core.shutdown import exit_code

    sys.exit(exit_code(main()))
