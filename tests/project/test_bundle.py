"""The student bundle stands alone: built by ``release``, installed into a fresh venv, used from
its own folder with nothing of the repository in reach.

The venv has no pip and no copy of the third-party packages: one .pth file puts this
interpreter's site-packages on its path. Python runs the .pth files of a venv's own
site-packages only, so the repository's editable install (the ``__editable__`` finder that a
.pth file in this interpreter's site-packages starts) stays off: ``import autograder`` then
finds nothing until the bundle is installed as its README says (``pip install -e .``, here
without the network and with the dependencies already there).
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT, attn_course

# Its module fixtures are built once: every test of this module runs on one xdist worker.
pytestmark = pytest.mark.xdist_group("bundle")

BAD_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "ATTN_COURSE_ROOT")  # or anything AUTOGRADER_*


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> dict[str, Path]:
    """The bundle, and the python of a fresh venv it is installed in."""
    top = tmp_path_factory.mktemp("bundle")
    out, venv = top / "bundle", top / "venv"
    attn_course("release", str(out))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=top).stdout.strip())
    (site / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    outside = run(python, "-c", "import autograder", cwd=top, check=False)
    assert "No module named 'autograder'" in outside.stderr, "the repository's engine is in reach of the venv"
    run(python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-e", ".", cwd=out)
    return {"root": out, "python": python, "bin": venv / "bin", "top": top}


def clean_env() -> dict[str, str]:
    """This environment without anything that points at the repository."""
    env = {k: v for k, v in os.environ.items() if k not in BAD_ENV and not k.startswith("AUTOGRADER_")}
    return {**env, "MPLBACKEND": "Agg"}


def run(*argv, cwd: Path, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=clean_env())
    if check:
        assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def test_the_bundle_is_what_it_imports(bundle):
    """From any folder the engine, the units and the lessons are the bundle's; the reference is nowhere."""
    code = ("import autograder, assignments, course.demos, course.lessons, importlib.util\n"
            "print(autograder.__file__, assignments.__file__, course.demos.__file__, course.lessons.__file__)\n"
            "print(importlib.util.find_spec('solutions'))")
    files, reference = run(bundle["python"], "-c", code, cwd=bundle["top"]).stdout.splitlines()
    for file in files.split():
        assert Path(file).is_relative_to(bundle["root"]), file
    assert reference == "None"
    assert (bundle["root"] / "docs" / "course-api.md").is_file(), "the contract ships with the stubs"
    assert not (bundle["root"] / "course" / "stand_ins").exists() and not (bundle["root"] / "solutions").exists()


def test_check_scores_the_stubs_zero(bundle):
    proc = run(bundle["bin"] / "attn-course", "check", "--format", "json", cwd=bundle["root"])
    report = json.loads(proc.stdout)
    assert report["score"] == 0 and report["max_score"] > 0 and "Traceback" not in proc.stderr
    assert Path(report["submission"]) == bundle["root"] / "assignments"


def test_lessons_render_from_the_stubs_and_name_the_file_to_write(bundle):
    """The lessons are the student notebooks the release wrote (no solutions/ here); run as a script
    on the stubs, a lesson stops at its first public test, which names what to implement."""
    out = bundle["top"] / "lessons"
    run(bundle["python"], "-m", "course.lessons", out, cwd=bundle["root"])
    script = (out / "multi_head.py").read_text(encoding="utf-8")
    # The student notebook, as nbgrader's release makes it: solutions cleared, the sibling through
    # the kernel side (here, with no stand-ins shipped, the student's own attention.py).
    assert "scaled_dot_product_attention = sibling('multi_head', 'attention').scaled_dot_product_attention" in script
    assert "### BEGIN SOLUTION" not in script and "raise NotImplementedError()" in script
    assert "hidden_tests(" not in script and "course.stand_ins" not in script
    assert (out / "multi_head.ipynb").is_file()
    small = script.replace('SIZE = "full"', 'SIZE = "small"').replace('PLOTS = "plots"', f'PLOTS = {str(out)!r}')
    (out / "multi_head.py").write_text(small, encoding="utf-8")
    proc = run(bundle["python"], out / "multi_head.py", cwd=out, check=False)
    # Run top to bottom on the stubs, it stops at the first public test cell, naming the property.
    assert proc.returncode == 1
    assert re.search(r"AssertionError: split_heads .*: not implemented yet \(multi_head\.py line \d+\)", proc.stderr), \
        proc.stderr[-2000:]


def test_viz_on_the_stubs_says_what_to_implement(bundle):
    proc = run(bundle["bin"] / "attn-course", "viz", "-o", bundle["top"] / "page.html", "--steps", "5",
               cwd=bundle["root"], check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "implement attention.py first" in proc.stderr and "Traceback" not in proc.stderr
    assert not (bundle["top"] / "page.html").exists()


def test_viz_runs_the_students_units_once_written(bundle):
    """The same command on implemented units (the reference, copied in as a student's folder) draws the page."""
    mine = bundle["top"] / "mine"
    mine.mkdir()
    for name in ("attention.py", "multi_head.py"):
        shutil.copyfile(ROOT / "solutions" / name, mine / name)
    page = bundle["top"] / "mine.html"
    run(bundle["bin"] / "attn-course", "viz", "a b c", "-o", page, "--source", mine, "--steps", "5", cwd=bundle["root"])
    assert str(mine) in page.read_text(encoding="utf-8")


def test_repro_rebuilds_a_case_from_the_bundle_alone(bundle):
    """A failure's reproduce command runs in the bundle: on the stubs it says what to write and
    exits 1; on the student's finished file it shows their answer beside the expected one, exit 0."""
    import torch

    from autograder.core import cases
    from autograder.core.protocol import Call

    x = torch.tensor([0.0, math.log(2), math.log(3)], dtype=torch.float64)
    case = {"call": Call("attention", "softmax", (x,), {"dim": -1}), "part": "output", "what": "softmax",
            "expected": torch.tensor([1 / 6, 2 / 6, 3 / 6], dtype=torch.float64), "atol": 1e-10, "rtol": 1e-9}
    argv = [bundle["bin"] / "attn-course", "repro", "attention", "test_softmax", "--example", cases.dumps("attention", case)]
    stub = run(*argv, cwd=bundle["root"], check=False)
    assert stub.returncode == 1 and "not implemented" in stub.stdout and "Traceback" not in stub.stderr, stub.stdout + stub.stderr
    mine = bundle["top"] / "repro-mine"
    mine.mkdir()
    shutil.copyfile(ROOT / "solutions" / "attention.py", mine / "attention.py")
    done = run(*argv, "--path", mine, cwd=bundle["root"], check=False)
    assert done.returncode == 0 and "equal within" in done.stdout, done.stdout + done.stderr
