"""The student's language everywhere (issue 58): the command line speaks Chinese without a word of
English its catalogues translate, and a notebook's answer cells are checked as the unit file they make
up.

* **Notebooks** run in Chinese in test_lesson_notebooks.py: the zh bundle's lessons, executed headless
  on the stubs and on finished code, print and draw no English (:mod:`zh_text`'s rule, this module's
  before). A lesson written ``--lang zh`` by a course whose course.toml says English differs from
  them only where its setup cell names the language (test_lesson_languages.py), and the kernel speaks
  the language that cell names.
* **The command line** in Chinese: check's table and its property titles, --help (argparse's own
  words too), an unknown unit, a bad ``repro --example``.
* **One place to write code**: ``check --path NOTEBOOK`` checks the file its answer cells make up.
"""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import ROOT, attn_course
from zh_text import CJK, english
from autograder.authoring import answers
from autograder.core import i18n
from autograder.core.manifest import load_course

nbformat = pytest.importorskip("nbformat")

COURSE = load_course(ROOT)


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
