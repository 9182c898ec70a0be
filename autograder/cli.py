"""``attn-course``: build stubs, grade submissions, check your own work.

Exit codes: 0 when the command ran (whatever the score), 2 for bad
arguments or a missing submission, 3 when the grader itself failed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from . import stubgen
from .manifest import load_course
from .report import print_results

EXIT_USAGE, EXIT_GRADER = 2, 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attn-course", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="regenerate assignments/ from solutions/")
    build.add_argument("--check", action="store_true", help="only report stale files (exit 1 if any)")

    for name, text in (("grade", "grade submissions with the public and hidden suites"),
                       ("check", "run the public tests on your own work")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--unit", action="append", dest="units", metavar="UNIT", help="only this unit (repeatable)")
        cmd.add_argument("--format", choices=("table", "json"), default="table")
        cmd.add_argument("-o", "--output", type=Path, help="write the report here instead of stdout")
        cmd.add_argument("-v", "--verbose", action="store_true", help="one row per property, always")
    sub.choices["grade"].add_argument("paths", nargs="+", type=Path, metavar="PATH", help="submission folder(s)")
    sub.choices["grade"].add_argument(
        "--no-sandbox", dest="sandbox", action="store_false",
        help="run student code in the grader's own process (faster to start, but forgeable; not for real grades)")
    sub.choices["grade"].add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                                      help="time limit of one call into the submission (default 10)")
    sub.choices["grade"].add_argument("--seed", type=int, help="course authors: other hypothesis examples (not for grades)")
    sub.choices["check"].add_argument("unit_args", nargs="*", metavar="UNIT", help="units to check (default: all)")
    sub.choices["check"].add_argument("--path", type=Path, help="your folder (default: assignments/)")
    return parser


def _emit(results, args) -> None:
    if args.format == "json":
        data = [r.to_dict() for r in results]
        text = json.dumps(data[0] if len(data) == 1 else data, indent=2, ensure_ascii=False) + "\n"
        if args.output:
            args.output.write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
        return
    if args.output:
        with args.output.open("w", encoding="utf-8") as handle:
            print_results(results, verbose=args.verbose, console=Console(file=handle, width=160))
    else:
        print_results(results, verbose=args.verbose)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    course = load_course()
    if args.command == "build":
        if args.check:
            stale = stubgen.stale(course.solutions, course.assignments)
            print("stale: " + ", ".join(stale) if stale else "all stubs are current")
            return 1 if stale else 0
        for path in stubgen.build(course.solutions, course.assignments):
            print(f"wrote {path.relative_to(course.root)}")
        return 0

    if args.command == "grade":
        folders, options = args.paths, {"seed": args.seed, "sandbox": args.sandbox, "timeout": args.timeout}
    else:
        folders = [args.path or course.assignments]
        args.units = (args.units or []) + args.unit_args
        # Checking your own work: only the public tests, and your own siblings (no stand-ins).
        options = {"suites": ("public",), "isolate": False, "sandbox": False}
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        print(f"attn-course: no such submission folder: {', '.join(missing)}", file=sys.stderr)
        return EXIT_USAGE
    pool = None
    try:
        course.select(args.units)
        if options.get("sandbox"):
            from .zygote import prestart

            pool = prestart(course)  # its torch import overlaps with ours below
    except ValueError as error:
        print(f"attn-course: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        print(f"attn-course: grader failure: the sandbox could not start: {error}", file=sys.stderr)
        return EXIT_GRADER
    from .grading import GraderError, grade

    try:
        results = grade(course, folders, units=args.units, **options)
    except ValueError as error:
        print(f"attn-course: {error}", file=sys.stderr)
        return EXIT_USAGE
    except GraderError as error:
        print(f"attn-course: grader failure: {error}", file=sys.stderr)
        return EXIT_GRADER
    finally:
        if pool is not None:
            pool.release()
    _emit(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
