"""The command line: build stubs, grade submissions, check your own work.

Its arguments (:func:`parser`) and their language: every text ``--help`` shows, argparse's own
words included, in the language chosen before the parser is built (:func:`speak`). The commands
themselves are :mod:`autograder.cli`'s.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from autograder.core import i18n
from autograder.core.i18n import N_
from autograder.core.manifest import Course
from autograder.core.settings import DEFAULTS, Limits
from autograder.delivery.lms import LMS_LAYOUTS

FORMATS = ("table", "json", "junit", "markdown", "classroom")
# The commands a student runs, whose --lang picks the language of what they print (autograder/core/i18n.py).
STUDENT_FACING = ("grade", "check", "repro")
LANG_HELP = N_("the language of the messages (default: course.toml's [course] language)")


def parser(prog: str, course_commands: dict[str, Path] | None = None, limits: Limits = DEFAULTS,
           platforms: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """The arguments; ``limits``: the course's (course.toml ``[limits]``), whose values are the defaults shown."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="regenerate assignments/ and the nbgrader notebooks from solutions/")
    build.add_argument("--check", action="store_true", help="only report stale files (exit 1 if any)")
    build.add_argument("--lang", help="the notebooks' language (default: course.toml's [course] language)")

    batch = sub.add_parser("grade-batch", help="grade a class: one sub-folder or zip per student")
    batch.add_argument("submissions", type=Path)
    batch.add_argument("-o", "--output", type=Path, required=True, help="folder for the gradebook and feedback")
    batch.add_argument("-j", "--jobs", type=int, default=1, help="parallel grader processes")
    batch.add_argument("--unit", action="append", dest="units", metavar="UNIT")
    batch.add_argument("--no-progress", dest="progress", action="store_false")
    batch.add_argument("--csv", choices=("default", *LMS_LAYOUTS), default="default",
                       help="gradebook.csv layout: canvas or moodle fill in the LMS's own gradebook export (--roster)")
    batch.add_argument("--roster", type=Path, metavar="FILE",
                       help="canvas: Canvas's gradebook export (Grades > Export); moodle: Moodle's grade export as a "
                            "plain text file, or a CSV with the column [lms] moodle_identifier names")
    batch.add_argument("--map", type=Path, metavar="FILE", dest="mapping",
                       help="CSV with 'upload' and 'student' columns: whose each upload is (names that clash are "
                            "refused until mapped)")
    batch.add_argument("--scheduler", metavar="ADDRESS",
                       help="grade on a Dask distributed cluster: its scheduler's address (tcp://host:8786), "
                            "one task per student; every node needs the same install and course")
    batch.add_argument("--student-budget", type=float, default=limits.student_budget, metavar="SECONDS",
                       help="wall-clock seconds per student before a grader process is killed "
                            f"(default {limits.student_budget:g})")

    due = sub.add_parser("set-due", help="set a unit's due date in course.toml ([units.UNIT] due; comments kept)")
    due.add_argument("unit")
    due.add_argument("date", help="ISO 8601 with its UTC offset, e.g. 2027-03-01T23:59:00+01:00 (refused without one)")

    lms = sub.add_parser("lms", help="an LMS gradebook (its own export, filled in) from the nbgrader pipeline's export")
    lms.add_argument("layout", choices=LMS_LAYOUTS)
    lms.add_argument("grades", type=Path, help="the CSV that `nbgrader export` wrote")
    lms.add_argument("--roster", type=Path, required=True, metavar="FILE",
                     help="the LMS's gradebook export (as for grade-batch --csv)")
    lms.add_argument("-o", "--output", type=Path, required=True,
                     help="the gradebook to import; the uploads it has no row for go to unmatched.csv beside it")
    lms.add_argument("--unit", action="append", dest="units", metavar="UNIT")

    report = sub.add_parser("class-report", help="what a class failed most, from its results (any platform's)")
    report.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="results: Gradescope's or PrairieLearn's results.json files, grade's JSON, a batch's "
                             "output folder (folders are searched for *.json)")
    report.add_argument("-o", "--output", type=Path, required=True,
                        help="folder for class_report.md, class_report.png and class_report.json")

    release = sub.add_parser("release", help="write the student bundle (no solutions, no hidden tests)")
    release.add_argument("out", type=Path)
    release.add_argument("--lang", action="append", dest="langs", metavar="LANG",
                         help="the notebooks' language (repeatable; default: every language the lessons are written in)")

    export = sub.add_parser("export", help="write a platform's grader")
    export.add_argument("platform", choices=platforms)
    export.add_argument("out", nargs="?", type=Path,
                        help="classroom: the student repository folder; prairielearn: the question folder")
    export.add_argument("--image", default=None, help="prairielearn: the grading image's Docker Hub name")
    export.add_argument("-o", "--output", type=Path, help="gradescope: the zip to write (default autograder.zip)")

    for name, text in (("grade", N_("grade submissions with the public and hidden suites")),
                       ("check", N_("run the public tests on your own work"))):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--unit", action="append", dest="units", metavar="UNIT", help="only this unit (repeatable)")
        cmd.add_argument("--format", choices=FORMATS, default="table",
                         help="classroom: GitHub Classroom reporter outputs, appended to -o (e.g. $GITHUB_OUTPUT)")
        cmd.add_argument("-o", "--output", type=Path, help="write the report here instead of stdout")
        cmd.add_argument("-v", "--verbose", action="store_true", help="one row per property, always")
        cmd.add_argument("--fail-under", type=float, metavar="PERCENT",
                         help="exit 1 when a submission scores below PERCENT of the points")
        cmd.add_argument("--lang", help=LANG_HELP)
    sub.choices["grade"].add_argument("paths", nargs="+", type=Path, metavar="PATH", help="submission folder(s)")
    sub.choices["grade"].add_argument(
        "--no-sandbox", dest="sandbox", action="store_false",
        help="run student code in the grader's own process (faster to start, but forgeable; not for real grades)")
    sub.choices["grade"].add_argument("--timeout", type=float, default=limits.call_timeout, metavar="SECONDS",
                                      help=f"time limit of one call into the submission (default {limits.call_timeout:g})")
    sub.choices["grade"].add_argument("--seed", type=int, help="course authors: other hypothesis examples (not for grades)")
    sub.choices["grade"].add_argument(
        "-j", "--jobs", type=int, metavar="N",
        help="grading processes, each for a share of the units (default: one per usable core, at most one per unit)")
    sub.choices["check"].add_argument("unit_args", nargs="*", metavar="UNIT", help="units to check (default: all)")
    sub.choices["check"].add_argument("--path", type=Path,
                                      help="your folder (default: assignments/), or a lesson notebook (or a folder "
                                           "of them), checked as the unit file its answer cells make up")
    sub.choices["check"].add_argument("--save", action="store_true",
                                      help="with a notebook: write the unit file its answer cells make up into "
                                           "assignments/, the file you hand in")

    repro = sub.add_parser("repro", help="rebuild a failed check from its message: your code's answer beside the expected one")
    repro.add_argument("unit")
    repro.add_argument("property", help="the failed property's name (as the message gives it)")
    repro.add_argument("--example", required=True, metavar="JSON", help="the case, as the failure message gives it")
    repro.add_argument("--path", type=Path, help="your folder (default: assignments/)")
    repro.add_argument("--snippet", action="store_true", help="print a Python script that rebuilds the case instead")
    repro.add_argument("--lang", help=LANG_HELP)
    similar = sub.add_parser("similarity", help="code similarity of every pair of students, unit by unit "
                                                "(the released stubs excluded): CSV and HTML")
    similar.add_argument("folder", type=Path, help="a grade-batch submissions folder, or an nbgrader course folder")
    similar.add_argument("-o", "--output", type=Path, required=True, help="folder for similarity.csv and .html")
    similar.add_argument("--unit", action="append", dest="units", metavar="UNIT", help="only this unit (repeatable)")
    similar.add_argument("--threshold", type=float, metavar="SHARE",
                         help="flag a pair when either file shares more than this of its code (0-1, default 0.5)")
    for name, path in (course_commands or {}).items():  # listed for --help; _main runs them before parsing
        sub.add_parser(name, add_help=False, help=f"{_first_line(path)} (`{prog} {name} --help` for its options)")
    return in_language(parser)


# argparse's own words (usage, options, its errors), for the catalogue: argparse looks each up with
# the standard library's gettext, through its module's `_` and `ngettext`, which _speak answers.
ARGPARSE_WORDS = (
    N_("usage: "), N_("positional arguments"), N_("options"), N_("show this help message and exit"),
    N_("%(prog)s: error: %(message)s\n"), N_("argument %(argument_name)s: %(message)s"),
    N_("the following arguments are required: %s"), N_("unrecognized arguments: %s"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"), N_("invalid %(type)s value: %(value)r"),
    N_("ambiguous option: %(option)s could match %(matches)s"), N_("expected one argument"),
    N_("expected at most one argument"), N_("expected at least one argument"), N_("expected %s argument"),
    N_("expected %s arguments"), N_("one of the arguments %s is required"), N_("not allowed with argument %s"),
    N_("ignored explicit argument %r"), N_("can't open '%(filename)s': %(error)s"),
    N_("unknown parser %(parser_name)r (choices: %(choices)s)"),
)


def speak(argv: list[str], course: Course) -> None:
    """Before any parser is built: a student-facing command's (or a course command's) ``--lang``,
    so that its ``--help`` is in that language too, and argparse's own words in the one chosen."""
    if argv and (argv[0] in STUDENT_FACING or argv[0] in course.commands):
        given = [a.split("=", 1)[1] for a in argv if a.startswith("--lang=")]
        given += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--lang"]
        if given and given[-1] in i18n.available(course.locale):
            i18n.choose(given[-1], course.locale)  # (one it has no messages in is refused once parsed)
    argparse._ = i18n.gettext  # type: ignore[attr-defined]
    argparse.ngettext = lambda singular, plural, n: i18n.gettext(singular if n == 1 else plural)  # type: ignore


def in_language(parser):
    """``parser`` with every text ``--help`` shows in the language chosen (the English texts are the
    catalogue's msgids: :func:`autograder.authoring.catalogue.extract_command_line`)."""
    parsers, seen = [parser], set()
    while parsers:
        current = parsers.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.description:
            current.description = i18n.translate_text(current.description)
        for action in current._actions:
            if action.help and action.help is not argparse.SUPPRESS:
                action.help = i18n.translate_text(action.help)
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    choice.help = i18n.translate_text(choice.help) if choice.help else choice.help
                parsers += list(action.choices.values())
    return parser


def _first_line(path: Path) -> str:
    """The first line of a course command file's docstring (read, not run)."""
    import ast

    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, ValueError):
        doc = ""
    # In the language chosen (the course's catalogue holds the line: babel.cfg's command_line method).
    return i18n.translate_text(doc.strip().splitlines()[0]).rstrip(".。") if doc.strip() else f"the course's {path.name}"
