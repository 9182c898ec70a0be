"""Regenerate every plot of the lessons into one folder.

    python course/make_plots.py OUT_DIR [--size small|full] [--only NAME ...]
                                [--source solutions|FOLDER] [--readme DIR] [--record]

Writes OUT_DIR/<demo>.png and OUT_DIR/results.json (the numbers each demo
plotted). ``--readme DIR`` also copies the two README figures there
(see ``README_PLOTS``). Fixed seeds: the same machine gives the same plots,
except the measured times.

``--record`` (full size, the reference) also writes the numbers the lessons
quote, ``course/lessons/measured.json``: each demo's ``quotes(result)``, and for
the times (``timings(result)``) the range over ``--runs`` runs (the demos that
time something run again; the plots are the first run's). With ``--only`` it
records those demos again and keeps the record's others. The lessons
read their numbers from it (``{{ demo.key }}`` in their text);
``tests/project/test_lesson_numbers.py`` reruns the demos to check it.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course.demos import DEMOS, SIZES, UnitNotImplemented, load_units  # noqa: E402

# The two figures the README shows: the course's argument in two pictures.
README_PLOTS = ("path_length", "capstone")
RECORD = Path(__file__).resolve().parent / "lessons" / "measured.json"  # the numbers the lessons quote
RUNS = 5  # runs of each timed demo behind a quoted range


def quoted_range(values: list[float], fmt: str) -> str:
    """How the lessons quote a time measured over several runs: "5.1–6.8", or one number when
    every run rounds to it."""
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}–{high}"


def record(results: dict[str, dict], reruns: list[dict[str, dict]], runs: int, kept: dict | None = None) -> dict:
    """The record the lessons quote from: every demo's ``quotes`` of ``results`` (the first run),
    and the range of each of its ``timings`` over that run and ``reruns``; the demos of the
    record ``kept`` that were not run are kept as they are."""
    import torch

    from course.demos import DEMOS

    quotes, timed = {}, {}
    for name, result in results.items():
        module = DEMOS[name]
        quotes[name] = dict(module.quotes(result)) if hasattr(module, "quotes") else {}
        if hasattr(module, "timings"):
            series = [module.timings(r) for r in [result, *(rerun[name] for rerun in reruns)]]
            timed[name] = {key: {"format": fmt, "values": [s[key][0] for s in series]}
                           for key, (_, fmt) in series[0].items()}
            quotes[name].update({key: quoted_range(t["values"], t["format"]) for key, t in timed[name].items()})
    if kept:
        quotes = {name: quotes.get(name, kept["quotes"].get(name)) for name in DEMOS}
        timed = {name: timed[name] if name in results else kept["timed"][name]
                 for name in DEMOS if name in timed or (name not in results and name in kept["timed"])}
    machine = f"{platform.machine()}, {platform.processor() or platform.system()}, torch {torch.__version__}"
    return {"about": "The numbers the lessons quote, as `{{ demo.key }}`: written by "
                     "`python course/make_plots.py OUT --record` from the reference at full size; times are "
                     "the range over the runs. Never edited by hand.",
            "size": "full", "source": "solutions", "runs": runs, "machine": machine,
            "quotes": quotes, "timed": timed}


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make_plots", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--size", choices=SIZES, default="full")
    parser.add_argument("--only", nargs="+", choices=list(DEMOS), metavar="NAME", help="only these demos")
    parser.add_argument("--source", default="solutions", help="solutions (default) or a folder of unit files")
    parser.add_argument("--readme", type=Path, help="also copy the README figures into this folder")
    parser.add_argument("--record", action="store_true",
                        help=f"also write the numbers the lessons quote ({RECORD.relative_to(RECORD.parents[2])})")
    parser.add_argument("--runs", type=int, default=RUNS, help="with --record: runs behind each quoted time")
    parser.add_argument("--lang", help="the language of the plots' text (default: English; autograder/core/i18n.py)")
    args = parser.parse_args(argv)
    if args.lang:
        from autograder.core import i18n
        from course.demos._common import demo_course

        try:
            i18n.choose(args.lang, demo_course().locale)
        except ValueError as error:
            parser.error(str(error))
    kept = None
    if args.record:
        if args.size != "full" or args.source != "solutions" or args.runs < 2:
            parser.error("--record takes the demos at full size from solutions, with --runs of 2 or more")
        if args.only:  # the other demos' numbers stay as recorded, from as many runs
            kept = json.loads(RECORD.read_text(encoding="utf-8"))
            if kept["runs"] != args.runs:
                parser.error(f"--record --only: the record's times are over {kept['runs']} runs; give --runs {kept['runs']}")
    units = load_units(args.source)
    names = args.only or list(DEMOS)
    results = {}
    for name in names:
        start = time.perf_counter()
        try:
            result = DEMOS[name].run(args.out_dir, size=args.size, units=units)
        except UnitNotImplemented as error:
            print(f"make_plots: {name}: {error}", file=sys.stderr)
            return 2
        result["seconds"] = round(time.perf_counter() - start, 2)
        result.pop("maps", None)
        results[name] = _jsonable(result)
        print(f"{name:15s} {result['seconds']:7.1f} s  {result['png']}", flush=True)
    (args.out_dir / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
    if args.record:
        timed = [name for name in names if hasattr(DEMOS[name], "timings")]
        reruns = []
        with tempfile.TemporaryDirectory() as scratch:
            for run in range(2, args.runs + 1):
                reruns.append({name: DEMOS[name].run(scratch, size=args.size, units=units) for name in timed})
                print(f"run {run} of {', '.join(timed)}", flush=True)
        RECORD.write_text(json.dumps(record(results, reruns, args.runs, kept), indent=1, ensure_ascii=False) + "\n",
                          encoding="utf-8")
        print(f"the lessons' numbers: {RECORD}")
    if args.readme:
        args.readme.mkdir(parents=True, exist_ok=True)
        for name in README_PLOTS:
            if name in results:
                shutil.copyfile(args.out_dir / f"{name}.png", args.readme / f"{name}.png")
                print(f"README figure: {args.readme / f'{name}.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
