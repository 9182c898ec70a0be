"""The lesson notebooks run as a student runs them: headless, top to bottom, in the student's bundle,
installed as its README says in a fresh venv (``student_bundle``, shared with test_bundle.py).

In each language's bundle, the lessons are written by the README's ``python -m course.lessons``
and every notebook is executed by nbclient, in that venv's own kernel, as ``jupyter nbconvert
--execute`` does (it stops at the first cell that raises, unless the cell is tagged
``raises-exception``): once as released (every unit a stub) and once with the reference copied
into ``assignments/`` (a student who finished every file). The setup cell is untouched but for
``SIZE = "small"`` injected after it (papermill's way with a ``parameters`` cell). nbclient is
this test's tool, installed into the venv beside the bundle (a student opens the notebooks in
Jupyter or VS Code instead). The notebook must complete; on the finished code every test passes
and every demo shows its plot exactly once; on the stubs every demo says, in one line, which file
to implement and where it took it from; and no output holds a warning or the profiler's lines.
All of it in the bundle's language, which the kernel speaks (the setup cell's ``LANG``): in the zh
bundle no output of a code cell (a test's result, a demo's status line) and no text a plot draws (every
matplotlib text of every figure saved, recorded by the injected cell) holds English (:mod:`zh_text`).
"""
from __future__ import annotations

import contextlib
import json
import re

import pytest

from conftest import ROOT
from student_bundle import LANGS, MANIFEST, UNITS, find_uv, finished, run
from zh_text import CJK, RECORD_PLOT_TEXTS, english
from autograder.core import i18n

nbformat = pytest.importorskip("nbformat")

pytestmark = pytest.mark.xdist_group("bundle")

STRAY = re.compile(r"Warning\b|warnings\.warn|profiler_st|USDT:|STAGE:|ActivityProfiler")
RUNS = [(lang, variant) for lang in LANGS for variant in ("stubs", "finished")]
# Run by the bundle's venv: executes a notebook as nbconvert does, SIZE = "small" and a recorder of
# the plots' texts (argv[3]) injected after its parameters cell; writes the executed notebook, or
# exits 1 where nbconvert would stop.
EXECUTE = """
import sys, time, nbclient, nbformat
from pathlib import Path
path, out, record = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
nb = nbformat.read(str(path), as_version=4)
setup = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
injected = nbformat.v4.new_code_cell('SIZE = "small"' + record)
injected.metadata["tags"] = ["injected-parameters"]
nb.cells.insert(setup + 1, injected)
start = time.perf_counter()
nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
nb.metadata["seconds"] = round(time.perf_counter() - start, 1)
nbformat.write(nb, str(out))
"""


@pytest.fixture(scope="module", params=RUNS, ids=[f"{lang}-{variant}" for lang, variant in RUNS])
def executed(request, student_bundles) -> dict:
    """One bundle's lessons, written by its README's command and each executed headless in its venv,
    on the stubs or on finished work: {"lang", "variant", "assignments", "notebooks": unit -> the
    executed notebook, or the error that stopped it; "drawn": unit -> the texts its plots drew (recorded in zh only)}."""
    lang, variant = request.param
    bundle = student_bundles[lang]
    python, tool = bundle["python"], bundle["top"] / "nbclient-installed"
    if not tool.exists():
        run(find_uv(), "pip", "install", "--quiet", "--python", python, "nbclient", cwd=bundle["top"], timeout=600)
        tool.touch()
    folder, executed_dir = bundle["top"] / f"lessons-{variant}", bundle["top"] / f"executed-{variant}"
    executed_dir.mkdir()
    jupyter = bundle["top"] / "jupyter-data"  # no kernel spec of this machine's user: the venv's own
    with finished(bundle) if variant == "finished" else contextlib.nullcontext():
        run(python, "-m", "course.lessons", folder, cwd=bundle["root"], venv=bundle["venv"])
        notebooks, drawn = {}, {}
        for unit in UNITS:
            out, texts_file = executed_dir / f"{unit}.ipynb", executed_dir / f"{unit}.texts"
            record = RECORD_PLOT_TEXTS.format(path=str(texts_file)) if lang == "zh" else ""  # read for zh only
            proc = run(python, "-c", EXECUTE, folder / f"{unit}.ipynb", out, record, cwd=folder, venv=bundle["venv"],
                       check=False, timeout=900, env={"JUPYTER_DATA_DIR": str(jupyter), "JUPYTER_PATH": "",
                                                      "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
            notebooks[unit] = nbformat.read(str(out), as_version=4) if proc.returncode == 0 else proc.stderr[-4000:]
            drawn[unit] = texts_file.read_text(encoding="utf-8").splitlines() if texts_file.is_file() else []
    return {"lang": lang, "variant": variant, "assignments": bundle["root"] / "assignments", "notebooks": notebooks,
            "drawn": {unit: [json.loads(line) for line in lines] for unit, lines in drawn.items()}}


def said(lang: str, msgid: str) -> str:
    """``msgid`` as a notebook in ``lang`` prints it (the kernel speaks the notebook's language)."""
    return msgid if lang == "en" else i18n.translations(lang, ROOT / MANIFEST["paths"]["locale"])[msgid]


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


@pytest.mark.parametrize("unit", UNITS)
def test_a_lesson_notebook_runs_headless(executed, unit):
    lang, variant, nb = executed["lang"], executed["variant"], executed["notebooks"][unit]
    assert not isinstance(nb, str), f"{lang}/{unit} ({variant}): the notebook stopped:\n{nb}"
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
        passed = said(lang, "passed: {title}").split("{title}")[0]
        assert tests and all(any(line.startswith(passed) for t in texts(c) for line in t.splitlines())
                             for c in tests), f"{lang}/{unit}: a public test did not pass on the finished code"
        for cell in demos:
            assert images(cell) == 1, f"{lang}/{unit}: {images(cell)} plots shown by\n{cell.source}"
            assert not any("not run yet" in t for t in texts(cell))
        assert all(images(c) == 0 for c in code if not is_demo(c))
    else:
        not_run = said(lang, "{name}: not run yet: {problem}").split("{name}")[1].split("{problem}")[0]
        first = said(lang, "implement {file} first{then} ({last} says: {says}). It ran {ran}. To run your code from "
                           "another folder, set SOURCE in the lesson's setup cell (or --source) to the folder that "
                           "holds your {file}.")
        implement = re.escape(first.split("{file}")[0]) + r"\w+\.py" + re.escape(first.split("{file}")[1].split("{then}")[0])
        for cell in demos:
            shown = "".join(texts(cell))
            assert images(cell) == 0 and not_run in shown, f"{lang}/{unit}: {shown!r}"
            assert re.search(implement, shown) and str(executed["assignments"]) in shown, (
                f"{lang}/{unit}: the demo should name the file to write and where it took it from: {shown!r}")
            assert not any(o.output_type == "error" for o in cell.outputs), f"{lang}/{unit}: a demo cell raised"
        tests = [c for c in code if is_test(c) and "public_test(" in c.source]
        assert tests and all(any(said(lang, "not implemented yet") in t for t in texts(c)) for c in tests), (
            f"{lang}/{unit}: each public test should say the unit is not implemented yet")
    if lang != "en":  # the kernel speaks the bundle's language: every test result is in it
        results = [" ".join(texts(c)) for c in code if is_test(c) and "public_test(" in c.source]
        assert all(CJK.search(r) for r in results), f"{lang}/{unit} ({variant}): a test printed no {lang}: {results}"
    if lang == "zh":  # and no English: not in a cell's output, not in a plot's label
        shown = ["\n".join(texts(c)) for c in code]
        wrong = [f"{english(t)} in:\n{t[:600]}" for t in shown if english(t)]
        assert not wrong, f"{unit} ({variant}): English in the outputs:\n" + "\n".join(wrong)
        drawn = executed["drawn"][unit]
        assert variant == "stubs" or any(CJK.search(t) for t in drawn), f"{unit}: its demos drew no Chinese label: {drawn}"
        plotted = [f"{t!r}: {english(t)}" for t in dict.fromkeys(drawn) if english(t)]
        assert not plotted, f"{unit} ({variant}): English in the plots:\n" + "\n".join(plotted)
    print(f"{lang}/{unit} ({variant}): {nb.metadata['seconds']} s")
