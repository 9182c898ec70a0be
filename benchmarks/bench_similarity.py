"""How long `attn-course similarity` takes for a class: N generated submissions, every unit.

Each student hands in every unit file: a kept mutant (tests/mutants/, the reference with one bug)
or the correct alternative (tests/alternatives/), one in ten a blank stub, each with its local
variables renamed at random and its comments rewritten (test_similarity.renamed). The report is
timed as the command runs it (reading the uploads through the intake, then copydetect in its child
interpreter, then the CSV and HTML); the intake alone is timed again apart, so the comparison's
share shows. Prints seconds (wall and CPU: the machine may be shared), the pairs compared and
the cost per pair.

    .venv/bin/python benchmarks/bench_similarity.py [--students 200] [--unit U ...]
"""
from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "project"))
import mutants  # noqa: E402
from test_similarity import renamed  # noqa: E402

from autograder.core.manifest import load_course  # noqa: E402
from autograder.delivery import similarity  # noqa: E402


def generate(course, units, students: int, dest: Path, rng: random.Random) -> None:
    sources = {}
    for unit in units:
        reference = (ROOT / "solutions" / unit.file).read_text(encoding="utf-8")
        sources[unit.name] = ([mutants.mutated_source(reference, m) for m in mutants.load(unit.name)],
                              (mutants.ALTERNATIVES / unit.file).read_text(encoding="utf-8"),
                              (course.assignments / unit.file).read_text(encoding="utf-8"))
    for n in range(students):
        folder = dest / f"student{n:04d}"
        folder.mkdir(parents=True)
        for unit in units:
            kept, alternative, stub = sources[unit.name]
            roll = rng.random()
            text = stub if roll < 0.1 else alternative if roll < 0.4 else rng.choice(kept)
            (folder / unit.file).write_text(renamed(text, rng), encoding="utf-8")


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the comparison's interpreter)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--unit", action="append", dest="units", metavar="UNIT")
    parser.add_argument("--seed", type=int, default=59)
    args = parser.parse_args()
    course = load_course(ROOT)
    units = course.select(args.units)
    with tempfile.TemporaryDirectory(prefix="bench-similarity-") as tmp:
        subs, out = Path(tmp) / "submissions", Path(tmp) / "out"
        generate(course, units, args.students, subs, random.Random(args.seed))
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as scratch:
            similarity.read_class(course, subs, units, Path(scratch))
        intake = time.perf_counter() - started
        started, cpu = time.perf_counter(), _cpu()
        found = similarity.report(course, subs, out, args.units)
        total, cpu = time.perf_counter() - started, _cpu() - cpu
        html_mb = (out / "similarity.html").stat().st_size / 2**20
    pairs = len(found.pairs)
    print(f"{args.students} students x {len(units)} units: {pairs} pairs compared, {len(found.flagged)} above "
          f"{found.threshold:g}")
    print(f"report: {total:.1f} s wall, {cpu:.1f} s CPU ({1e3 * total / max(pairs, 1):.3f} ms wall and "
          f"{1e3 * cpu / max(pairs, 1):.3f} ms CPU a pair); the intake alone {intake:.1f} s; HTML {html_mb:.1f} MiB "
          f"({found.shown} pairs shown)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
