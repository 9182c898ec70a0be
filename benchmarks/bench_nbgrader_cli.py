"""nbgrader's autograde of one student's notebooks against `attn-course grade` of the same code.

One student hands in every unit's notebook with the reference code in its answer cells.
The run times `attn-course nbgrader autograde` (the trusted grade of the extracted files,
then nbgrader's own autograde, executing no notebook) and `attn-course grade` on a folder of
the same code (with the default --jobs, and with --jobs 1), alternating, and prints the
medians and the ratios (target <= 1.5, issue 19).

    .venv/bin/python benchmarks/bench_nbgrader_cli.py [repeats]
"""
from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.core.manifest import load_course


def run(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{' '.join(command[:6])} ... exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - started


def answered(release: Path, source: Path) -> dict:
    """The released notebook with each answer cell holding the source notebook's solution."""
    nb, src = (json.loads(p.read_text(encoding="utf-8")) for p in (release, source))
    solution = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in src["cells"]
                if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in solution:
            cell["source"] = solution[meta["grade_id"]]
    return nb


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    course = load_course()
    root = course.root
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        course_dir = tmp / "course"
        course_dir.mkdir()
        shutil.copy(course.nbgrader_course / "nbgrader_config.py", course_dir)
        shutil.copytree(course.nbgrader_source, course_dir / "source")
        pipeline = [sys.executable, "-m", "autograder.cli", "nbgrader", "--course", str(course_dir)]  # as a user runs it
        run([*pipeline, "generate"], root)
        inbox = tmp / "inbox" / "student"
        for unit in course.units:
            folder = inbox / unit
            folder.mkdir(parents=True)
            nb = answered(course_dir / "release" / unit / f"{unit}.ipynb", course_dir / "source" / unit / f"{unit}.ipynb")
            (folder / f"{unit}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
        run([*pipeline, "collect", str(tmp / "inbox")], root)
        grading = [sys.executable, "-m", "autograder.cli", "grade", str(course.solutions), "--format", "json"]
        times = {"nbgrader autograde": [], "grade": [], "grade --jobs 1": []}
        for _ in range(repeats):
            times["nbgrader autograde"].append(run([*pipeline, "autograde"], root))
            times["grade"].append(run(grading, root))  # the default: one process per usable core
            times["grade --jobs 1"].append(run([*grading, "--jobs", "1"], root))
    nb, cli, one = (statistics.median(times[k]) for k in times)
    print(f"one student, {len(course.units)} notebooks, median of {repeats}: nbgrader autograde {nb:.1f} s; "
          f"attn-course grade {cli:.1f} s, ratio {nb / cli:.2f} (target <= 1.5); "
          f"attn-course grade --jobs 1 {one:.1f} s, ratio {nb / one:.2f}")


if __name__ == "__main__":
    main()
