"""Time `attn-course grade` per unit on this machine, in one run.

Prints seconds per unit (best of N), then all units in one grading process and
with the default ``--jobs`` (one process per usable core), each as a multiple of a baseline
measured in the same run (a bare `python -c "import torch"`), so the figures
stay comparable on a shared, noisy machine. Usage:

    .venv/bin/python benchmarks/bench_grading.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autograder.core.manifest import load_course  # noqa: E402
from autograder.grading.parallel import usable_cpus  # noqa: E402


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def grading(*args: str) -> list[str]:
    return [sys.executable, "-m", "autograder.cli", "grade", "solutions", *args, "--format", "json"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs")
    args = parser.parse_args()
    course = load_course(ROOT)
    units = [u.name for u in course.units.values() if (course.solutions / u.file).is_file()]
    best = lambda command: min(timed(command) for _ in range(args.repeat))  # noqa: E731
    baseline = best([sys.executable, "-c", "import torch"])
    print(f"baseline (python -c 'import torch'): {baseline:.2f} s")
    print(f"{'unit':22} {'seconds':>8} {'x baseline':>11}")
    for unit in units:
        seconds = best(grading("--unit", unit))
        print(f"{unit:22} {seconds:8.2f} {seconds / baseline:11.1f}")
    one = best(grading("--jobs", "1"))
    print(f"{'all units, --jobs 1':22} {one:8.2f} {one / baseline:11.1f}")
    whole = best(grading())  # the default: one grading process per usable core
    print(f"{f'all units, --jobs {min(usable_cpus(), len(units))}':22} {whole:8.2f} {whole / baseline:11.1f}")


if __name__ == "__main__":
    main()
