"""From the API page to the tests and back (issue 44): every rule has a property, every property a rule.

The scheme, which CONTRIBUTING.md ("Writing a unit's tests") states for authors:

  * **Ids on the page.** Each rule sentence of the API page (course.toml ``[paths] api``), a statement a
    student's code must satisfy (a name, a signature, a shape, a mask convention, a default, a precision,
    an error), ends with its id in brackets: ``[A3]``, a letter and a number. The page's opening part and its
    general rules (everything before the first ``## `` heading) use ``G``; each unit's section uses one
    letter of its own (R, A, M, P, T, E for units 1 to 6), never another section's. An id names the text
    from the id before it (or from the start of its bullet or paragraph) up to it. Ids are never reused:
    a new rule takes the next free number. Text without an id explains; what a unit may call and use
    (forbidden functions, kernel families, the allow-list) is the grader's to enforce, before any test
    runs, and carries no id.
  * **Citations in the tests.** Every graded test of the hidden and public suites (every test of the
    rubric, :func:`autograder.authoring.rubric.rubrics`: what the grading plugin collects) names the ids
    it checks in a comment right under its docstring::

        def test_scale_is_one_over_sqrt_dim(subject, ...):
            \"\"\"the default scale is 1/sqrt(E): ...\"\"\"
            # Checks: A6.

    A comment, not a docstring line: hypothesis derives a derandomized test's examples from its source,
    docstring included and comments excluded, so citing a rule never changes a property's examples.

This module fails when an id has no citing test, a test cites no id, or a citation names an id the page
does not have (or the page's ids break the scheme: an id twice, two letters in one section, one letter in
two), and prints the trace, per unit a table of id, sentence and tests: on failure, with
``pytest tests/project/test_trace.py -s``, or with ``python tests/project/test_trace.py``. An id written in
backticks, `` `[A3]` ``, is an example, not an id.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograder.authoring.rubric import rubrics
from autograder.core.manifest import load_course
from conftest import ROOT

COURSE = load_course(ROOT)
TAG = re.compile(r"(?<!`)\[([A-Z])(\d+)\](?!`)")  # `[A3]`, in backticks, is an example
HEADING = re.compile(r"^## \d+\. `([^`]+)`", re.M)
CITATION = re.compile(r"^\s*#\s*Checks:(.*)$")
CITED = re.compile(r"^\s*([A-Z]\d+(?:, [A-Z]\d+)*)\.?\s*$")
GENERAL = "general"  # the page before its first unit section


@dataclass
class Rule:
    id: str
    section: str  # "general" or the unit's name
    sentence: str
    tests: list[str] = field(default_factory=list)


@dataclass
class Trace:
    rules: dict[str, Rule]  # in page order
    tests: dict[str, tuple[str, list[str]]]  # "file::test" -> (unit, ids cited)
    problems: list[str]


def _sections(page: str, files: dict[str, str]) -> list[tuple[str, str]]:
    """(section, its text): the general part, then each ``## N. `file` `` section by its unit's name."""
    heads = list(HEADING.finditer(page))
    parts = [(GENERAL, page[: heads[0].start()] if heads else page)]
    ends = [h.start() for h in heads[1:]] + [len(page)]
    for head, end in zip(heads, ends):
        parts.append((files.get(head.group(1), head.group(1)), page[head.start(): end]))
    return parts


def _block_start(text: str, at: int) -> int:
    """Where the bullet or paragraph holding offset ``at`` begins."""
    start = offset = 0
    for line in text[:at].splitlines(keepends=True):
        if line.lstrip().startswith("- "):  # a bullet begins here
            start = offset
        offset += len(line)
        if not line.strip() or line.startswith("#"):  # a blank line or a heading: the next line begins one
            start = offset
    return start


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text.lstrip("- ").strip()


def page_rules(page: str, files: dict[str, str], problems: list[str]) -> dict[str, Rule]:
    """The page's ids in order, with the text each names; what breaks the scheme goes to ``problems``."""
    rules: dict[str, Rule] = {}
    owner: dict[str, str] = {}  # letter -> section
    for section, text in _sections(page, files):
        letters, previous = set(), 0
        for tag in TAG.finditer(text):
            rule_id, letter = tag.group(1) + tag.group(2), tag.group(1)
            start = max(previous, _block_start(text, tag.start()))
            previous = tag.end()
            letters.add(letter)
            if rule_id in rules:
                problems.append(f"the id [{rule_id}] appears twice on the page")
                continue
            if owner.setdefault(letter, section) != section:
                problems.append(f"[{rule_id}] in section {section!r} uses the letter of section {owner[letter]!r}")
            rules[rule_id] = Rule(rule_id, section, _sentence(text[start: tag.start()]))
        if len(letters) > 1:
            problems.append(f"section {section!r} mixes the letters {sorted(letters)}: one letter per section")
    return rules


def citations(path: Path, graded: dict[str, str], problems: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Each graded test of ``path`` -> (its unit, the ids its ``# Checks:`` comment names).
    ``graded``: the rubric's tests, test id ("<file>::<function>") -> unit."""
    source = path.read_text(encoding="utf-8")
    lines, tree = source.splitlines(), ast.parse(source, str(path))
    found = {}
    for node in tree.body:
        name = f"{path.name}::{getattr(node, 'name', '')}"
        if not (isinstance(node, ast.FunctionDef) and name in graded):
            continue
        unit = graded[name]
        first = node.body[0]
        has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
        # The comment lines right under the docstring (between it and the next statement).
        below = range(first.end_lineno, node.body[1].lineno - 1) if has_doc and len(node.body) > 1 else range(0)
        comments = [m.group(1) for i in below if (m := CITATION.match(lines[i]))]
        ids: list[str] = []
        if not comments:
            problems.append(f"{name} cites no rule: add '# Checks: <ids>.' right under its docstring")
        elif not (m := CITED.match(comments[0])) or len(comments) > 1:
            problems.append(f"{name}: unreadable citation {'; '.join(comments)!r} (write '# Checks: A3, A4.')")
        else:
            ids = m.group(1).split(", ")
        found[name] = (unit, ids)
    unread = sorted(t for t in graded if t.startswith(f"{path.name}::") and t not in found)
    problems += [f"{name}: no function of that name at the top of {path.name}, whose comment could cite" for name in unread]
    return found


def trace(page: Path, folders: list[Path], files: dict[str, str], graded: dict[str, str]) -> Trace:
    """The trace between ``page`` and the graded tests in ``folders`` (``files``: unit file -> unit;
    ``graded``: the rubric's test ids -> unit)."""
    problems: list[str] = []
    rules = page_rules(page.read_text(encoding="utf-8"), files, problems)
    tests: dict[str, tuple[str, list[str]]] = {}
    for folder in folders:
        for path in sorted(folder.glob("test_*.py")):
            tests.update(citations(path, graded, problems))
    for name, (_, ids) in tests.items():
        for rule_id in ids:
            if rule_id in rules:
                rules[rule_id].tests.append(name)
            else:
                problems.append(f"{name} cites [{rule_id}], which the page does not have")
    problems += [f"[{r.id}] ({r.section}) has no test: {r.sentence[:100]}" for r in rules.values() if not r.tests]
    return Trace(rules, tests, problems)


def _short(found: Trace, name: str, section: str) -> str:
    """A test as its section's table names it: its unit when another's, "(public)" when public."""
    unit, test = found.tests[name][0], name.split("::")[1]
    return ("" if unit == section else f"{unit}/") + test + ("" if "_properties" in name else " (public)")


def table(found: Trace, width: int = 110) -> str:
    """Per section (general, then each unit), a table of id, sentence and the tests that cite it."""
    out = []
    for section in dict.fromkeys(r.section for r in found.rules.values()):
        rules = [r for r in found.rules.values() if r.section == section]
        out += [f"## {section}: {len(rules)} rules", "", "| id | sentence | tests |", "|---|---|---|"]
        for rule in rules:
            sentence = rule.sentence if len(rule.sentence) <= width else rule.sentence[: width - 3] + "..."
            tests = ", ".join(_short(found, name, section) for name in rule.tests)
            out.append(f"| {rule.id} | {sentence.replace('|', '/')} | {tests or '-'} |")
        out.append("")
    return "\n".join(out)


def course_trace() -> Trace:
    files = {u.file: name for name, u in COURSE.units.items()}
    graded = {t.test_id: unit for unit, tests in rubrics(COURSE).items() for t in tests}
    return trace(COURSE.api, [COURSE.hidden_tests, COURSE.public_tests], files, graded)


def test_every_rule_has_a_test_and_every_test_a_rule():
    found = course_trace()
    assert not found.problems, "\n".join(found.problems) + "\n\n" + table(found)


def test_every_unit_has_rules_of_its_own():
    found = course_trace()
    sections = {r.section for r in found.rules.values()}
    assert sections == {GENERAL, *COURSE.units}, sections ^ {GENERAL, *COURSE.units}


def test_print_the_trace():
    """The trace itself, shown by ``pytest tests/project/test_trace.py -s`` (captured otherwise)."""
    found = course_trace()
    print("\n" + table(found))
    assert found.rules and found.tests


PAGE = """# API

Intro. Where silent, follow torch. [G1]

General rules
- Inputs stay unmodified. [G2]
- Bad sizes raise ValueError, with more words. [G3] This part explains.

## 1. `toy.py` - a toy
Must not call: anything (no id: the grader enforces it).

- `f(x) -> Tensor`: doubles `x`. [X1]
  `g(x)` returns 0. [X2] Explanation without an id.
"""

TESTS = '''import pytest

pytestmark = pytest.mark.unit("toy")


@pytest.mark.points(1)
def test_f_doubles(subject):
    """f doubles x"""
    # Checks: X1, G2.
    assert subject


@pytest.mark.points(1)
def test_bad_sizes(subject):
    """bad sizes raise ValueError"""
    # Checks: G1, G3.
    assert subject


def test_helper_without_points():
    """not graded: needs no citation"""
    assert True
'''


def _toy(tmp_path: Path, page: str, tests: str) -> Trace:
    (tmp_path / "api.md").write_text(page, encoding="utf-8")
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_toy_properties.py").write_text(tests, encoding="utf-8")
    graded = {f"test_toy_properties.py::{test}": "toy" for test in ("test_f_doubles", "test_bad_sizes")}
    return trace(tmp_path / "api.md", [tmp_path / "suite"], {"toy.py": "toy"}, graded)


def test_the_checker_reads_ids_sentences_and_citations(tmp_path):
    found = _toy(tmp_path, PAGE, TESTS)
    uncited = [p for p in found.problems if "has no test" in p]
    assert uncited == ["[X2] (toy) has no test: `g(x)` returns 0."], found.problems
    assert [(r.id, r.section) for r in found.rules.values()] == [
        ("G1", "general"), ("G2", "general"), ("G3", "general"), ("X1", "toy"), ("X2", "toy")]
    assert found.rules["G1"].sentence == "Intro. Where silent, follow torch."
    assert found.rules["G3"].sentence == "Bad sizes raise ValueError, with more words."
    assert found.rules["X1"].sentence == "`f(x) -> Tensor`: doubles `x`."
    assert found.rules["X1"].tests == ["test_toy_properties.py::test_f_doubles"]
    assert list(found.tests) == ["test_toy_properties.py::test_f_doubles", "test_toy_properties.py::test_bad_sizes"]
    assert "| X2 | `g(x)` returns 0. | - |" in table(found)


def test_the_checker_catches_an_uncited_test_and_an_unknown_id(tmp_path):
    tests = TESTS.replace("    # Checks: X1, G2.\n", "").replace("# Checks: G1, G3.", "# Checks: G1, G3, X2, X9.")
    found = _toy(tmp_path, PAGE, tests)
    assert found.problems == [
        "test_toy_properties.py::test_f_doubles cites no rule: add '# Checks: <ids>.' right under its docstring",
        "test_toy_properties.py::test_bad_sizes cites [X9], which the page does not have",
        "[G2] (general) has no test: Inputs stay unmodified.",
        "[X1] (toy) has no test: `f(x) -> Tensor`: doubles `x`.",
    ]


def test_the_checker_catches_a_broken_scheme(tmp_path):
    page = PAGE.replace("returns 0. [X2]", "returns 0. [G2]").replace("doubles `x`. [X1]", "doubles `x`. [Y1]")
    tests = TESTS.replace("# Checks: X1, G2.", "# Checks: Y1 and G2")
    found = _toy(tmp_path, page + "- `h(x)`. [Y1]\n", tests)
    assert "the id [G2] appears twice on the page" in found.problems
    assert "the id [Y1] appears twice on the page" in found.problems
    assert any("unreadable citation" in p and "test_f_doubles" in p for p in found.problems)
    mixed = _toy(tmp_path, PAGE.replace("returns 0. [X2]", "returns 0. [Z2]"), TESTS)
    assert "section 'toy' mixes the letters ['X', 'Z']: one letter per section" in mixed.problems
    stolen = _toy(tmp_path, PAGE.replace("returns 0. [X2]", "returns 0. [G4]"), TESTS)
    assert "[G4] in section 'toy' uses the letter of section 'general'" in stolen.problems


if __name__ == "__main__":
    print(table(course_trace()))
