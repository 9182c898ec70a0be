"""The lesson notebooks run as a student runs them: headless, top to bottom, in a student's bundle.

A bundle (``attn-course release``) is made twice: as released (every unit a stub) and with the
reference copied into its ``assignments/``, as a student who finished every file has it. In each,
``python -m course.lessons`` writes the lessons and nbclient executes every notebook as
``jupyter nbconvert --execute`` does (it stops at the first cell that raises, unless the cell is
tagged ``raises-exception``), with the setup cell untouched but for ``SIZE = "small"`` injected
after it (papermill's way with a ``parameters`` cell). The notebook must complete; on the
finished code every test passes and every demo shows its plot exactly once; on the stubs every
demo says, in one line, which file to implement and where it took it from; and no output holds a
warning or the profiler's lines.

English runs every notebook both ways; Chinese, whose code cells are the English ones
(test_lesson_languages.py), runs one notebook both ways: about 110 s in all on one core.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from course import lessons  # noqa: E402

pytestmark = pytest.mark.xdist_group("lesson_notebooks")

UNITS = list(lessons.lesson_course().units)
DEMO_TAG = lessons.lesson_course().brand.demo_tag
ASSIGNMENTS = lessons.lesson_course().assignments.relative_to(ROOT)
STRAY = re.compile(r"Warning\b|warnings\.warn|profiler_st|USDT:|STAGE:|ActivityProfiler")
# Every English notebook both ways; Chinese, whose code cells are the English ones, one notebook both ways.
RUNS = [(lang, variant, unit) for lang in ("en", "zh") for variant in ("stubs", "finished") for unit in UNITS
        if lang == "en" or unit == "positional_encoding"]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """The released bundle, and a copy whose assignments/ hold the reference (a finished student)."""
    base = tmp_path_factory.mktemp("lesson_bundles")
    stubs = base / "stubs"
    proc = subprocess.run([sys.executable, "-m", "autograder.cli", "release", str(stubs)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    finished = base / "finished"
    shutil.copytree(stubs, finished)
    for unit in lessons.lesson_course().units.values():
        shutil.copyfile(ROOT / "solutions" / unit.file, finished / ASSIGNMENTS / unit.file)
    return {"stubs": stubs, "finished": finished}


def bundle_env(bundle: Path) -> dict[str, str]:
    """What an installed bundle gives a process: its packages first on the path, its own course."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_COURSE_ROOT"}
    return {**env, "PYTHONPATH": str(bundle), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}


@pytest.fixture(scope="module")
def written(bundles) -> dict[tuple[str, str], Path]:
    """(variant, lang) -> the folder where ``python -m course.lessons`` wrote that bundle's lessons."""
    out = {}
    for variant, bundle in bundles.items():
        for lang in ("en", "zh"):
            folder = bundle / f"lessons_{lang}"
            proc = subprocess.run([sys.executable, "-m", "course.lessons", folder.name, "--lang", lang], cwd=bundle,
                                  capture_output=True, text=True, timeout=300, env=bundle_env(bundle))
            assert proc.returncode == 0, proc.stderr[-3000:]
            out[variant, lang] = folder
    return out


def run_headless(path: Path, bundle: Path, monkeypatch) -> nbformat.NotebookNode:
    """Execute the notebook at ``path`` as ``jupyter nbconvert --execute`` does, in its folder, with
    ``SIZE = "small"`` injected after its parameters cell; raises where nbconvert would stop."""
    nb = nbformat.read(str(path), as_version=4)
    setup = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    injected = nbformat.v4.new_code_cell('SIZE = "small"')
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(setup + 1, injected)
    for name, value in bundle_env(bundle).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AUTOGRADER_COURSE_ROOT", raising=False)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def texts(cell) -> list[str]:
    """Every text a code cell shows: streams, results, errors."""
    out = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            out.append(output.text)
        elif output.output_type == "error":
            out.append(f"{output.ename}: {output.evalue}")
        else:
            out.append(output.get("data", {}).get("text/plain", ""))
    return out


def images(cell) -> int:
    return sum("image/png" in output.get("data", {}) for output in cell.get("outputs", []))


def is_test(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and meta.get("grade", False) and not meta.get("solution", False)


def is_demo(cell) -> bool:
    return cell.cell_type == "code" and "run_and_show(" in cell.source


@pytest.mark.parametrize("lang, variant, unit", RUNS, ids=[f"{lang}-{variant}-{unit}" for lang, variant, unit in RUNS])
def test_a_lesson_notebook_runs_headless(lang, variant, unit, bundles, written, monkeypatch):
    start = time.perf_counter()
    nb = run_headless(written[variant, lang] / f"{unit}.ipynb", bundles[variant], monkeypatch)
    seconds = time.perf_counter() - start
    code = [c for c in nb.cells if c.cell_type == "code"]
    demos = [c for c in code if is_demo(c)]
    assert demos, f"{unit}: no demo cell ran"
    for cell in code:
        for text in texts(cell):
            stray = [line for line in text.splitlines() if STRAY.search(line)]
            assert not stray, f"{lang}/{unit} ({variant}): stray output in a cell:\n" + "\n".join(stray)
    if variant == "finished":  # the answer cells are empty: the demos and the tests take the student's files
        for cell in code:
            errors = [t for t in texts(cell) if any(o.output_type == "error" for o in cell.outputs)]
            assert not errors, f"{lang}/{unit}: a cell failed on the finished code:\n{cell.source}\n{errors}"
        tests = [c for c in code if is_test(c) and "public_test(" in c.source]
        assert tests and all(any(line.startswith("passed: ") for t in texts(c) for line in t.splitlines())
                             for c in tests), f"{lang}/{unit}: a public test did not pass on the finished code"
        for cell in demos:
            assert images(cell) == 1, f"{lang}/{unit}: {images(cell)} plots shown by\n{cell.source}"
            assert not any("not run yet" in t for t in texts(cell))
        assert all(images(c) == 0 for c in code if not is_demo(c))
    else:
        for cell in demos:
            shown = "".join(texts(cell))
            assert images(cell) == 0 and "not run yet: implement " in shown, f"{lang}/{unit}: {shown!r}"
            assert re.search(r"implement \w+\.py first", shown) and str(bundles[variant] / ASSIGNMENTS) in shown, (
                f"{lang}/{unit}: the demo should name the file to write and where it took it from: {shown!r}")
            assert not any(o.output_type == "error" for o in cell.outputs), f"{lang}/{unit}: a demo cell raised"
        tests = [c for c in code if is_test(c) and "public_test(" in c.source]
        assert tests and all(any("not implemented yet" in t for t in texts(c)) for c in tests), (
            f"{lang}/{unit}: each public test should say the unit is not implemented yet")
    print(f"{lang}/{unit} ({variant}): {seconds:.1f} s")
