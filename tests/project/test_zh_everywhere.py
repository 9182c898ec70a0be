"""The student's language everywhere (issue 58): a Chinese notebook runs in Chinese, the command line
speaks Chinese without a word of English its catalogues translate, and a notebook's answer cells are
checked as the unit file they make up.

* **Notebooks.** Each lesson, written in Chinese (``python -m course.lessons OUT --lang zh``) by this
  course, whose course.toml says English, is executed headless by nbclient as ``jupyter nbconvert
  --execute`` runs it (a cell tagged ``raises-exception`` may raise), in this venv's kernel: once on
  the stubs (``SOURCE = "assignments"`` injected after the setup cell, as papermill injects
  parameters) and once on finished code (the notebook's answer cells, filled in from the reference).
  The kernel speaks the notebook's own language, which its setup cell names (``LANG``). No output of
  a code cell (a test's result, a demo's status line) and no text a plot draws (every matplotlib text
  of every figure saved, recorded by a cell injected beside ``SIZE``) holds an English text that the
  catalogues translate, nor a run of English prose. The hidden-tests cell is not read: it is the
  instructor's (the released notebooks do not have it), and prints what the instructor's grader
  says. The bundle's own notebooks (its course.toml says zh) run in test_lesson_notebooks.py.
* **The command line** in Chinese: check's table and its property titles, --help (argparse's own
  words too), an unknown unit, a bad ``repro --example``.
* **One place to write code**: ``check --path NOTEBOOK`` checks the file its answer cells make up.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, attn_course
from autograder.authoring import answers, catalogue
from autograder.core import i18n
from autograder.core.manifest import load_course

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

COURSE = load_course(ROOT)
UNITS = list(COURSE.units)
CJK = re.compile(r"[\u3400-\u9fff]")
# English prose: three words of letters or more in a row, none part of a name, a call, a path or code.
PROSE = re.compile(r"(?<![\w./'\"=\-])[A-Za-z]{2,}(?: [A-Za-z]{2,}){2,}(?![\w(/'\"=\-])")
# What a status line starts with in English (too short to be told by its words alone).
ENGLISH_MARKS = ("passed: ", "warning: ", "Hint: ", "not run yet", "not implemented yet", "counterexample", "FAILED")
VARIANTS = {"stubs": 'SOURCE = "assignments"', "finished": ""}
# Run by this venv's interpreter: the notebook as nbconvert runs it, SIZE = "small" and a recorder of
# every text of every figure saved injected after its parameters cell.
EXECUTE = """
import sys, nbclient, nbformat
from pathlib import Path
path, out, texts, extra = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
nb = nbformat.read(str(path), as_version=4)
setup = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
injected = nbformat.v4.new_code_cell(f'''SIZE = "small"
{extra}
import json as _json, matplotlib.figure as _figure, matplotlib.text as _text
_savefig = _figure.Figure.savefig
def _recorded(fig, *args, **kwargs):
    with open({texts!r}, "a", encoding="utf-8") as out:
        for t in fig.findobj(_text.Text):
            if t.get_visible() and t.get_text().strip():
                out.write(_json.dumps(t.get_text(), ensure_ascii=False) + "\\\\n")
    return _savefig(fig, *args, **kwargs)
_figure.Figure.savefig = _recorded''')
injected.metadata["tags"] = ["injected-parameters"]
nb.cells.insert(setup + 1, injected)
nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
nbformat.write(nb, str(out))
"""


def fragments() -> list[str]:
    """The English the Chinese catalogues translate, as it could show in an output: each literal
    part (between placeholders) of a translated msgid that holds two words of prose or more and
    that its translation does not keep."""
    found = set()
    for domain, locale, _messages in catalogue.domains(COURSE):
        for message in catalogue.read(i18n.catalogue_path(locale, "zh", domain)):
            if not (message.id and message.string and CJK.search(message.string)):
                continue
            for part in i18n.FIELD.split(message.id)[::4]:
                part = part.strip(" :;,.()")
                if len(catalogue.PROSE_WORD.findall(part)) >= 2 and part not in message.string:
                    found.add(part)
    return sorted(found, key=len, reverse=True)


FRAGMENTS = fragments()


def english(text: str) -> list[str]:
    """The English in ``text``: catalogued English, an English status mark, a run of prose."""
    found = [f for f in FRAGMENTS if f in text] + [m for m in ENGLISH_MARKS if m in text]
    return found + [run for line in text.splitlines() for run in PROSE.findall(line)]


@pytest.fixture(scope="module")
def lessons(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zh-lessons")
    subprocess.run([sys.executable, "-m", "course.lessons", str(out), "--lang", "zh"], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    return out


@pytest.fixture(scope="module", params=list(VARIANTS))
def executed(request, lessons, tmp_path_factory) -> dict:
    """Every zh lesson executed headless on one variant: unit -> (the executed notebook, or the
    error that stopped it; the plot texts it drew)."""
    top = tmp_path_factory.mktemp(f"zh-{request.param}")
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg",
           "HOME": str(top), "JUPYTER_DATA_DIR": str(top / "jupyter"), "JUPYTER_PATH": "",
           "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    found = {}
    for unit in UNITS:
        out, texts = top / f"{unit}.ipynb", top / f"{unit}.texts"
        shutil.copyfile(lessons / f"{unit}.ipynb", top / f"{unit}.source.ipynb")
        proc = subprocess.run([sys.executable, "-c", EXECUTE, str(top / f"{unit}.source.ipynb"), str(out), str(texts),
                               VARIANTS[request.param]], cwd=top, env=env, capture_output=True, text=True, timeout=900)
        notebook = nbformat.read(str(out), as_version=4) if proc.returncode == 0 else proc.stderr[-4000:]
        drawn = [json.loads(line) for line in texts.read_text(encoding="utf-8").splitlines()] if texts.is_file() else []
        found[unit] = (notebook, drawn)
    return {"variant": request.param, "notebooks": found}


def outputs(cell) -> str:
    shown = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            shown.append(output.text)
        elif output.output_type == "error":
            shown.append(f"{output.ename}: {output.evalue}")
        else:
            shown.append(output.get("data", {}).get("text/plain", ""))
    return "\n".join(shown)


def is_hidden_cell(cell) -> bool:
    return "hidden_tests(" in cell.source


@pytest.mark.parametrize("unit", UNITS)
def test_a_chinese_notebook_prints_and_draws_no_english(executed, unit):
    variant, (nb, drawn) = executed["variant"], executed["notebooks"][unit]
    assert not isinstance(nb, str), f"{unit} ({variant}): the notebook stopped:\n{nb}"
    code = [c for c in nb.cells if c.cell_type == "code" and not is_hidden_cell(c)]
    wrong = [f"{english(outputs(c))} in:\n{outputs(c)[:600]}" for c in code if english(outputs(c))]
    assert not wrong, f"{unit} ({variant}): English in the outputs:\n" + "\n".join(wrong)
    tests = [outputs(c) for c in code if "public_test(" in c.source]
    assert tests and all(CJK.search(t) for t in tests), f"{unit} ({variant}): a test cell printed no Chinese: {tests}"
    if variant == "finished":
        passed = i18n.translations("zh", COURSE.locale)["passed: {title}"].split("{title}")[0]
        assert all(t.startswith(passed) for t in tests), f"{unit}: a public test did not pass: {tests}"
        labels = [t for t in drawn if CJK.search(t)]
        assert drawn and labels, f"{unit}: its demos drew no Chinese label: {drawn}"
    plotted = [f"{t!r}: {english(t)}" for t in dict.fromkeys(drawn) if english(t)]
    assert not plotted, f"{unit} ({variant}): English in the plots:\n" + "\n".join(plotted)


# -- the command line --------------------------------------------------------------------------------

def test_check_in_chinese_titles_its_properties_in_chinese():
    """A failing check, one row per property: each title is the catalogue's Chinese (the id unchanged
    in the JSON), and no English title or label is left in the table."""
    table = attn_course("check", "attention", "--lang", "zh", "-v").stdout
    report = json.loads(attn_course("check", "attention", "--lang", "zh", "--format", "json").stdout)
    english_report = json.loads(attn_course("check", "attention", "--format", "json").stdout)
    tests, english_tests = report["units"]["attention"]["tests"], english_report["units"]["attention"]["tests"]
    assert [t["id"] for t in tests] == [t["id"] for t in english_tests]
    zh = i18n.translations("zh", COURSE.locale)
    for test, english_test in zip(tests, english_tests):
        assert test["name"] == zh[english_test["name"]] != english_test["name"], test
        assert CJK.search(test["name"]) and english_test["name"] not in table
    shown = "\n".join(line for line in table.splitlines() if "--example" not in line)  # a case is data
    assert not english(shown), english(shown)


def test_help_is_in_chinese_argparse_words_included():
    zh = i18n.translations("zh", COURSE.locale)
    for argv in (["check", "--help", "--lang", "zh"], ["repro", "--lang=zh", "--help"]):
        text = attn_course(*argv).stdout
        assert text.startswith(zh["usage: "]) and zh["show this help message and exit"] in text, text
        assert zh["positional arguments"] in text and zh["options"] in text, text
        assert not english(text), english(text)
    wrong = attn_course("check", "--format", "nope", "--lang", "zh", check=False)
    assert wrong.returncode == 2 and "invalid choice" not in wrong.stderr and CJK.search(wrong.stderr), wrong.stderr


def test_every_argparse_word_has_its_translation():
    """argparse's own messages (its module's _() and ngettext() calls) are in the engine's catalogue:
    a Python whose argparse words them differently shows them in English, and this test says which."""
    import argparse
    import ast
    import inspect

    said = set()
    for node in ast.walk(ast.parse(inspect.getsource(argparse))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("_", "ngettext"):
            said |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    # Messages about a parser built wrongly (the program's bug, never the user's) need no translation.
    about_the_program = {m for m in said if any(w in m for w in (
        "conflicting", "callable", "invalid conflict", "merge actions", "dest= is", "must start with",
        "mutually exclusive", "invalid argument for positionals", "multiple subparser", "not defined",
        "unexpected option string", "with mode"))}
    zh = i18n.translations("zh", COURSE.locale)
    missing = sorted(m for m in said - about_the_program if not zh.get(m))
    assert not missing, f"argparse words with no Chinese (add them to cli_arguments.ARGPARSE_WORDS): {missing}"


def test_unknown_unit_and_a_bad_example_are_all_chinese():
    for argv in (["check", "nosuch", "--lang", "zh"], ["check", "--unit", "nosuch", "--lang", "zh"],
                 ["repro", "nosuch", "test_x", "--example", "{}", "--lang", "zh"],
                 ["repro", "attention", "test_x", "--example", "{}", "--lang", "zh"],
                 ["repro", "attention", "test_x", "--example", "{", "--lang", "zh"],
                 ["repro", "attention", "test_x", "--example", '{"unit": "attention", "call": {"unit": "attention", '
                  '"target": "os_system"}}', "--lang", "zh"],
                 ["repro", "attention", "test_x", "--example", '{"unit": "attention", "call": {"unit": "attention", '
                  '"target": 7}}', "--lang", "zh"]):
        proc = attn_course(*argv, check=False)
        message = proc.stderr.strip()
        assert proc.returncode == 2 and message.count("\n") == 0 and CJK.search(message), (argv, message)
        assert not english(message), (argv, message, english(message))


# -- one place to write code --------------------------------------------------------------------------

def test_a_notebook_is_checked_as_the_unit_file_its_answer_cells_make_up(tmp_path):
    """The released notebook with one answer cell filled in: check --path NOTEBOOK checks the unit
    file that cell makes up (the rest from assignments/), says so, and says how to save it."""
    from autograder.authoring.notebook import build_notebook, grade_id

    released = build_notebook(COURSE, "multi_head", lang="zh", student=True)
    reference = build_notebook(COURSE, "multi_head", lang="zh")
    filled = grade_id("multi_head", "split_heads")
    for mine, theirs in zip(released.cells, reference.cells):
        if mine.metadata.get("nbgrader", {}).get("grade_id") == filled:
            mine.source = theirs.source
    path = tmp_path / "multi_head.ipynb"
    nbformat.write(released, str(path))
    proc = attn_course("check", "--path", str(path), "--format", "json", "--lang", "zh")
    report = json.loads(proc.stdout)
    assert list(report["units"]) == ["multi_head"] and report["submission"] == str(path.resolve())
    by_id = {t["id"].split("::")[1]: t for t in report["units"]["multi_head"]["tests"]}
    assert by_id["test_split_heads_small_example"]["status"] == "passed"
    assert by_id["test_merge_heads_undoes_split_heads"]["status"] == "failed"
    zh = i18n.translations("zh", COURSE.locale)
    assert zh["to hand it in, write it into {file}: {command} check --path {notebook} --save"].split("{file}")[0] \
        in proc.stderr and "split_heads" in proc.stderr, proc.stderr
    assert not (COURSE.assignments / "multi_head.py.bak").exists()  # nothing written without --save


def test_write_into_keeps_the_files_definitions_where_a_cell_is_as_released():
    stub = (COURSE.assignments / "attention.py").read_text(encoding="utf-8")
    solution = (COURSE.solutions / "attention.py").read_text(encoding="utf-8")
    released = {"attention-softmax": "def softmax(x, dim=-1):\n    # YOUR CODE HERE\n    raise NotImplementedError()",
                "attention-causal-mask": "import math\n\ndef causal_mask(L, S=None):\n    return 'mine'\n"}
    text, replaced, kept = answers.write_into(stub, released, "attention")
    assert replaced == ["causal_mask"] and kept == ["softmax"]
    assert "return 'mine'" in text and "import math" in text and text.count("def softmax(") == 1
    assert answers.write_into(solution, {}, "attention")[0] == solution.rstrip("\n") + "\n"


def test_the_notebook_the_readmes_and_check_name_the_same_place():
    """The unit file is where code goes; a notebook's answer cells are checked and saved into it:
    the notebook's words (in each language), the student README (in each) and check all say so."""
    from autograder.authoring.notebook import notebook_text

    command = COURSE.brand.command
    for lang in ("en", "zh"):
        graded = notebook_text(COURSE, lang)["graded"].format(file="attention.py", unit="attention", command=command,
                                                               api="", points="1")
        assert f"{command} check --path attention.ipynb --save" in graded and "assignments/attention.py" in graded
    readmes = [ROOT / "course" / "student_readme.md", ROOT / "course" / "student_readme.zh.md"]
    for readme in readmes:
        text = readme.read_text(encoding="utf-8")
        assert "{command} check --path lessons/attention.ipynb" in text and "`--save`" in text, readme
    proc = attn_course("check", "attention")
    assert f"{command} check --path lessons/attention.ipynb" in proc.stderr and "--save" in proc.stderr, proc.stderr


def test_a_hosted_platform_grades_in_the_courses_language(tmp_path, monkeypatch):
    """Gradescope's and PrairieLearn's grader speak the course's language (their test names are the
    titles): it ships the catalogues, and its entry point chooses course.toml's language."""
    from autograder.delivery.gradescope import Gradescope
    from autograder.delivery.platform import grader_files

    shipped = {p.as_posix() for p in grader_files(COURSE)}
    assert {"autograder/locale/zh/LC_MESSAGES/autograder.po", "course/locale/zh/LC_MESSAGES/messages.po"} <= shipped
    source = tmp_path / "source"
    shutil.copytree(COURSE.locale, source / "course" / "locale")
    manifest = (ROOT / "course" / "course.toml").read_text(encoding="utf-8")
    (source / "course" / "course.toml").write_text(manifest.replace('language = "en"', 'language = "zh"', 1),
                                                    encoding="utf-8")
    platform, spoken = Gradescope(), []
    monkeypatch.setenv(platform.root_variable, str(tmp_path))
    monkeypatch.setattr(platform, "run", lambda root, course, sandbox=True: spoken.append(i18n.language()))
    try:
        platform.main()
    finally:
        i18n.choose(None)
    assert spoken == ["zh"]
