"""Batch grading speed-up on this machine, measured in one run.

Generates N submissions (a mix of correct units and kept mutants), grades
them with `attn-course grade-batch -j1` and `-j2`, and prints seconds per
submission, the speed-up ratio, and the peak memory of a grader process.
With ``--rounds 2`` the grades run in the order -j1, -j2, -j2, -j1 and each
figure is the mean of its two runs, so a machine that drifts steadily
during the run (this one does, by 10% within minutes) favours neither.

It also prints the speed-up's two factors, from the machine's busy CPU time
during each grade (``/proc/stat``: run it on an otherwise idle machine; the
grades' own rusage misses the sandbox, whose processes the batch kills rather
than waits for): how much more CPU time -j2 took for the same work (on this
virtual machine that varies from run to run when both CPUs are busy, while
-j1's stays put), and how many CPUs each kept busy on average (-j1 a little
over one: its side work, the batch's and the zygote's, runs on the CPU that
its grader and worker leave free).

    .venv/bin/python benchmarks/bench_batch.py [--students 50] [--unit attention] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "project"))
import mutants  # noqa: E402


def make_class(folder: Path, students: int, unit_file: str) -> None:
    cases = mutants.load(Path(unit_file).stem)
    for i in range(students):
        if i % 3 == 0:
            shutil.copytree(ROOT / "solutions", folder / f"student{i:03d}")
        else:
            mutants.write(unit_file, cases[i % len(cases)], folder / f"student{i:03d}")


def _busy_cpu() -> float:
    """Seconds the machine's CPUs have been busy (user, nice, system, irq, softirq) since boot."""
    with open("/proc/stat", encoding="ascii") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def run(subs: Path, out: Path, jobs: int, units: list[str]) -> tuple[float, float, dict]:
    """The grade's wall-clock seconds, the machine's busy CPU seconds meanwhile, and its summary."""
    unit_args = [a for u in units for a in ("--unit", u)]
    cpu, start = _busy_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "autograder.cli", "grade-batch", str(subs), "-o", str(out), "-j", str(jobs),
                    *unit_args, "--no-progress"], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start, _busy_cpu() - cpu, json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=50)
    parser.add_argument("--unit", action="append", default=None, help="units to grade (default: attention)")
    parser.add_argument("--rounds", type=int, choices=(1, 2), default=1,
                        help="2: run -j1, -j2, -j2, -j1 and take each one's mean (default: 1)")
    args = parser.parse_args()
    units = args.unit or ["attention"]
    order = [1, 2] if args.rounds == 1 else [1, 2, 2, 1]
    runs: list[tuple[int, float, float, dict]] = []  # (jobs, seconds, CPU seconds, summary) in the order run
    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "subs"
        make_class(subs, args.students, f"{units[0]}.py")
        for i, jobs in enumerate(order):
            runs.append((jobs, *run(subs, Path(tmp) / f"out{i}", jobs, units)))
    one, two = (statistics.mean(t for j, t, _, _ in runs if j == jobs) for jobs in (1, 2))
    cpu1, cpu2 = (statistics.mean(c for j, _, c, _ in runs if j == jobs) for jobs in (1, 2))
    summary1, summary2 = (next(s for j, _, _, s in runs if j == jobs) for jobs in (1, 2))
    if args.rounds == 2:
        print("runs: " + ", ".join(f"-j{j} {t:.1f} s ({c:.1f} CPU-s)" for j, t, c, _ in runs))
    n = args.students
    print(f"students: {n}, units: {', '.join(units)}")
    print(f"-j1: {one:7.1f} s  ({one / n:.2f} s per submission), {cpu1:.1f} CPU-s ({cpu1 / one:.2f} CPUs busy), "
          f"peak grader memory {summary1['peak_worker_mib']:.0f} MiB")
    print(f"-j2: {two:7.1f} s  ({two / n:.2f} s per submission), {cpu2:.1f} CPU-s ({cpu2 / two:.2f} CPUs busy), "
          f"peak grader memory {summary2['peak_worker_mib']:.0f} MiB")
    # one / two == (cpu1 / cpu2) * ((cpu2 / two) / (cpu1 / one)): the work's cost, times the CPUs kept busy
    print(f"speed-up -j2 / -j1: {one / two:.2f}x = CPU time -j1 / -j2 {cpu1 / cpu2:.2f} "
          f"x busy CPUs -j2 / -j1 {(cpu2 / two) / (cpu1 / one):.2f}")


if __name__ == "__main__":
    main()
