"""grade-batch on a Dask distributed cluster: the speed-up at 1 and 2 workers, measured in one run.

Starts a LocalCluster of 1, then 2, worker processes (one thread each) on this machine, grades
the same class of N students (a mix of the reference and kept mutants, as bench_batch.py makes
it) with ``attn-course grade-batch --scheduler ADDRESS`` from an empty output folder each time,
and prints each run's seconds per student, the speed-up of 2 workers over 1, and what 1,000
students would cost at W workers from the per-student time at 1 worker (the cluster's start-up
is not in it; a real cluster's nodes each start their own grader once, as these workers do).
A LocalCluster's workers share this machine's cores: on a 2-core machine 2 workers can at most
double the throughput, less what the client and the scheduler take.

    .venv/bin/python benchmarks/bench_cluster.py [--students 6] [--unit attention]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import distributed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_batch import make_class  # noqa: E402


def run(subs: Path, out: Path, workers: int, units: list[str]) -> float:
    unit_args = [a for u in units for a in ("--unit", u)]
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "autograder.cli", "grade-batch", str(subs), "-o", str(out),
                        "--scheduler", cluster.scheduler_address, *unit_args, "--no-progress"],
                       cwd=ROOT, check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--unit", action="append", dest="units", default=None)
    args = parser.parse_args()
    units = args.units or ["attention"]
    from autograder.core.manifest import load_course

    unit_file = load_course(ROOT).units[units[0]].file
    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "subs"
        make_class(subs, args.students, unit_file)
        seconds = {}
        for workers in (1, 2):
            out = Path(tmp) / f"out{workers}"
            seconds[workers] = run(subs, out, workers, units)
            shutil.rmtree(out)
    per = {w: s / args.students for w, s in seconds.items()}
    print(f"{args.students} students, unit(s) {', '.join(units)}")
    for w in (1, 2):
        print(f"  {w} worker{'s' if w > 1 else ''}: {seconds[w]:.1f} s, {per[w]:.2f} s per student")
    print(f"  speed-up at 2 workers: {seconds[1] / seconds[2]:.2f}x")
    for w in (1, 10, 50):
        print(f"  1,000 students at {w} worker{'s' if w > 1 else ''} (each a core): "
              f"about {1000 * per[1] / w / 60:.0f} min")


if __name__ == "__main__":
    main()
