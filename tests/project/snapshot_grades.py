"""The grades of a checkout, to compare two checkouts byte for byte (issue 60: a change of the engine's
layout must not change one grade).

``python tests/project/snapshot_grades.py ROOT OUT.json`` grades, with ROOT's own engine (its
``autograder.cli``, run in ROOT, in process: ``--no-sandbox --jobs 1``), ROOT's reference solutions, its
stubs, its correct alternatives (tests/alternatives/) and every mutant of its catalogue
(tests/mutants/<unit>.toml), each unit on its own, and writes every result as JSON, keyed by unit and
case, without the submission's path. ROOT may be a worktree of an older commit
(``git worktree add /tmp/old COMMIT``): two snapshots of the same catalogue are then compared with
``cmp``. A run takes the catalogue's grading time (about 7 CPU-minutes on the 2-core machine).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutants  # noqa: E402 - the catalogue's folders, as the project's tests write them


def snapshot(root: Path) -> dict:
    units = tomllib.loads((root / "course" / "course.toml").read_text(encoding="utf-8"))["units"]
    env = {**os.environ, "AUTOGRADER_COURSE_ROOT": str(root)}
    out: dict[str, dict] = {}
    for unit in units:
        with tempfile.TemporaryDirectory(prefix=f"snapshot-{unit}-") as tmp:
            folders = {"solutions": root / "solutions", "assignments": root / "assignments",
                       **mutants.cases(unit, Path(tmp), root=root)}
            proc = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", *map(str, folders.values()),
                                   "--unit", unit, "--no-sandbox", "--jobs", "1", "--format", "json"],
                                  cwd=root, env=env, capture_output=True, text=True)
            if proc.returncode not in (0, 1):
                sys.exit(f"grading {unit} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
            results = json.loads(proc.stdout)
        for result in results:
            result.pop("submission", None)
        out[unit] = dict(zip(folders, results))
        print(f"{unit}: {len(results)} graded", file=sys.stderr)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/project/snapshot_grades.py ROOT OUT.json")
    Path(sys.argv[2]).write_text(json.dumps(snapshot(Path(sys.argv[1]).resolve()), indent=1, sort_keys=True) + "\n",
                                 encoding="utf-8")
