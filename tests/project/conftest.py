"""Fixtures for the project's own tests: grading runs as a real CLI process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def attn_course(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``attn-course`` in a fresh interpreter, as a user would."""
    proc = subprocess.run(
        [sys.executable, "-m", "autograder.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=2400, env={**os.environ, **(env or {})},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"attn-course {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def grade_json(paths: list[Path], units: list[str] = (), *extra: str) -> list[dict]:
    """Grade ``paths`` and return one result dict per path."""
    unit_args = [arg for unit in units for arg in ("--unit", unit)]
    out = json.loads(attn_course("grade", *map(str, paths), *unit_args, "--format", "json", *extra).stdout)
    return out if isinstance(out, list) else [out]


# The platforms' own artefacts (the JUnit XSD, PrairieLearn's question schema, Classroom's
# reporter) come from their repositories at the commits tests/vendor/*/SOURCE.md names. They
# are third-party files this workplace does not let a developer commit, so they are looked up
# in $ATTN_VENDOR_DIR (default ~/.cache/attention-course/vendor), and a test that needs one
# skips, naming it, where it is absent. The schemas written here from the platforms' docs
# (Gradescope's and PrairieLearn's results) are in tests/vendor/ itself.
THIRD_PARTY = Path(os.environ.get("ATTN_VENDOR_DIR") or Path.home() / ".cache" / "attention-course" / "vendor")


def third_party(rel: str) -> Path:
    path = THIRD_PARTY / rel
    if not path.is_file():
        pytest.skip(f"the platform's own {rel} is not in {THIRD_PARTY} (tests/vendor/README.md says where it comes from)")
    return path


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
