"""Messages in the student's language (``autograder/core/i18n.py``): the catalogues hold exactly
what the sources write, every message has its Chinese, a real bug's grade reads in Chinese under
``--lang zh`` (message and hint) and in English as before without it, and nothing in the sandbox's
box needs Babel.

The catalogues are the ``.po`` files in git: the engine's (``autograder/locale``) and the course's
(course.toml ``[paths] locale``). ``attn-course build`` writes them from the sources
(``autograder/authoring/catalogue.py``, Babel's extraction plus the suites' advice).
"""
from __future__ import annotations

import ast
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import mutants
from conftest import ROOT, attn_course, grade_json
from autograder.authoring import catalogue
from autograder.core import i18n
from autograder.core.manifest import load_course

COURSE = load_course(ROOT)
GLOSSARY = tomllib.loads((COURSE.lessons / "glossary.toml").read_text(encoding="utf-8"))
CJK = re.compile(r"[\u3400-\u9fff]")
# What a message writes that its translation must write too: its str.format fields and the
# viewer's own __MARKERS__.
KEPT = re.compile(r"\{[^{}]*\}|__[A-Z]+__")
# A mutant of unit 2 whose written hint fires (tests/mutants/attention.toml names it).
UNIT, MUTANT = "attention", "no_scale"
HINT = re.compile(r"Hint: (.+?)(?= \(counterexample:|\n|\Z)", re.S)


def catalogues() -> list[Path]:
    return [i18n.catalogue_path(locale, lang, domain) for domain, locale, _ in catalogue.domains(COURSE)
            for lang in catalogue.languages(locale)]


@pytest.fixture
def zh():
    """This process speaks Chinese for the test, English again after it."""
    i18n.choose("zh", COURSE.locale)
    yield
    i18n.choose(None)


# -- (a) the catalogues are what the sources write ---------------------------------------------------

def stale_report(course) -> str:
    return "\n".join(f"{path}: missing {missing}, no source writes {extra}"
                     for path, missing, extra in catalogue.differences(course))


def test_the_catalogues_hold_what_the_sources_write():
    """Babel's extraction from the sources equals each catalogue's msgids (`attn-course build` rewrites them)."""
    assert {"zh"} <= set(catalogue.languages(i18n.ENGINE_LOCALE)) and {"zh"} <= set(catalogue.languages(COURSE.locale))
    report = stale_report(COURSE)
    assert not report, "stale message catalogues (run `attn-course build`, then translate the new msgstrs):\n" + report


def test_a_stale_catalogue_is_named_with_what_it_lacks_and_what_it_has_too_many(tmp_path):
    locale = tmp_path / "locale"
    shutil.copytree(COURSE.locale, locale)
    po = i18n.catalogue_path(locale, "zh", i18n.COURSE_DOMAIN)
    held = catalogue.read(po)
    dropped = next(m.id for m in held if m.id)
    held.delete(dropped)
    held.add("an advice no source writes any more", "没有来源再写的建议")
    po.write_bytes(catalogue.text_of(held))
    report = stale_report(dataclasses.replace(COURSE, locale=locale))
    assert dropped in report and "an advice no source writes any more" in report, report


def test_the_suites_advice_is_extracted_without_touching_the_tests(tmp_path):
    """The ``hints`` method finds (wrong answer, advice) pairs: literals, f-strings (named fields)
    and module constants, besides the keyword calls; a pair of names is not advice."""
    suite = tmp_path / "test_suite.py"
    suite.write_text(
        'TILE = "query head h shares kv head h // G: consecutive heads."\n'
        'LABEL = N_("a marked label for the catalogue")\n'
        'def test_x(subject):\n'
        '    hints = [(a, "the scale is 1/sqrt(E), not 1/E."), (b, f"the `eps` argument ({eps:g}) was ignored."),\n'
        '             (c, TILE), (d, "norm2"), (e, f"apply {drop.name} to the {sub} output now.")]\n', encoding="utf-8")
    found = catalogue.extract(tmp_path, [("**.py", "hints")], tmp_path)
    assert set(found) == {"query head h shares kv head h // G: consecutive heads.", "a marked label for the catalogue",
                          "the scale is 1/sqrt(E), not 1/E.", "the `eps` argument ({eps}) was ignored.",
                          "apply {name} to the {sub} output now."}
    assert found["the scale is 1/sqrt(E), not 1/E."] == ["test_suite.py"]


def test_titles_and_labels_are_extracted_and_code_is_not(tmp_path):
    """A test's title (its docstring's first line) and a value's label that reads as prose
    (``what=...``, fields named) are messages; a label that is only code is not."""
    suite = tmp_path / "test_suite.py"
    suite.write_text(
        'def test_x(subject):\n'
        '    """the weights sum to 1 over the keys\n\n    More text, not the title."""\n'
        '    assert_close(a, b, what="weights")\n'
        '    assert_close(a, b, what=f"output with dropout_p={p} (seed {seed})")\n'
        '    assert_close(a, b, what="split_heads(x, 2)")\n'
        '    assert_close(a, b, what=f"LayerNorm({d}, eps={eps})(x)")\n'
        'def helper():\n    """not a test"""\n', encoding="utf-8")
    found = catalogue.extract(tmp_path, [("**.py", "hints")], tmp_path)
    assert set(found) == {"the weights sum to 1 over the keys", "weights", "output with dropout_p={p} (seed {seed})"}


def test_every_property_title_has_its_chinese():
    """Every graded test's title, under its id: the catalogue holds it with its Chinese, so check,
    the reports and the notebooks show it in Chinese (the id, test_x.py::test_y, is the same)."""
    table = {m.id: m.string for m in catalogue.read(i18n.catalogue_path(COURSE.locale, "zh", i18n.COURSE_DOMAIN))}
    missing = []
    for path in sorted([*COURSE.hidden_tests.glob("test_*.py"), *COURSE.public_tests.glob("test_*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                title = catalogue.property_title(node)
                # A title that is code alone (no prose word) may read the same in Chinese.
                if title and not (table.get(title) and (CJK.search(table[title]) or not catalogue.reads_as_words(title))):
                    missing.append(f"{path.name}::{node.name}: {title!r}")
    assert not missing, "titles with no Chinese (run `attn-course build`, then translate):\n" + "\n".join(missing)


# -- (b) every message has its Chinese -----------------------------------------------------------

@pytest.mark.parametrize("path", catalogues(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_message_is_translated_keeping_its_placeholders(path):
    wrong = []
    for message in catalogue.read(path):
        if not message.id:
            continue
        if not message.string:
            wrong.append(f"{message.id!r}: no translation")
        elif sorted(KEPT.findall(message.id)) != sorted(KEPT.findall(message.string)):
            wrong.append(f"{message.id!r}: placeholders {sorted(KEPT.findall(message.id))} became "
                         f"{sorted(KEPT.findall(message.string))} in {message.string!r}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", [p for p in catalogues() if p.parent.parent.name == "zh"],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_chinese_uses_one_term_per_concept(path):
    """The lessons' glossary holds for the messages too: none of a concept's `avoid` forms."""
    found = [f"{m.string!r} writes {avoid!r} (write {concept['zh']!r}: {concept['en']})"
             for m in catalogue.read(path) if m.id for concept in GLOSSARY["concept"]
             for avoid in concept["avoid"] if avoid in m.string]
    assert not found, "\n".join(found)


# -- translating, and English as the identity -----------------------------------------------------

def test_english_is_the_identity_and_reads_no_catalogue():
    i18n.choose(None)
    text = "the worker ran out of memory (its limit is 2 GiB)"
    assert i18n.language() == "en" and i18n._(text) is text and i18n.translate_text(text) is text
    assert "table" not in i18n._loaded


def test_a_finished_english_text_is_recognised_with_its_values(zh):
    """What the box says in English, and a suite's f-string advice, come out in Chinese with the same
    values, nested messages translated in turn; an unknown text is left as it is."""
    def zh_of(msgid):
        return i18n._(msgid)

    timed_out = i18n.translate_text("importing attention.py timed out after 2.5 s")
    assert timed_out == zh_of("importing {file} timed out after {seconds:g} s").format(file="attention.py", seconds=2.5)
    nested = i18n.translate_text("timed out after 10 s earlier in this test")
    assert nested == zh_of("{problem} earlier in this test").format(problem=zh_of("timed out after {seconds:g} s").format(
        seconds=10))
    advice = i18n.translate_text("the `eps` argument (0.001) was ignored.")
    assert advice == zh_of("the `eps` argument ({eps}) was ignored.").format(eps="0.001") and CJK.search(advice)
    assert i18n.translate_text("a student's own words") == "a student's own words"


def test_an_unknown_language_is_refused():
    with pytest.raises(ValueError, match="no messages in 'xx'"):
        i18n.choose("xx", COURSE.locale)
    assert i18n.language() == "en"


def test_the_box_translates_nothing_and_needs_no_babel():
    """core/ and sandbox/inside/ (what the box holds) import, and speak English, where Babel cannot
    be imported: Babel is imported only once a language other than English is chosen."""
    code = ("import sys; sys.modules['babel'] = None\n"
            "import pkgutil, importlib, autograder.core, autograder.sandbox.inside as inside\n"
            "for pkg in (autograder.core, inside):\n"
            "    for m in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + '.'):\n"
            "        importlib.import_module(m.name)\n"
            "from autograder.core import i18n, protocol\n"
            "e = protocol.StudentError('Timeout', 'timed out after 3 s', 'attention.py line 2')\n"
            "print(e.describe()); print(i18n.translate_text('the worker ran out of memory'))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["timed out after 3 s (attention.py line 2)", "the worker ran out of memory"]


def test_the_viewer_page_speaks_the_language(zh):
    from course import viz

    page = viz.render_html(["a", "b"], [[0.5, 0.5], [0.5, 0.5]])
    assert '<html lang="zh">' in page and i18n._("No token selected.") in page
    assert "No token selected." not in page and i18n._("Attention viewer") in page
    i18n.choose(None)
    english = viz.render_html(["a", "b"], [[0.5, 0.5], [0.5, 0.5]])
    assert '<html lang="en">' in english and "No token selected." in english and "average of heads" in english


# -- (c), (d) a real bug's grade, in Chinese and in English ----------------------------------------

@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, dict]:
    """The mutant graded by the CLI (in process, as the hint tests grade it), in English and in Chinese."""
    spec = COURSE.units[UNIT]
    mutant = next(m for m in mutants.load(UNIT) if m["name"] == MUTANT)
    folder = mutants.write(spec.file, mutant, tmp_path_factory.mktemp("i18n") / MUTANT)
    return {"en": grade_json([folder], [UNIT], "--no-sandbox")[0]["units"][UNIT],
            "zh": grade_json([folder], [UNIT], "--no-sandbox", "--lang", "zh")[0]["units"][UNIT]}


def test_a_real_bug_reads_in_chinese_message_and_hint(graded, zh):
    english = {t["id"]: t for t in graded["en"]["tests"]}
    chinese = {t["id"]: t for t in graded["zh"]["tests"]}
    assert english.keys() == chinese.keys()
    # The language changes no grade.
    assert [(t["id"], t["score"], t["status"]) for t in graded["en"]["tests"]] == \
        [(t["id"], t["score"], t["status"]) for t in graded["zh"]["tests"]]
    hinted = {test_id: HINT.search(t["output"])[1] for test_id, t in english.items()
              if t["status"] == "failed" and HINT.search(t["output"])}
    assert hinted, "the mutant's hint no longer fires in English"
    for test_id, advice in hinted.items():
        output = chinese[test_id]["output"]
        translated = i18n.translate_text(advice)
        assert translated != advice and CJK.search(translated), f"{advice!r} has no Chinese in the catalogue"
        assert i18n._(". Hint: {advice}").format(advice=translated) in output, output
        assert advice not in output and "Hint:" not in output and "counterexample" not in output, output
    failed = [t["output"] for t in chinese.values() if t["status"] == "failed"]
    assert failed and all(CJK.search(o) for o in failed), failed


def test_english_output_is_as_it_was(graded):
    """Without --lang (course.toml says en) a failure reads in English: the hint, the counterexample."""
    failed = [t["output"] for t in graded["en"]["tests"] if t["status"] == "failed"]
    assert failed and not any(CJK.search(o) for o in failed)
    assert any("Hint: did you forget to divide the scores by sqrt(d_k)?" in o for o in failed), failed
    assert any("(counterexample: " in o for o in failed)


def test_check_on_the_stubs_says_not_implemented_in_chinese(zh):
    """The stubs' status in the check table, in the language asked for (and the table's headings)."""
    proc = attn_course("check", "--unit", UNIT, "--lang", "zh")
    assert i18n._("not implemented yet") in proc.stdout and "not implemented yet" not in proc.stdout, proc.stdout
    assert i18n._("Property") in proc.stdout
    english = attn_course("check", "--unit", UNIT, "--format", "json")
    report = json.loads(english.stdout)
    assert "not implemented yet" in report["units"][UNIT]["tests"][0]["output"]


def test_an_unknown_lang_option_exits_2():
    proc = attn_course("check", "--unit", UNIT, "--lang", "xx", check=False)
    assert proc.returncode == 2 and "no messages in 'xx'" in proc.stderr, proc.stderr


# -- the student bundle -----------------------------------------------------------------------------

def test_the_bundles_catalogue_holds_no_advice_only_the_hidden_suites_give(tmp_path):
    written = catalogue.for_students(COURSE, tmp_path / "locale", COURSE.hidden_tests)
    assert written
    source = catalogue.read(i18n.catalogue_path(COURSE.locale, "zh", i18n.COURSE_DOMAIN))
    hidden = COURSE.hidden_tests.relative_to(ROOT).as_posix() + "/"
    hidden_only = {m.id for m in source if m.id and all(f.startswith(hidden) for f, _ in m.locations)}
    shipped = {m.id: m.string for m in catalogue.read(written[0]) if m.id}
    assert hidden_only and not hidden_only & set(shipped)
    assert shipped and all(shipped.values()) and hidden not in written[0].read_text(encoding="utf-8")


def test_no_test_function_calls_the_translation():
    """The suites' advice is translated where it is shown: no test function wraps it in a call (its
    source, hence its hypothesis examples, stays as it was)."""
    calls = []
    for path in sorted([*COURSE.hidden_tests.glob("test_*.py"), *COURSE.public_tests.glob("test_*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                calls += [f"{path.name}::{node.name}" for n in ast.walk(node) if isinstance(n, ast.Call)
                          and isinstance(n.func, ast.Name) and n.func.id in catalogue.KEYWORDS]
    assert not calls, calls
