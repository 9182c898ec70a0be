"""The lessons in every language: the same code cells, a claims box, questions, and an answer key
that stays with the instructors.

Each unit has a lesson in every language folder of ``course/lessons`` (English and Chinese at
least); a translation changes the prose only, so the placeholder lines (the code cells) are the
same, in the same order. Every lesson has a "claims checked" box (a blockquote starting
``> **Claims checked**``) and 2-3 conceptual questions (markdown blocks starting
``**Question N.**``), each followed in the notebooks by an nbgrader manually graded answer cell,
whose answers are in ``course/answer_key/<lang>/<unit>.md``: a file the student bundle
(``attn-course release``) must not hold.
"""
from __future__ import annotations

import re
import subprocess
import sys
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
QUESTION = re.compile(r"^\*\*Question (\d+)\.\*\*", re.M)
CLAIMS = re.compile(r"^> \*\*Claims checked\*\*", re.M)


def text(unit: str, lang: str) -> str:
    return lessons.lesson_path(unit, lang).read_text(encoding="utf-8")


def cells(unit: str, lang: str) -> list[tuple[str, str]]:
    """The lesson's placeholders (its code cells), in order."""
    return [part for part in lessons.parse(text(unit, lang)) if part[0] != "markdown"]


def lesson_languages() -> list[str]:
    return languages(lessons.lesson_course())


def questions(source: str) -> list[int]:
    return [int(n) for n in QUESTION.findall(source)]


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
    """Rendered (the engine's notebook, as nbgrader gets it), every language has the same code cells."""
    def code(lang):
        return [c.source for c in lessons.notebook(unit, lang).cells if c.cell_type == "code"]

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
    assert len(CLAIMS.findall(source)) == 1, f"{lang}/{unit}.md needs one '> **Claims checked**' box"
    box = source[CLAIMS.search(source).start():].split("\n\n", 1)[0]
    assert box.count("\n> ") >= 3, f"{lang}/{unit}.md: the claims box should list the seeds' numbers"
    numbers = questions(source)
    assert 2 <= len(numbers) <= 3 and numbers == list(range(1, len(numbers) + 1)), (
        f"{lang}/{unit}.md: questions numbered {numbers}, want 2-3 from **Question 1.**")


@pytest.mark.parametrize("unit", UNITS)
def test_the_languages_ask_the_same_questions(unit):
    assert questions(text(unit, "zh")) == questions(text(unit, "en"))


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("unit", UNITS)
def test_the_answer_key_answers_every_question(unit, lang):
    key = ANSWER_KEY / lang / f"{unit}.md"
    assert key.is_file(), f"{key.relative_to(ROOT)} is missing"
    assert questions(key.read_text(encoding="utf-8")) == questions(text(unit, lang)), (
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
