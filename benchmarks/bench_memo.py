"""Time a class of submissions graded with and without remembered reference answers, in one run.

The reference, the stubs and the first N cases (its correct alternative, then mutants) of a unit's catalogue
(tests/mutants/<unit>.toml) are graded in one process, in-process (the oracles
run on the trusted side either way), twice: as shipped, and with
``autograder.testing.memo.MAX_BYTES = 0`` (every answer computed again, as
before the memo). Both orders alternate over ``--repeat`` rounds; the best of
each is printed with their ratio, and the two runs' grades are compared.
Usage:

    .venv/bin/python benchmarks/bench_memo.py [--unit efficient_attention] [--count 12] [--repeat 1]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "project"))
import mutants  # noqa: E402

GRADE = ("import sys; import autograder.testing.memo as memo; memo.MAX_BYTES = int(sys.argv[1]); "
         "from autograder.cli import main; sys.exit(main(sys.argv[2:]))")


def run(keep: int, folders: list[Path], unit: str, out: Path) -> tuple[float, list]:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", GRADE, str(keep), "grade", *map(str, folders), "--unit", unit,
                    "--no-sandbox", "--jobs", "1", "--format", "json", "-o", str(out)], cwd=ROOT, check=True,
                   capture_output=True)
    seconds = time.perf_counter() - start
    results = json.loads(out.read_text())
    return seconds, [{u: (r["status"], [(t["id"], t["status"], t["score"]) for t in r["tests"]])
                      for u, r in result["units"].items()} for result in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", default="efficient_attention")
    parser.add_argument("--count", type=int, default=12, help="mutants graded with the reference and the stubs")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = mutants.cases(args.unit, Path(tmp))
        folders = [ROOT / "solutions", ROOT / "assignments", *list(cases.values())[:args.count]]
        times: dict[str, list[float]] = {"remembered": [], "recomputed": []}
        grades = {}
        for round_ in range(args.repeat):
            order = [("remembered", 1 << 40), ("recomputed", 0)]
            for label, keep in order if round_ % 2 == 0 else order[::-1]:
                seconds, grades[label] = run(keep, folders, args.unit, Path(tmp) / f"{label}.json")
                times[label].append(seconds)
    fast, slow = min(times["remembered"]), min(times["recomputed"])
    print(f"{args.unit}: {len(folders)} submissions in one grading process, in-process")
    print(f"answers recomputed: {slow:7.2f} s")
    print(f"answers remembered: {fast:7.2f} s")
    print(f"speed-up: {slow / fast:.2f}x; the same grades: {grades['remembered'] == grades['recomputed']}")


if __name__ == "__main__":
    main()
