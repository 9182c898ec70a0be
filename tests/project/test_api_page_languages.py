"""The API page in every language it is written in: one contract, checked like the lessons (issue 45).

The API page (course.toml ``[paths] api``, ``docs/course-api.md``) is the contract; a translation sits
beside it as ``<stem>.<lang><suffix>`` (``docs/course-api.zh.md``, found by the release's
``translation()``, which ships it in the bundles of its language) and changes the prose only:

  * the same headings, and the same unit sections (``## N. `<file>` ``) in the same order;
  * the same rule ids (``[A3]``, as ``test_trace.py`` reads them) in the same order in each section;
  * the same fenced code blocks, byte for byte;
  * the same backticked text (names, signatures, shapes, code), whitespace aside, in the same order:
    in each rule (the text from the id before it up to its id, as ``test_trace.py`` counts it) and
    after a section's last id. Where a language's word order needs it (a condition put first), a
    rule may list its spans in another order: name it in ``REORDERED`` (none is, today); a span never
    moves to another rule;
  * the Chinese page writes each concept of ``course/lessons/glossary.toml`` with its one Chinese
    term, as the Chinese lessons do (``test_lesson_languages.py``): none of a concept's ``avoid``
    forms, and where the English section speaks of a concept (``CUES``), its term.

The bundle's README is translated the same way (``course/student_readme.<lang>.md``): the same
commands and placeholders, which ``test_bundle.py`` runs in each language.
"""
from __future__ import annotations

import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from autograder.core.manifest import load_course
from autograder.authoring.contract import translation
from autograder.grading import repro
from conftest import ROOT
from test_trace import HEADING, TAG

COURSE = load_course(ROOT)
API = COURSE.api
LANGS = ("zh",)  # the languages the page must be written in (the lessons' languages but English)
# Per language, the rules whose backticked text its word order puts in another order (same spans).
REORDERED: dict[str, set[str]] = {"zh": set()}
GLOSSARY = tomllib.loads((COURSE.lessons / "glossary.toml").read_text(encoding="utf-8"))
FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)
SPAN = re.compile(r"`([^`]+)`")
HEADING_LINE = re.compile(r"^(#{1,6}) ", re.M)
# Where the English prose of a section (its code spans aside) speaks of a glossary concept, the
# Chinese section writes the concept's term: English cue -> the glossary's `zh`.
CUES = {
    r"\bmask": "掩码",
    r"\bcache\b": "KV 缓存",
    r"\bkv heads?\b": "键/值头",
    r"\b(?:rotary|RoPE)\b": "旋转位置编码",
    r"\bsinusoidal\b": "正弦编码",
    r"\bkernels?\b": "内核",
    r"\btokens?\b": "token",
    r"\blayer norm\b": "LayerNorm",
    r"\bforward pass\b": "前向计算",
    r"\bfeed-forward\b": "前馈网络",
    r"\bcell state\b": "细胞状态",
}


def page(lang: str) -> Path:
    return API.with_name(f"{API.stem}.{lang}{API.suffix}")


def sections(text: str) -> list[tuple[str, str]]:
    """(name, text): the part before the first unit section ("general"), then each ``## N. `<file>` ``
    section by its file, as ``test_trace.py`` splits the page."""
    heads = list(HEADING.finditer(text))
    parts = [("general", text[: heads[0].start()] if heads else text)]
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return parts + [(h.group(1), text[h.start(): end]) for h, end in zip(heads, ends)]


def spans(text: str) -> list[str]:
    """The backticked text outside code blocks, whitespace collapsed (a span may wrap a line)."""
    return [" ".join(s.split()) for s in SPAN.findall(FENCE.sub("", text))]


def rules(text: str) -> list[tuple[str, list[str]]]:
    """(id, the spans of its rule) in order: a rule runs from the id before it up to its id; last,
    ("", the spans after the last id)."""
    found, start = [], 0
    for tag in TAG.finditer(text):
        found.append((tag.group(1) + tag.group(2), spans(text[start: tag.start()])))
        start = tag.end()
    return found + [("", spans(text[start:]))]


def _counted(a: list[str], b: list[str]) -> str:
    missing, extra = Counter(a) - Counter(b), Counter(b) - Counter(a)
    return "; ".join(filter(None, [missing and f"lacks {sorted(missing.elements())}",
                                   extra and f"adds {sorted(extra.elements())}"]))


def compare(english: Path, translated: Path, reordered: set[str] = frozenset()) -> list[str]:
    """What makes ``translated`` say another contract than ``english``: one line per difference
    (the rules in ``reordered`` may hold their backticked text in another order)."""
    en, other = english.read_text(encoding="utf-8"), translated.read_text(encoding="utf-8")
    name = translated.name
    problems = []
    levels = [[len(h) for h in HEADING_LINE.findall(FENCE.sub("", text))] for text in (en, other)]
    if levels[1] != levels[0]:
        problems.append(f"{name}: its headings (levels {levels[1]}) are not the English page's ({levels[0]})")
    en_sections, other_sections = sections(en), sections(other)
    if [s for s, _ in other_sections] != [s for s, _ in en_sections]:
        problems.append(f"{name}: sections {[s for s, _ in other_sections]}, the English page has "
                        f"{[s for s, _ in en_sections]}")
        return problems
    for (section, en_text), (_, text) in zip(en_sections, other_sections):
        where = f"{name}, section {section!r}"
        en_rules, its_rules = rules(en_text), rules(text)
        if [r for r, _ in its_rules] != [r for r, _ in en_rules]:  # (the last, "", is in both)
            problems.append(f"{where}: ids {[r for r, _ in its_rules]}, the English page has "
                            f"{[r for r, _ in en_rules]}")
        else:
            for (rule, en_spans), (_, its_spans) in zip(en_rules, its_rules):
                part = f"rule [{rule}]" if rule else "after the last id"
                if Counter(its_spans) != Counter(en_spans):
                    problems.append(f"{where}, {part}: its backticked text {_counted(en_spans, its_spans)}")
                elif its_spans != en_spans and rule not in reordered:
                    problems.append(f"{where}, {part}: its backticked text is in another order ({its_spans}, the "
                                    f"English page's {en_spans}); if word order needs it, add {rule!r} to REORDERED")
        if [m.group(0) for m in FENCE.finditer(text)] != [m.group(0) for m in FENCE.finditer(en_text)]:
            problems.append(f"{where}: its code blocks are not the English page's, byte for byte")
        if Counter(spans(text)) != Counter(spans(en_text)):
            problems.append(f"{where}: its backticked text {_counted(spans(en_text), spans(text))}")
    return problems


def glossary_problems(text: str, english: str | None = None) -> list[str]:
    """The glossary's concepts written with a rejected form; with ``english`` (the same section in
    English), the concepts it speaks of whose Chinese term is missing."""
    found = [f"{avoid!r} (write {concept['zh']!r}: {concept['en']})"
             for concept in GLOSSARY["concept"] for avoid in concept["avoid"] if avoid in text]
    if english is not None:
        prose = SPAN.sub("", FENCE.sub("", english))
        found += [f"the English speaks of {cue!r}: write {term!r}" for cue, term in CUES.items()
                  if re.search(cue, prose, re.I) and term not in text]
    return found


def test_every_language_has_its_page():
    """Each language the page must be written in has it, and the release picks it for that language."""
    for lang in LANGS:
        assert page(lang).is_file(), f"{page(lang).relative_to(ROOT)} is missing: translate {API.relative_to(ROOT)}"
        assert translation(API, lang) == page(lang)
    assert translation(API, "en") == API


@pytest.mark.parametrize("lang", LANGS)
def test_the_translation_says_the_same_contract(lang):
    """Same headings and sections, the same ids in each, the same code blocks and backticked text."""
    problems = compare(API, page(lang), REORDERED[lang])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("lang", LANGS)
def test_repro_reads_the_same_api_from_either_page(lang):
    """The functions, classes and methods ``repro`` admits, read from each unit's section, are the same."""
    en, other = dict(sections(API.read_text(encoding="utf-8"))), dict(sections(page(lang).read_text(encoding="utf-8")))
    for unit, spec in COURSE.units.items():
        assert repro.Api.parse(unit, other[spec.file]) == repro.Api.parse(unit, en[spec.file]), unit


def test_the_cues_name_the_glossarys_terms():
    terms = {concept["zh"] for concept in GLOSSARY["concept"]}
    assert set(CUES.values()) <= terms, f"not glossary terms: {set(CUES.values()) - terms}"


def test_the_chinese_page_uses_one_term_per_concept():
    """Each concept of the glossary has one Chinese name: no `avoid` form, and the term where the
    English section speaks of the concept."""
    en = dict(sections(API.read_text(encoding="utf-8")))
    found = [f"section {section!r}: {problem}" for section, text in sections(page("zh").read_text(encoding="utf-8"))
             for problem in glossary_problems(text, en.get(section))]
    assert not found, f"{page('zh').name}: " + "; ".join(found)


def test_the_checker_catches_a_missing_id_and_a_changed_code_block(tmp_path):
    """The comparison fails on a dropped id, a changed fenced block, a changed signature, a term."""
    block = "```python\nout = attention(q, k, v)  # (B, L, Ev)\n```\n"
    english, zh = API.read_text(encoding="utf-8"), page("zh").read_text(encoding="utf-8")
    english_page = tmp_path / API.name
    english_page.write_text(english + "\n" + block, encoding="utf-8")

    def check(text: str) -> list[str]:
        translated = tmp_path / page("zh").name
        translated.write_text(text, encoding="utf-8")
        return compare(english_page, translated)

    assert check(zh + "\n" + block) == []
    missing = check(zh.replace("[A4]", "", 1) + "\n" + block)
    assert any("'attention.py'" in p and "ids" in p for p in missing), missing
    changed = check(zh + "\n" + block.replace("(B, L, Ev)", "(B, Ev, L)"))
    assert any("code blocks" in p for p in changed), changed
    assert check(zh + "\n" + block.replace("```python\n", "```python\n\n")), "a code block differs by a blank line"
    signature = check(zh.replace("`scale` 默认为 `1 / sqrt(E)`", "`scale` 默认为 `1 / E`", 1) + "\n" + block)
    assert any("rule [A6]" in p and "'1 / sqrt(E)'" in p for p in signature), signature
    moved = check(zh.replace("[A5]", "", 1).replace("[A6]", "[A5] [A6]", 1) + "\n" + block)
    assert any("rule [A5]" in p for p in moved), "a span moved into another rule"
    swapped = zh.replace("`scale` 默认为 `1 / sqrt(E)`", "`1 / sqrt(E)` 是 `scale` 的默认值", 1) + "\n" + block
    assert any("rule [A6]" in p and "another order" in p for p in check(swapped)), "spans swapped in a rule"
    assert compare(english_page, tmp_path / page("zh").name, {"A6"}) == [], "unless the rule is REORDERED"
    assert check(zh.replace("## 3. `multi_head.py`", "## 3. `multihead.py`", 1) + "\n" + block)
    assert glossary_problems("它的遮罩") and glossary_problems("一个 KV 缓存", "the mask") \
        and not glossary_problems("因果掩码", "the causal mask")


@pytest.mark.parametrize("lang", LANGS)
def test_the_readme_is_translated_with_the_same_commands(lang):
    """The bundle's README in ``lang`` gives the same commands and placeholders as the English one."""
    readme = COURSE.student_readme
    translated = translation(readme, lang)
    assert translated != readme, f"{readme.with_name(f'{readme.stem}.{lang}{readme.suffix}').relative_to(ROOT)} is missing"
    en, other = readme.read_text(encoding="utf-8"), translated.read_text(encoding="utf-8")
    assert spans(other) == spans(en), f"{translated.name}: its commands differ: {_counted(spans(en), spans(other))}"
    placeholders = re.compile(r"\{(\w+)\}")
    assert placeholders.findall(other) == placeholders.findall(en)
    assert [line.split(".")[0] for line in other.splitlines() if re.match(r"\d+\. ", line)] == \
        [line.split(".")[0] for line in en.splitlines() if re.match(r"\d+\. ", line)], "the same numbered steps"
    assert glossary_problems(other) == []


def test_a_notebook_quotes_the_page_of_its_language():
    """The contract cell of a unit's notebook is its section of the page in the notebook's language."""
    from autograder.authoring.contract import unit_section
    from autograder.authoring.notebook import build_notebook

    course = load_course(ROOT)
    for lang in ("en", "zh"):
        text = "\n".join(c.source for c in build_notebook(course, "attention", lang=lang).cells)
        body = unit_section(course, "attention", lang).split("\n", 1)[1].strip()
        assert body[:200] in text, lang
        assert translation(API, lang).name in text, lang
