"""The command line's commands: each one a function of the course and its parsed arguments.

A thin layer: :func:`autograder.cli_arguments.parser` reads the arguments, :data:`COMMANDS` names the
function of each command, and every error a command may raise ends in its exit code
(:mod:`autograder.core.errors` carries them; an existing output folder is :data:`EXISTS`), in one
place:

* 0 when the command ran (whatever the score);
* 1 when a score is below ``--fail-under`` (or ``build --check`` finds stale files, or
  ``repro``'s call still gives a wrong answer);
* 2 for bad arguments, a missing submission or an existing output folder;
* 3 when the grader itself failed;
* 4 when ``grade-batch`` ran but some students need attention (an upload refused or not
  graded, blank in the gradebook; an upload no roster row holds): the summary lists them;
* 130 when a batch was interrupted (its finished students are kept).

``<command> nbgrader ...`` runs the nbgrader pipeline
(:mod:`autograder.nbgrader.pipeline`); any other command the course manifest
lists under ``[commands]`` (such as ``viz``) runs that course file's ``main``.
The program's name is the manifest's ``[branding] command``.
"""
from __future__ import annotations

import json
import sys
import tempfile
import traceback
from pathlib import Path

from rich.console import Console

from autograder import cli_arguments
from autograder.authoring.rubric import rubric
from autograder.core import i18n
from autograder.core.i18n import N_, _
from autograder.core.manifest import Course, load_course
from autograder.core.results import GradeResult, TestResult, UnitResult
from autograder.core.shutdown import exit_code
from autograder.delivery.formats import to_junit, to_markdown
from autograder.delivery.lms import (LMS_LAYOUTS, lms_columns, lms_gradebook, read_lms_roster,
                                     records_from_nbgrader_csv, unmatched_csv)
from autograder.delivery.lms_settings import lms_settings
from autograder.delivery.classroom import Classroom
from autograder.delivery.gradescope import Gradescope
from autograder.delivery.prairielearn import PrairieLearn
from autograder.delivery.submissions import NothingFound, SubmissionError, collect
from autograder.grading import parallel, prerequisites
from autograder.core.errors import AutograderError, FailUnder, GraderError, UsageError
from autograder.grading.report import print_results
from autograder.grading.session import GradingSession

PLATFORMS = {platform.name: platform for platform in (Gradescope, Classroom, PrairieLearn)}  # what `export` writes


# What a command may raise, and the exit code and message prefix it ends with: the engine's own
# errors carry their code (autograder/core/errors.py); an existing output folder is the user's.
PREFIXES = {GraderError: N_("grader failure: ")}
EXISTS = 2  # FileExistsError: an existing output folder


# -- the commands: each takes the course and its parsed arguments, returns an exit code ----------

def _build(course: Course, args) -> int:
    from autograder.authoring import catalogue, notebook, stubgen  # nbformat's import alone takes a second

    if args.check:
        stale = stubgen.stale(course.solutions, course.assignments) + notebook.stale(course) + catalogue.stale(course)
        print("stale: " + ", ".join(stale) if stale else "all stubs, notebooks and message catalogues are current")
        return 1 if stale else 0
    # The message catalogues are extracted again (autograder/authoring/catalogue.py): a new message
    # gets an empty translation in each language, for its translator to fill in.
    for path in (stubgen.build(course.solutions, course.assignments) + notebook.build(course, args.lang)
                 + catalogue.build(course)):
        print(f"wrote {path.relative_to(course.root) if path.is_relative_to(course.root) else path}")
    return 0


def _need_hidden_tests(course: Course) -> None:
    """Grading runs the hidden suites: where they are absent (a student's bundle) say so, not pytest."""
    if not course.hidden_tests.is_dir():
        raise UsageError(_("no hidden tests here ({folder}/ is the instructor's): grades come from the course's "
                           "grader; `{command} check` runs the public tests on your work").format(
            folder=course.hidden_tests.relative_to(course.root).as_posix(), command=course.brand.command))


def _grade(course: Course, args) -> int:
    _need_hidden_tests(course)
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(_("--jobs must be at least 1"))
    return _grade_folders(course, args, args.paths, intake=True, seed=args.seed, sandbox=args.sandbox,
                          timeout=args.timeout, jobs=args.jobs)


def _check(course: Course, args) -> int:
    args.units = (args.units or []) + args.unit_args
    # Checking your own work: only the public tests, your own siblings (no stand-ins), in this
    # process. For Classroom, whose points are this run's report, as `grade` does: the stand-ins
    # where they are present, and the sandbox, so the code under test cannot write the report.
    for_classroom = args.format == "classroom"
    options = {"suites": ("public",), "isolate": for_classroom and Classroom.isolates(course), "sandbox": for_classroom}
    folder = args.path or course.assignments
    notebooks = _notebooks(course, folder)
    if notebooks:  # one place to write code: the unit file, which a notebook's answer cells make up
        return _check_notebooks(course, args, folder, notebooks, options)
    if args.save:
        raise UsageError(_("--save writes a notebook's answer cells into {folder}: give --path a notebook (or a "
                           "folder of them)").format(folder=course.assignments.relative_to(course.root).as_posix()))
    code = _grade_folders(course, args, [folder], **options)
    _say_where_code_goes(course, args, folder)
    return code


def _notebooks(course: Course, folder: Path) -> dict[str, Path]:
    from autograder.authoring import answers

    if not folder.exists():
        return {}
    try:
        return answers.notebooks_in(course, folder)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _check_notebooks(course: Course, args, given: Path, notebooks: dict[str, Path], options: dict) -> int:
    """``check`` of notebooks: each checked as the unit file its answer cells make up (written into
    the course's assignments/ file, whose other units are the siblings); with ``--save`` that file
    is written into assignments/, the one handed in (the one it replaces kept beside it)."""
    import shutil

    from autograder.authoring import answers

    if not args.units:
        args.units = list(notebooks)
    try:
        made = answers.written(course, {u: p for u, p in notebooks.items() if u in args.units or not args.units},
                               course.assignments)
    except ValueError as error:
        raise UsageError(str(error)) from None
    with tempfile.TemporaryDirectory(prefix="attn-notebooks-") as tmp:
        folder = Path(tmp)
        for unit in course.units.values():
            if (course.assignments / unit.file).is_file():
                shutil.copyfile(course.assignments / unit.file, folder / unit.file)
        for one in made:
            (folder / course.units[one.unit].file).write_text(one.text, encoding="utf-8")
        code = _grade_folders(course, args, [folder], shown=str(given.resolve()), **options)
    for one in made:
        file = course.units[one.unit].file
        print(_("{notebook}: checked as {file}, {filled} from its answer cells, {kept} from {folder}").format(
            notebook=one.notebook, file=file, filled=", ".join(one.from_notebook) or _("no definition"),
            kept=", ".join(one.kept) or _("nothing else"), folder=course.assignments / file), file=sys.stderr)
        target = course.assignments / file
        if args.save and one.from_notebook and (not target.is_file() or target.read_text(encoding="utf-8") != one.text):
            if target.is_file():
                shutil.copyfile(target, target.with_name(target.name + ".bak"))
            target.write_text(one.text, encoding="utf-8")
            print(_("wrote {file}, the file you hand in (the one it replaces: {backup})").format(
                file=target, backup=target.name + ".bak"), file=sys.stderr)
        elif not args.save and one.from_notebook:
            print(_("to hand it in, write it into {file}: {command} check --path {notebook} --save").format(
                file=target, command=course.brand.command, notebook=one.notebook), file=sys.stderr)
    return code


def _say_where_code_goes(course: Course, args, folder: Path) -> None:
    """After checking unit files still (partly) the stubs: where code written in a notebook is checked."""
    from autograder.core.results import NOT_IMPLEMENTED

    stubs = [u for u in course.select(args.units) if (folder / u.file).is_file()
             and f": {NOT_IMPLEMENTED}" in (folder / u.file).read_text(encoding="utf-8", errors="replace")]
    if stubs and args.format == "table":
        print(_("Still the stub here: {files}. Code written in a lesson notebook's answer cells is checked "
                "from the notebook: {command} check --path lessons/{unit}.ipynb (--save writes it into {folder}).").format(
            files=", ".join(u.file for u in stubs), command=course.brand.command, unit=stubs[0].name,
            folder=folder), file=sys.stderr)


def _repro(course: Course, args) -> int:
    """0 when the call now gives the expected value, 1 when it does not."""
    from autograder.authoring.contract import unit_section
    from autograder.core.cases import loads
    from autograder.grading import repro

    if args.unit not in course.units:
        raise UsageError(_("unknown unit {unit!r}; the units are {units}").format(unit=args.unit,
                                                                                 units=", ".join(course.units)))
    if not args.property.isidentifier():  # it is printed: a shared command may not carry control sequences
        raise UsageError(_("{name!r} is not a property's name; copy it from the failure message").format(
            name=args.property))
    try:
        case = loads(args.example)
    except ValueError as error:
        raise UsageError(_("--example is not a case from a failure message: {problem}; copy the whole reproduce "
                           "command from the message").format(problem=error)) from None
    if case["call"].unit != args.unit:
        raise UsageError(_("the example is a case of unit {theirs!r}, not {unit!r}").format(theirs=case["call"].unit,
                                                                                            unit=args.unit))
    # Examples are shared: what one may run is the unit's API as the course's API page declares it.
    api = repro.Api.parse(args.unit, unit_section(course, args.unit))
    try:
        api.admit(case["call"])
    except ValueError as error:
        raise UsageError(_("--example is refused, nothing ran: {problem}. repro runs only {unit}'s own API; take "
                           "the command from your own failure message").format(problem=error, unit=args.unit)) from None
    if args.snippet:
        print(repro.snippet(course, case, api), end="")
        return 0
    folder = args.path or course.assignments
    if not folder.is_dir():
        raise UsageError(_("no such folder: {folder}").format(folder=folder))
    report, fixed = repro.rerun(course, folder, case, api)
    print(f"{args.unit} / {args.property}\n{report}")
    return 0 if fixed else 1


def _grade_folders(course: Course, args, folders: list[Path], jobs: int | None = 1, *, intake: bool = False,
                   shown: str | None = None, **options) -> int:
    """Grade ``folders`` and report. With ``intake`` (``grade``), each folder is first taken in as
    every delivery path takes an upload (:mod:`autograder.delivery.submissions`): what is graded
    is a copy of its unit files, and a refused folder is reported with its status, unit by unit."""
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise UsageError(_("no such submission folder: {folders}").format(folders=", ".join(missing)))
    units = [u.name for u in course.select(args.units)]
    with tempfile.TemporaryDirectory(prefix="attn-intake-") as tmp:
        taken = [_take_in(course, f, Path(tmp) / f"{i:04d}") if intake else f for i, f in enumerate(folders)]
        # The unit at fault, pointed at (autograder/grading/prerequisites.py): with the student's own
        # siblings in process, which unit files each test ran is recorded.
        own = not options.get("isolate", True)
        with prerequisites.watch(course, [t for t in taken if isinstance(t, Path)],
                                 enabled=own and not options.get("sandbox", True)) as watched:
            graded = iter(_grade_all(course, args, [t for t in taken if isinstance(t, Path)], units, jobs, options))
        results = []
        for folder, took in zip(folders, taken):
            result = next(graded) if isinstance(took, Path) else _refused(course, units, took)
            if isinstance(took, Path):
                prerequisites.annotate(course, result, took, stand_ins=not own, watched=watched)
            result.submission = shown or str(folder.resolve())  # never the intake's temporary copy
            results.append(result)
    _emit(course, results, args)
    if args.fail_under is not None and any(r.score < args.fail_under / 100 * r.max_score for r in results):
        raise FailUnder(_("a submission scored below {percent:g}%").format(percent=args.fail_under))
    return 0


def _take_in(course: Course, folder: Path, dest: Path) -> Path | str:
    """The folder to grade, or the status that refuses ``folder``."""
    try:
        return collect(folder, dest, course)
    except NothingFound:
        return dest  # graded as it is: each unit says its file was not found
    except SubmissionError as error:
        return str(error)


def _refused(course: Course, units: list[str], status: str) -> GradeResult:
    """A refused folder's result: every unit unavailable with the status, each property 0 of its points."""
    return GradeResult(submission="", units={
        unit.name: UnitResult(unit.name, unit.title, "unavailable", status, [
            TestResult(r.test_id, _(r.name), 0.0, r.points, "failed", status, r.visibility)
            for r in rubric(course, unit.name)])
        for unit in course.select(units)})


def _grade_all(course: Course, args, folders: list[Path], units: list[str], jobs: int | None, options: dict):
    if not folders:
        return []  # every folder refused: no grader to start
    jobs = min(parallel.usable_cpus() if jobs is None else jobs, len(units))
    options = dict(options)
    sandbox = options.pop("sandbox", True)
    with GradingSession(course, sandbox=sandbox) as session:
        if jobs > 1:  # one zygote for all the groups
            return parallel.grade_in_groups(course, folders, units, jobs, {**options, "sandbox": sandbox},
                                            session.pool)
        return session.grade(folders, args.units, **options)


def _batch(course: Course, args) -> int:
    from autograder.delivery.batch import NEEDS_ATTENTION, closing_line, grade_batch, read_mapping

    _need_hidden_tests(course)
    if not args.submissions.is_dir():
        raise UsageError(f"no such folder: {args.submissions}")
    if args.csv in LMS_LAYOUTS and not args.roster:
        raise UsageError(f"--csv {args.csv} needs --roster: the LMS's own gradebook export")
    if args.roster and args.csv not in LMS_LAYOUTS:
        raise UsageError(f"--roster is an LMS's gradebook export: it goes with --csv {' or '.join(LMS_LAYOUTS)}")
    try:
        roster = read_lms_roster(args.csv, args.roster) if args.roster else None
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise UsageError(f"the roster cannot be read: {error}") from None
    if args.csv in LMS_LAYOUTS:  # every unit finds its column in the roster before anything is graded
        assert roster is not None  # --roster was required above
        try:
            lms_columns(args.csv, roster, [u.name for u in course.select(args.units)], lms_settings(course))
        except ValueError as error:
            raise UsageError(f"no {args.csv} gradebook from this roster: {error}") from None
    try:
        mapping = read_mapping(args.mapping) if args.mapping else None
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise UsageError(f"the map cannot be read: {error}") from None
    if args.scheduler:  # Dask, imported only here (autograder/delivery/cluster.py)
        try:
            import distributed  # noqa: F401

            from autograder.delivery.cluster import grade_batch_cluster
        except ImportError as error:
            raise UsageError(f"--scheduler needs Dask distributed (pip install -e .[cluster]): {error}") from None
        summary = grade_batch_cluster(course, args.submissions, args.output, args.scheduler, units=args.units,
                                      show_progress=args.progress, student_budget=args.student_budget,
                                      gradebook=args.csv, roster=roster, mapping=mapping)
    else:
        summary = grade_batch(course, args.submissions, args.output, jobs=args.jobs, units=args.units,
                              show_progress=args.progress, student_budget=args.student_budget,
                              gradebook=args.csv, roster=roster, mapping=mapping)
    # Late work is priced by course.toml's [late] and each unit's due (autograder/core/lateness.py).
    print(closing_line(summary, args.output / "gradebook.csv", args.output / "summary.md"))
    return NEEDS_ATTENTION if summary.get("needs_attention") else 0


def _set_due(course: Course, args) -> int:
    from autograder.delivery.due_dates import set_due_of  # ValueError: exit 2, the file unchanged

    print(set_due_of(course.root, args.unit, args.date))
    return 0


def _lms(course: Course, args) -> int:
    try:
        names, possible, records = records_from_nbgrader_csv(args.grades)
        units = [u.name for u in course.select(args.units) if u.name in names]
        book = lms_gradebook(args.layout, units, possible, records, read_lms_roster(args.layout, args.roster),
                             lms_settings(course))
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise UsageError(str(error)) from None
    args.output.write_text(book.text, encoding="utf-8")
    unmatched = args.output.with_name("unmatched.csv")
    unmatched.write_text(unmatched_csv(units, book.unmatched), encoding="utf-8")
    for warning in book.warnings:
        print(f"check: {warning}")
    print(f"wrote {args.output} ({', '.join(book.columns.values())}); {len(book.unmatched)} not on the roster: "
          f"see {unmatched}")
    return 0


def _release(course: Course, args) -> int:
    from autograder.delivery.release import release

    print(f"wrote {release(course, args.out, args.langs)}")
    return 0


def _export(course: Course, args) -> int:
    platform = PLATFORMS[args.platform]()
    if isinstance(platform, Gradescope):
        print(f"wrote {platform.export(course, args.output or Path('autograder.zip'))}")
        return 0
    if args.out is None:
        raise UsageError(f"export {args.platform} needs the "
                         + ("question folder" if isinstance(platform, PrairieLearn) else "student repository folder"))
    options = {"image": args.image} if isinstance(platform, PrairieLearn) else {}
    print(f"wrote {platform.export(course, args.out, **options)}")
    return 0


def _class_report(course: Course, args) -> int:
    from autograder.delivery import class_report

    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    records, not_graded = class_report.read(args.paths)
    if not records and not not_graded:
        raise UsageError("no results found (results.json files, grade's JSON or a batch's student files)")
    stats = class_report.write(args.output, records, not_graded=not_graded)
    print(f"{stats['students']} students ({stats['not_graded']} not graded): {args.output / 'class_report.md'}")
    return 0


COMMANDS = {"build": _build, "grade": _grade, "check": _check, "grade-batch": _batch, "class-report": _class_report,
            "release": _release, "lms": _lms, "export": _export, "repro": _repro, "set-due": _set_due}


def _similarity(course: Course, args) -> int:
    from autograder.delivery import similarity

    if not args.folder.is_dir():
        raise UsageError(f"no such folder: {args.folder}")
    found = similarity.report(course, args.folder, args.output, args.units,
                              similarity.DEFAULT_THRESHOLD if args.threshold is None else args.threshold)
    for upload, reason in found.skipped:
        print(f"not compared: {upload}: {reason}")
    print(f"{len(found.students)} students, {len(found.pairs)} pairs compared, {len(found.flagged)} above "
          f"{found.threshold:g}; see {found.csv} (every pair) and {found.html} (the {found.shown} most similar)")
    return 0


COMMANDS["similarity"] = _similarity


# -- reports ------------------------------------------------------------------------------------

def _render(course: Course, results, args) -> str | None:
    """The report text, or None for the table (which rich prints itself)."""
    if args.format == "json":
        data = [r.to_dict() for r in results]
        return json.dumps(data[0] if len(data) == 1 else data, indent=2, ensure_ascii=False) + "\n"
    if args.format == "junit":
        return to_junit(results)
    if args.format == "markdown":
        return to_markdown(results)
    if args.format == "classroom":
        return "".join(Classroom().results(r, course) for r in results)
    return None


def _emit(course: Course, results, args) -> None:
    text = _render(course, results, args)
    if text is None and args.output:
        with args.output.open("w", encoding="utf-8") as handle:
            print_results(results, verbose=args.verbose, console=Console(file=handle, width=160))
    elif text is None:
        print_results(results, verbose=args.verbose)
    elif args.output:
        # $GITHUB_OUTPUT collects every step's outputs: append to it, never overwrite.
        with args.output.open("a" if args.format == "classroom" else "w", encoding="utf-8") as handle:
            handle.write(text)
        if args.format == "classroom":  # the reporter shows no failure's reason: the step's log does
            print_results(results, verbose=True)
    else:
        sys.stdout.write(text)


# -- entry point --------------------------------------------------------------------------------

def _course_command(course: Course, name: str, argv: list[str]) -> int:
    """Run ``main(argv)`` of the course file the manifest names for ``name``."""
    import importlib.util

    path = course.root / course.commands[name]
    sys.path.insert(0, str(course.root))  # course files import their siblings as packages of the course root
    spec = importlib.util.spec_from_file_location(f"_course_command_{name}", path)
    assert spec is not None and spec.loader is not None  # a .py file's
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return int(module.main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    """The process's entry point (``attn-course``, ``python -m autograder.cli``)."""
    return exit_code(_main(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    try:
        course = load_course()
    except FileNotFoundError as error:  # no manifest, so no program name from it: the one run
        print(f"{Path(sys.argv[0]).name}: {error}", file=sys.stderr)
        return 2
    # The course's language, until a student-facing command's --lang says another (autograder/core/i18n.py).
    i18n.choose(course.language if course.language in i18n.available(course.locale) else None, course.locale)
    cli_arguments.speak(argv, course)
    # Pass-through commands parse their own arguments.
    if argv and argv[0] == "nbgrader":
        from autograder.nbgrader.pipeline import main as nbgrader_main

        return nbgrader_main(argv[1:])
    if argv and argv[0] in course.commands:
        return _course_command(course, argv[0], argv[1:])
    args = cli_arguments.parser(course.brand.command, {n: course.root / f for n, f in course.commands.items()},
                                course.limits, tuple(PLATFORMS)).parse_args(argv)
    try:
        if args.command in cli_arguments.STUDENT_FACING and args.lang:
            i18n.choose(args.lang, course.locale)
        return COMMANDS[args.command](course, args)
    except (AutograderError, FileExistsError) as error:
        code = error.exit_code if isinstance(error, AutograderError) else EXISTS
        prefix = next((p for kind, p in PREFIXES.items() if isinstance(error, kind)), "")
        if code != FailUnder.exit_code:  # below --fail-under is a result, reported already
            print(f"{course.brand.command}: {_(prefix) if prefix else ''}{error}", file=sys.stderr)
        return code
    except Exception:  # noqa: BLE001 - the engine's own bug, never the user's mistake
        traceback.print_exc()
        print(f"{course.brand.command}: " + _("grader failure: an internal error (the lines above say where; "
                                              "please report them)"), file=sys.stderr)
        return GraderError.exit_code


if __name__ == "__main__":
    sys.exit(main())
