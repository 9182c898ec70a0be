"""Sandboxed vs in-process grading time of solutions/ (issue 6: at most 1.3x).

    .venv/bin/python benchmarks/bench_sandbox.py [--unit UNIT ...] [--repeat N] [--jobs N]

Times ``attn-course grade solutions --jobs N`` as a user runs it (a fresh process,
public and hidden suites, JSON output), with the sandbox and with
``--no-sandbox``, alternating, ``--repeat`` times each (default 1), after
one untimed warm-up of each (file caches). The sandboxed time includes
starting the zygote and the worker. Prints both times and the ratio of the
medians; fails if the two modes give different scores.

``--jobs 1`` (the default) measures what the sandbox itself costs. With more
jobs the ratio also measures how each mode shares the cores: a grading process
in-process keeps one core busy, a sandboxed one about 1.1 (its worker and the
trusted side take turns), so on two cores the sandboxed grade gains less.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(units: list[str], sandbox: bool, jobs: int) -> tuple[float, dict]:
    command = [sys.executable, "-m", "autograder.cli", "grade", "solutions", "--jobs", str(jobs), "--format", "json"]
    command += [arg for unit in units for arg in ("--unit", unit)] + ([] if sandbox else ["--no-sandbox"])
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    result = json.loads(proc.stdout)
    return seconds, {u: (r["score"], r["max_score"]) for u, r in result["units"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", action="append", dest="units", default=[], help="only this unit (repeatable)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs of each mode (default 1)")
    parser.add_argument("--jobs", type=int, default=1, help="grade's --jobs in both modes (default 1)")
    args = parser.parse_args()
    timed(args.units, sandbox=False, jobs=args.jobs)
    timed(args.units, sandbox=True, jobs=args.jobs)
    inside, sandboxed = [], []
    for _ in range(args.repeat):
        t, scores_in = timed(args.units, sandbox=False, jobs=args.jobs)
        inside.append(t)
        t, scores_sb = timed(args.units, sandbox=True, jobs=args.jobs)
        sandboxed.append(t)
        if scores_in != scores_sb:
            raise SystemExit(f"scores differ: in-process {scores_in}, sandboxed {scores_sb}")
    a, b = statistics.median(inside), statistics.median(sandboxed)
    print(f"units: {', '.join(scores_sb)}  scores: {scores_sb}")
    print(f"in-process: {a:.2f} s   sandboxed: {b:.2f} s   (median of {args.repeat}, --jobs {args.jobs})")
    print(f"ratio sandboxed/in-process: {b / a:.2f}")


if __name__ == "__main__":
    main()
