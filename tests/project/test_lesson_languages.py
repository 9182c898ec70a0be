"""The lessons in every language: the same code cells, a claims box, questions, one term per
concept, and an answer key that stays with the instructors.

Each unit has a lesson in every language folder of ``course/lessons`` (English and Chinese at
least); a translation changes the prose only, so the placeholder lines (the code cells) are the
same, in the same order. Every lesson has a "claims checked" box (a blockquote starting
``> **Claims checked**``, in the lesson's language: ``course/lessons/glossary.toml``'s
``[markers]``) and 2-3 conceptual questions (markdown blocks starting ``**Question N.**``, the
word in the lesson's language), each followed in the notebooks by an nbgrader manually graded
answer cell, whose answers are in ``course/answer_key/<lang>/<unit>.md``: a file the student
bundle (``attn-course release``) must not hold. The Chinese lessons write each concept the
glossary lists with its one Chinese term. The demos are numbered once across the course, in
the order the lessons show them, and every language gives each the same number.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autograder.authoring.lesson import languages  # noqa: E402
from course import lessons  # noqa: E402

LANGUAGES = ("en", "zh")
UNITS = list(lessons.lesson_course().units)
ANSWER_KEY = ROOT / "course" / "answer_key"
GLOSSARY = tomllib.loads((lessons.HERE / "glossary.toml").read_text(encoding="utf-8"))
MARKERS = GLOSSARY["markers"]


def question_marker(lang: str) -> re.Pattern:
    return re.compile(rf"^\*\*{re.escape(MARKERS[lang]['question'])} (\d+)\.\*\*", re.M)


def claims_marker(lang: str) -> re.Pattern:
    return re.compile(rf"^> \*\*{re.escape(MARKERS[lang]['claims'])}\*\*", re.M)


QUESTION = question_marker("en")
CLAIMS = claims_marker("en")
DEMO_HEADING = {"en": re.compile(r"^## Demo (\d+)\b", re.M), "zh": re.compile(r"^## 演示 (\d+)\b", re.M)}
DEMO_MENTION = {"en": re.compile(r"\b[Dd]emo (\d+)\b"), "zh": re.compile(r"演示 ?(\d+)")}


def text(unit: str, lang: str) -> str:
    return lessons.lesson_path(unit, lang).read_text(encoding="utf-8")


def cells(unit: str, lang: str) -> list[tuple[str, str]]:
    """The lesson's placeholders (its code cells), in order."""
    return [part for part in lessons.parse(text(unit, lang)) if part[0] != "markdown"]


def lesson_languages() -> list[str]:
    return languages(lessons.lesson_course())


def questions(source: str, lang: str = "en") -> list[int]:
    return [int(n) for n in question_marker(lang).findall(source)]


def test_every_language_has_every_lesson():
    found = lesson_languages()
    assert set(LANGUAGES) <= set(found), f"lesson languages: {found}"
    for lang in found:
        missing = [unit for unit in UNITS if not lessons.lesson_path(unit, lang).is_file()]
        assert not missing, f"course/lessons/{lang}/ lacks {', '.join(f'{u}.md' for u in missing)}"


@pytest.mark.parametrize("unit", UNITS)
def test_the_languages_have_the_same_code_cells(unit):
    english = cells(unit, "en")
    for lang in lesson_languages():
        assert cells(unit, lang) == english, f"{lang}/{unit}.md: its placeholder lines differ from en/{unit}.md"


@pytest.mark.parametrize("unit", UNITS)
def test_the_rendered_notebooks_share_their_code(unit):
    """Rendered (the engine's notebook, as nbgrader gets it), every language has the same code cells,
    but for the language the setup cell names (``LANG``, which the kernel prints in)."""
    def code(lang):
        cells = [c.source for c in lessons.notebook(unit, lang).cells if c.cell_type == "code"]
        assert any(f'LANG = "{lang}"' in c for c in cells), f"{lang}/{unit}: no setup cell names the language"
        return [re.sub(r'^LANG = "[^"]*"', 'LANG = "..."', c, flags=re.M) for c in cells]

    english = code("en")
    for lang in lesson_languages():
        assert code(lang) == english, f"{unit}: the {lang} notebook's code cells differ from the English ones"


@pytest.mark.parametrize("unit", UNITS)
def test_the_rendered_notebooks_share_their_grade_cells(unit):
    """Every language's notebook has the same nbgrader cells, one gradebook for all: the code, the
    tests, and after each question its manually graded answer (markdown)."""
    def graded(lang):
        return [(c.cell_type, c.metadata["nbgrader"]) for c in lessons.notebook(unit, lang).cells if "nbgrader" in c.metadata]

    english = graded("en")
    written = [meta["grade_id"] for kind, meta in english if kind == "markdown" and meta["grade"] and meta["solution"]]
    assert len(written) == len(questions(text(unit, "en"))), f"{unit}: one written answer per question"
    for lang in lesson_languages():
        assert graded(lang) == english, f"{unit}: the {lang} notebook's nbgrader cells differ from the English ones"


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("unit", UNITS)
def test_a_lesson_has_its_claims_box_and_questions(unit, lang):
    source = text(unit, lang)
    claims, word = claims_marker(lang), MARKERS[lang]["question"]
    assert len(claims.findall(source)) == 1, f"{lang}/{unit}.md needs one '> **{MARKERS[lang]['claims']}**' box"
    box = source[claims.search(source).start():].split("\n\n", 1)[0]
    assert box.count("\n> ") >= 3, f"{lang}/{unit}.md: the claims box should list the seeds' numbers"
    numbers = questions(source, lang)
    assert 2 <= len(numbers) <= 3 and numbers == list(range(1, len(numbers) + 1)), (
        f"{lang}/{unit}.md: questions numbered {numbers}, want 2-3 from **{word} 1.**")
    if lang != "en":
        assert not QUESTION.search(source) and not CLAIMS.search(source), (
            f"{lang}/{unit}.md: its question and claims markers are in English")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_notebooks_find_the_questions_in_each_language(lang):
    """The word the glossary gives a question is the one the notebooks look for (notebook.toml)."""
    from autograder.authoring.notebook import notebook_text

    assert notebook_text(lessons.lesson_course(), lang)["question"] == MARKERS[lang]["question"]


@pytest.mark.parametrize("unit", UNITS)
def test_the_chinese_lessons_use_one_term_per_concept(unit):
    """Each concept of the glossary has one Chinese name: none of its `avoid` forms appears."""
    source = text(unit, "zh")
    found = [f"{avoid!r} (write {concept['zh']!r}: {concept['en']})"
             for concept in GLOSSARY["concept"] for avoid in concept["avoid"] if avoid in source]
    assert not found, f"zh/{unit}.md: " + "; ".join(found)


def test_the_glossary_forms_are_distinct():
    """No concept's term is another's form to avoid (the test above would then refuse it)."""
    terms = {concept["zh"] for concept in GLOSSARY["concept"]}
    avoided = {avoid for concept in GLOSSARY["concept"] for avoid in concept["avoid"]}
    assert not {a for a in avoided for t in terms if a in t}, "a term contains a form to avoid"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_demos_are_numbered_once_across_the_course(lang):
    """Demo N is the Nth demo the lessons show, in course order, in every language; every
    mention of a demo names one that exists."""
    count = 0
    for unit in UNITS:
        source = text(unit, lang)
        headings = DEMO_HEADING[lang].finditer(source)
        placeholders = re.finditer(r"^\{\{\s*demo:", source, re.M)
        for heading, placeholder in zip(headings, placeholders, strict=True):
            count += 1
            assert int(heading[1]) == count, f"{lang}/{unit}.md: demo heading {heading[1]}, want {count}"
            between = source[heading.end():placeholder.start()]
            assert not DEMO_HEADING[lang].search(between) and heading.start() < placeholder.start()
    for unit in UNITS:
        mentioned = {int(n) for n in DEMO_MENTION[lang].findall(text(unit, lang))}
        assert mentioned <= set(range(1, count + 1)), f"{lang}/{unit}.md mentions demos {sorted(mentioned)}"


@pytest.mark.parametrize("unit", UNITS)
def test_the_languages_ask_the_same_questions(unit):
    assert questions(text(unit, "zh"), "zh") == questions(text(unit, "en"))


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("unit", UNITS)
def test_the_answer_key_answers_every_question(unit, lang):
    key = ANSWER_KEY / lang / f"{unit}.md"
    assert key.is_file(), f"{key.relative_to(ROOT)} is missing"
    answers = key.read_text(encoding="utf-8")  # numbered in its own language, as its lessons are
    assert questions(answers, lang) == questions(text(unit, lang), lang), (
        f"{key.relative_to(ROOT)} should answer each question of {lang}/{unit}.md, in order")


def test_the_answer_key_is_not_in_the_student_bundle(tmp_path):
    bundle = tmp_path / "bundle"
    command = Path(sys.executable).with_name("attn-course")
    proc = subprocess.run([str(command), "release", str(bundle)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shipped = [p for p in bundle.rglob("*") if p.is_file()]
    assert not [p for p in shipped if "answer_key" in p.relative_to(bundle).as_posix()]
    keys = {p.read_bytes() for p in ANSWER_KEY.rglob("*.md")}
    assert keys and not [p for p in shipped if p.read_bytes() in keys], "an answer key was copied into the bundle"
    for lang in LANGUAGES:  # while the lessons themselves ship, in every language
        assert all((bundle / "course" / "lessons" / lang / f"{unit}.md").is_file() for unit in UNITS)
