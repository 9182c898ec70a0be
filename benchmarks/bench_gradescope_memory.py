"""Peak memory of Gradescope's run_autograder, the whole process tree, in PSS (issues 18 and 46: at
most 450 MiB for every unit, in the mode Gradescope runs it in).

    .venv/bin/python benchmarks/bench_gradescope_memory.py [--units a,b,...] [--modes container,full]
                                                          [--interval SECONDS]

Exports the autograder zip into a fake /autograder, hands in the reference files
of the units named (default: every unit of the course) and runs ``run_autograder``
as Gradescope does (sandboxed, this interpreter as ``AUTOGRADER_PYTHON``), once per
mode: "container" is Gradescope's (its Docker's seccomp profile refuses namespaces,
reproduced here by tests/project/modes.py's filter), where the zygote is forked from the
grader and torch is in memory once (autograder/sandbox/forked.py); "full" is a machine where
bwrap works, whose zygote is a fresh interpreter: two torch imports. The limit is checked
on container mode. Every
``--interval`` seconds (default 0.05) it sums the PSS of run_autograder and all
its descendants, read from /proc/<pid>/smaps_rollup (PSS shares each page among
the processes mapping it, so the sum is what the tree costs the machine). Prints the peak, each
process's share at the peak, and the score as a check that grading ran. Reading
other users' smaps_rollup (the sandbox's workers) needs root.

The peak is also split into anonymous memory and file pages (torch's libraries).
File pages are shared with every process on the machine that maps the same
files, so other torch processes running meanwhile (a test suite) lower the file
part and the total; the anonymous part does not depend on them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autograder.core.manifest import load_course  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "project"))
from modes import in_container  # noqa: E402

LIMIT_MIB = 450  # Gradescope's mode's (container)
MODES = {
    "container": "container mode (Gradescope's Docker: its seccomp profile refuses namespaces)",
    "full": "full mode (a machine where bwrap makes namespaces)",
}


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from each task's children list."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:  # gone meanwhile
                pass
    return found


def pss_kib(pid: int) -> tuple[int, int]:
    """``pid``'s PSS and its anonymous part, in KiB (0, 0 once it has exited)."""
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Pss:", "Pss_Anon:")):
                fields[line.split(":")[0]] = int(line.split()[1])
    except (OSError, ValueError):  # exited, or not readable
        pass
    return fields.get("Pss", 0), fields.get("Pss_Anon", 0)


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:100]
    except OSError:
        return "?"


def measure(mode: str, units: list[str], course, interval: float) -> tuple[int, int, list, float, float]:
    """One run_autograder in ``mode``: peak PSS and its anonymous part (KiB), each process's share
    at the peak, the seconds it took and the score."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "autograder"
        subprocess.run([sys.executable, "-m", "autograder.cli", "export", "gradescope", "-o", f"{tmp}/ag.zip"],
                       cwd=ROOT, check=True, capture_output=True)
        with zipfile.ZipFile(f"{tmp}/ag.zip") as zf:
            zf.extractall(root / "source")
        (root / "submission").mkdir()
        for unit in units:
            shutil.copyfile(course.solutions / course.units[unit].file, root / "submission" / course.units[unit].file)
        env = {**os.environ, "AUTOGRADER_GRADESCOPE_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
        start = time.monotonic()
        script = ["bash", str(root / "source" / "run_autograder")]
        proc = subprocess.Popen(in_container(script) if mode == "container" else script, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak, anon, at_peak = 0, 0, []
        while proc.poll() is None:
            sample = [(*pss_kib(p), command(p)) for p in tree(proc.pid)]
            if sum(kib for kib, _, _ in sample) > peak:
                peak, anon, at_peak = sum(kib for kib, _, _ in sample), sum(a for _, a, _ in sample), sample
            time.sleep(interval)
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            raise SystemExit(f"run_autograder exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
        data = json.loads((root / "results" / "results.json").read_text())
    return peak, anon, at_peak, seconds, data["score"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    parser.add_argument("--units", help="comma-separated units to hand in (default: all)")
    parser.add_argument("--modes", default="container,full", help="comma-separated: container, full (default: both)")
    args = parser.parse_args()
    course = load_course(ROOT)
    units = args.units.split(",") if args.units else list(course.units)
    unknown = set(units) - set(course.units)
    if unknown:
        parser.error(f"no such unit: {', '.join(sorted(unknown))}")
    over = False
    for mode in args.modes.split(","):
        peak, anon, at_peak, seconds, score = measure(mode, units, course, args.interval)
        mib = peak / 1024
        limit = f"limit {LIMIT_MIB} MiB" if mode == "container" else "no limit: not Gradescope's mode"
        print(f"{MODES[mode]}: run_autograder, {len(units)} units: peak PSS {mib:.0f} MiB over {len(at_peak)} "
              f"processes (anonymous {anon / 1024:.0f} MiB, files {(peak - anon) / 1024:.0f} MiB; {limit}); "
              f"{seconds:.1f} s; score {score:g}")
        for kib, kib_anon, name in sorted(at_peak, reverse=True):
            print(f"  {kib / 1024:6.0f} MiB  ({kib_anon / 1024:4.0f} anonymous)  {name}")
        over |= mode == "container" and mib > LIMIT_MIB
    if over:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
