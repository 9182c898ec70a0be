"""Regenerate every plot of the lessons into one folder.

    python course/make_plots.py OUT_DIR [--size small|full] [--only NAME ...]
                                [--source solutions|FOLDER] [--readme DIR]

Writes OUT_DIR/<demo>.png and OUT_DIR/results.json (the numbers each demo
plotted). ``--readme DIR`` also copies the two README figures there
(see ``README_PLOTS``). Fixed seeds: the same machine gives the same plots,
except the measured times.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course.demos import DEMOS, SIZES, UnitNotImplemented, load_units  # noqa: E402

# The two figures the README shows: the course's argument in two pictures.
README_PLOTS = ("path_length", "capstone")


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
    args = parser.parse_args(argv)
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
    if args.readme:
        args.readme.mkdir(parents=True, exist_ok=True)
        for name in README_PLOTS:
            if name in results:
                shutil.copyfile(args.out_dir / f"{name}.png", args.readme / f"{name}.png")
                print(f"README figure: {args.readme / f'{name}.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
