"""What an endless loop costs one unit, sandboxed, with the default time limits (issue 43: at most 60 s).

    .venv/bin/python benchmarks/bench_endless_loop.py [--repeat N]

Times ``attn-course grade FOLDER --unit attention --format json`` as a user runs it (a fresh
process, public and hidden suites, the default ``--timeout`` and budgets, the course's rules on)
for three submissions of unit 2:

* the reference (``solutions/``), the honest baseline;
* ``loop``: every function is ``while True: pass``, which the worker interrupts at the call limit;
* ``swallow``: the same loop inside ``try: ... except: pass``, which swallows that interruption,
  so the sandbox kills the worker after its grace period: the dearest endless loop.

Prints each median, and each loop's ratio to the reference's time measured in the same run (the
machine is noisy). The times include the process's start (importing torch, starting the sandbox),
so they bound what the unit costs. Fails if a loop takes more than 60 s or earns a point, or if
the reference loses one.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60.0  # seconds an endless loop may cost one unit
FUNCTIONS = ("softmax", "causal_mask", "scaled_dot_product_attention")  # unit 2's API
BODIES = {
    "loop": "    while True:\n        pass\n",
    "swallow": "    while True:\n        try:\n            while True:\n                pass\n        except:\n            pass\n",
}


def write_loop(folder: Path, body: str) -> Path:
    folder.mkdir()
    (folder / "attention.py").write_text("".join(f"def {name}(*args, **kwargs):\n{body}\n\n" for name in FUNCTIONS))
    return folder


def timed(folder: Path) -> tuple[float, tuple[float, float]]:
    command = [sys.executable, "-m", "autograder.cli", "grade", str(folder), "--unit", "attention", "--format", "json"]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"grading {folder} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    unit = json.loads(proc.stdout)["units"]["attention"]
    return seconds, (unit["score"], unit["max_score"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="timed runs of each submission (default 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folders = {"reference": ROOT / "solutions",
                   **{name: write_loop(Path(tmp) / name, body) for name, body in BODIES.items()}}
        timed(folders["reference"])  # untimed warm-up (file caches)
        times: dict[str, list[float]] = {name: [] for name in folders}
        scores = {}
        for _ in range(args.repeat):
            for name, folder in folders.items():
                seconds, scores[name] = timed(folder)
                times[name].append(seconds)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"reference: {median['reference']:.2f} s  score {scores['reference'][0]:g}/{scores['reference'][1]:g}"
          f"  (median of {args.repeat})")
    for name in BODIES:
        print(f"{name}: {median[name]:.2f} s per unit, {median[name] / median['reference']:.1f}x the reference;"
              f"  score {scores[name][0]:g}")
    problems = [f"{name} took {median[name]:.1f} s (at most {LIMIT:g})" for name in BODIES if median[name] > LIMIT]
    problems += [f"{name} scored {scores[name][0]:g}" for name in BODIES if scores[name][0]]
    if scores["reference"][0] != scores["reference"][1]:
        problems.append(f"the reference scored {scores['reference'][0]:g}/{scores['reference'][1]:g}")
    if problems:
        raise SystemExit("; ".join(problems))


if __name__ == "__main__":
    main()
