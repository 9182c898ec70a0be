"""Print where a test run's time went, from the file tests/project/conftest.py writes when
$ATTN_TEST_DURATIONS names it (one JSON line a test): every test's seconds, then the xdist groups'
totals, the workers' busy and idle time, and last the slowest 40 tests with their groups.

Usage: python .ci/durations.py FILE [SLOWEST]
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def main(path: Path, slowest: int = 40) -> None:
    tests = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not tests:
        print(f"no test durations in {path}")
        return
    for t in tests:
        t["total"] = t["setup"] + t["call"] + t["teardown"]
    tests.sort(key=lambda t: -t["total"])
    width = max(len(t["group"]) for t in tests) or 1

    def row(t: dict) -> str:
        return (f"{t['total']:9.2f} {t['setup']:8.2f} {t['call']:8.2f} {t['teardown']:8.2f}  "
                f"{t['worker']:<5} {t['group'] or '-':<{width}}  {t['id']}")

    header = f"{'total s':>9} {'setup':>8} {'call':>8} {'teardown':>8}  {'worker':<5} {'group':<{width}}  test"
    print(f"\n=== every test's duration ({len(tests)} tests, slowest first) ===")
    print(header)
    for t in tests:
        print(row(t))

    groups: dict[str, list] = defaultdict(list)
    for t in tests:
        groups[t["group"] or "(no group)"].append(t)
    print(f"\n=== xdist groups ({len(groups) - ('(no group)' in groups)}), longest first ===")
    print(f"{'total s':>9} {'tests':>6}  {'workers':<9} group")
    for name, members in sorted(groups.items(), key=lambda kv: -sum(t["total"] for t in kv[1])):
        workers = ",".join(sorted({t["worker"] for t in members}))
        print(f"{sum(t['total'] for t in members):9.1f} {len(members):6}  {workers:<9} {name}")

    start = min(t["start"] for t in tests)
    stop = max(t["stop"] for t in tests)
    print(f"\n=== workers (from the first test's start to the last one's stop: {stop - start:.1f} s) ===")
    print(f"{'busy s':>9} {'idle s':>9} {'tests':>6}  worker")
    by_worker: dict[str, list] = defaultdict(list)
    for t in tests:
        by_worker[t["worker"]].append(t)
    for worker, members in sorted(by_worker.items()):
        busy = sum(t["total"] for t in members)
        print(f"{busy:9.1f} {stop - start - busy:9.1f} {len(members):6}  {worker}")

    print(f"\n=== the slowest {min(slowest, len(tests))} tests, with their groups ===")
    print(header)
    for t in tests[:slowest]:
        print(row(t))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.rsplit("\n\n", 1)[-1].strip())
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:]))
