"""The engine's limits in one place (autograder/core/settings.py): today's values as defaults, the one
table of them (docs/settings.md), course.toml's [limits] parsed and checked, and an override that
reaches the grade, in-process and sandboxed."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from autograder.core.manifest import MANIFEST, load_course
from autograder.core.settings import DEFAULTS, Limits, table

DOC = ROOT / "docs" / "settings.md"
# The engine's values before the settings existed: a default that changes changes grades.
TODAY = {
    "call_timeout": 10.0, "timeouts_per_unit": 2, "test_budget": 30.0, "unit_budget": 60.0, "crashes_per_test": 2,
    "write_limit": 10.0, "sandbox_startup": 120.0, "cpu_grace": 5, "student_budget": 1200.0,
    "prairielearn_timeout": 300, "kernel_cpu": 1800, "worker_memory": 2 << 30, "worker_address_space": 4 << 30,
    "worker_file_size": 64 << 20, "worker_open_files": 256, "worker_processes": 128, "box_tmp": 64 << 20,
    "kernel_address_space": 6442450944, "kernel_processes": 512, "kernel_open_files": 1024,
    "kernel_file_size": 67108864, "kept_output": 64 << 10, "flood": 4 << 20, "upload_file_bytes": 2 * 1024 * 1024,
    "notebook_bytes": 16 * 1024 * 1024, "upload_zip_bytes": 20 * 1024 * 1024, "upload_entries": 10_000,
    "upload_depth": 32, "copy_file_bytes": 16 << 20, "copy_bytes": 48 << 20,
}


def test_the_defaults_are_the_engines_values_with_their_types():
    assert dataclasses.asdict(DEFAULTS) == TODAY
    for f in dataclasses.fields(Limits):
        assert type(f.default).__name__ == f.type, (f.name, f.type, f.default)
        assert {"unit", "doc", "where"} <= set(f.metadata), f.name


def test_docs_hold_the_one_table_of_the_settings():
    """docs/settings.md's table is the dataclass's (`python -m autograder.core.settings` prints it)."""
    text = DOC.read_text(encoding="utf-8")
    shown = re.search(r"<!-- settings table: generated, do not edit -->\n(.*?)<!-- end of settings table -->", text, re.S)
    assert shown, f"{DOC} has lost its table's markers"
    assert shown[1] == table(), (f"{DOC.relative_to(ROOT)} and autograder/core/settings.py disagree: paste the output "
                                 "of `python -m autograder.core.settings` between the markers")
    assert "[limits]" in (ROOT / MANIFEST).read_text(encoding="utf-8"), "course.toml shows [limits] in a comment"


def _course_root(tmp_path: Path, limits: str) -> Path:
    """A copy of this course's manifest with ``limits`` (a [limits] table's body), and the suites and
    stand-ins it names."""
    root = tmp_path / "course_root"
    for rel in ("tests/public", "tests/hidden", "course/stand_ins"):
        shutil.copytree(ROOT / rel, root / rel, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = (ROOT / MANIFEST).read_text(encoding="utf-8")
    (root / MANIFEST).write_text(f"{manifest}\n[limits]\n{limits}\n", encoding="utf-8")
    return root


def test_course_toml_limits_override_the_defaults_and_refuse_mistakes(tmp_path):
    course = load_course(_course_root(tmp_path, "test_budget = 1\nworker_memory = 1_073_741_824"))
    assert course.limits == dataclasses.replace(DEFAULTS, test_budget=1.0, worker_memory=1 << 30)
    assert isinstance(course.limits.test_budget, float)
    for body, says in (("test_budgte = 1", "unknown setting(s) test_budgte; the settings are call_timeout"),
                       ("worker_memory = 1.5", "worker_memory = 1.5 is not an integer"),
                       ('call_timeout = "5"', "call_timeout = '5' is not a number"),
                       ("flood = true", "flood = True is not an integer"),
                       ("unit_budget = 0", "unit_budget = 0 must be positive")):
        root = _course_root(tmp_path / body.split()[0], body)
        with pytest.raises(ValueError) as refused:
            load_course(root)
        assert f"{MANIFEST}: [limits]: {says}" in str(refused.value), refused.value


def _run(root: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOGRADER_COURSE_ROOT": str(root)}
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)


def test_a_call_timeout_in_course_toml_reaches_the_grade(tmp_path):
    """`check` (in-process) on code that never returns: its calls stop at the course's 0.05 s, not
    the default 10 s (the first two; the unit's other calls then fail at once)."""
    root = _course_root(tmp_path, "call_timeout = 0.05")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "tests" / "hostile" / "endless_loop" / "attention.py", work)
    proc = _run(root, "-m", "autograder.cli", "check", "attention", "--path", str(work), "--format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    outputs = [t["output"] for t in json.loads(proc.stdout)["units"]["attention"]["tests"]]
    assert sum("timed out after 0.05 s" in o for o in outputs) == DEFAULTS.timeouts_per_unit, outputs
    assert all("0.05 s" in o for o in outputs if o), outputs


GRADE = """
import json, sys
from pathlib import Path
from autograder.core.manifest import load_course
from autograder.grading.grade import grade
course = load_course(Path(sys.argv[1]))
result, = grade(course, [Path(sys.argv[2])], units=["attention"], suites=("public",))
print(json.dumps(result.to_dict()))
"""


def test_a_test_budget_in_course_toml_reaches_a_sandboxed_grade(tmp_path):
    """grade(), sandboxed, on code that never returns, with a 0.5 s test budget: each test stops at
    its budget, long before the 10 s call limit (about 15 s in all, on two loaded cores)."""
    root = _course_root(tmp_path, "test_budget = 0.5")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "tests" / "hostile" / "endless_loop" / "attention.py", work)
    proc = _run(root, "-c", GRADE, str(root), str(work))
    assert proc.returncode == 0, proc.stderr[-3000:]
    outputs = [t["output"] for t in json.loads(proc.stdout.splitlines()[-1])["units"]["attention"]["tests"]]
    assert outputs and all("time budget exhausted: 0.5 s for this test" in o for o in outputs), outputs
