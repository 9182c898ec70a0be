"""Honest code keeps its grade under other hypothesis seeds (issue 57), sandboxed.

    .venv/bin/python benchmarks/bench_idioms_seeds.py [--seeds 0-9] [--timeout 5] [--only NAME ...]

Grades every entry of tests/alternatives/idioms.toml (materialized by tests/project/idioms.py: the
reference with the entry's unit file patched), solutions/ and tests/alternatives/ with
``attn-course grade ... --unit U --seed N --timeout T --format json`` (a fresh process, sandboxed, as
a user runs it): per seed, one run per unit, holding the reference, tests/alternatives/ and that
unit's entries. Prints, per seed, how many of the cases keep full marks, and every case that loses
points (with its failed tests). The entry refused by decision (numpy) must score 0 under every seed
instead. Exits 1 if any case loses points (or the refused entry earns one). Run by hand, not in the
suite: ten seeds of six units take a while.
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
import idioms  # noqa: E402


def seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def grade(paths: list[Path], unit: str, seed: int, timeout: float) -> list[dict]:
    command = [sys.executable, "-m", "autograder.cli", "grade", *map(str, paths), "--unit", unit,
               "--seed", str(seed), "--timeout", str(timeout), "--format", "json"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if not proc.stdout.strip():
        raise SystemExit(f"attn-course grade --unit {unit} --seed {seed} printed nothing:\n{proc.stderr[-3000:]}")
    results = json.loads(proc.stdout)
    return results if isinstance(results, list) else [results]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=seeds, default=list(range(10)), help="e.g. 0-9 or 0,3,7 (default 0-9)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per call into the submission (default 5)")
    parser.add_argument("--only", nargs="*", default=None, help="only these entries (by name)")
    args = parser.parse_args()

    from autograder.core.manifest import load_course

    course = load_course(ROOT)
    entries = [e for e in idioms.load() if args.only is None or e["name"] in args.only]
    units = [u for u in course.units if any(e["unit"] == u for e in entries)]
    bad = 0
    with tempfile.TemporaryDirectory(prefix="idioms-") as tmp:
        folders = idioms.materialize(Path(tmp), entries)
        for seed in args.seeds:
            start = time.monotonic()
            kept, total, losses = 0, 0, []
            for unit in units:
                mine = [e for e in entries if e["unit"] == unit]
                cases = [("solutions", course.solutions, "full_marks"),
                         ("tests/alternatives", ROOT / "tests" / "alternatives", "full_marks")]
                cases += [(e["name"], folders[e["name"]], e["expect"]) for e in mine]
                for (name, _, expect), result in zip(cases, grade([c[1] for c in cases], unit, seed, args.timeout)):
                    got = result["units"][unit]
                    total += 1
                    if expect == "refused":
                        ok = got["score"] == 0 and "numpy" in got["message"]
                    else:
                        ok = got["score"] == got["max_score"] > 0
                    kept += ok
                    if not ok:
                        failed = [(t["id"], t["output"][:300]) for t in got["tests"] if t["score"] < t["max_score"]]
                        losses.append(f"  {name} [{unit}] {got['score']}/{got['max_score']} {got['status']} "
                                      f"{got['message'][:200]} {failed[:3]}")
            bad += len(losses)
            print(f"seed {seed}: {kept}/{total} as expected (full marks; the numpy entry refused) "
                  f"in {time.monotonic() - start:.0f} s", flush=True)
            for line in losses:
                print(line, flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
