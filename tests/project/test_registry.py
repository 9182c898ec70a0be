"""One registry of units: course.toml's ``[units.*]`` tables are the only list of units, and
every unit listed there has every piece.

:func:`pieces` is the one list of what a unit is made of, each piece found by convention from the
unit's name (CONTRIBUTING cites it). A unit that lacks a piece fails here, and so does a file
named after a unit that course.toml does not list. The lessons, demos, notebooks and release read
the units from the manifest; the last test checks that no course or engine module keeps a list
of its own.
"""
from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from autograder.core.manifest import MANIFEST, Course, Unit, load_course
from conftest import ROOT

from autograder.authoring.lesson import languages

COURSE = load_course(ROOT)
SUITES = ("hidden suite", "public suite")
# The unit whose pieces are the globs that find every unit-named file.
ANY = Unit(name="*", title="", file="*.py")


def pieces(course: Course, unit: Unit) -> dict[str, Path]:
    """Every file a unit needs, by name. The API page is shared: the unit's piece is its section."""
    name, file = unit.name, unit.file
    tests = course.root / "tests"
    found = {
        "solution": course.solutions / file,
        "stub": course.assignments / file,  # generated from the solution (attn-course build)
        "hidden suite": course.hidden_tests / f"test_{name}_properties.py",
        "public suite": course.public_tests / f"test_{name}_public.py",
        "oracle": course.hidden_tests / f"oracles_{name}.py",
        "mutants": tests / "mutants" / f"{name}.toml",
        "alternatives": tests / "alternatives" / f"{name}.py",
        "notebook": course.nbgrader_source / name / f"{name}.ipynb",  # generated (attn-course build)
        "API section": course.api,
    }
    for lang in languages(course):
        found[f"lesson ({lang})"] = course.lessons / lang / f"{name}.md"
    for lang in languages(course):  # the conceptual questions' answers (instructors only)
        found[f"answer key ({lang})"] = course.root / "course" / "answer_key" / lang / f"{name}.md"
    for lang in languages(course):  # the page in the lessons' other languages (test_api_page_languages.py)
        if lang != course.language:
            found[f"API section ({lang})"] = course.api.with_name(f"{course.api.stem}.{lang}{course.api.suffix}")
    return found


def suite_unit(path: Path) -> str | None:
    """The unit a suite's ``pytestmark = pytest.mark.unit("<name>")`` names."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            marks = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            for mark in marks:
                if isinstance(mark, ast.Call) and getattr(mark.func, "attr", None) == "unit" and mark.args:
                    return ast.literal_eval(mark.args[0])
    return None


def missing(course: Course, unit: Unit) -> dict[str, str]:
    """Piece name -> what is wrong with it, for every piece of ``unit`` that is absent or wrong."""
    wrong = {}
    for what, path in pieces(course, unit).items():
        where = path.relative_to(course.root).as_posix()
        if not path.is_file():
            wrong[what] = f"{where} does not exist"
        elif what in SUITES and suite_unit(path) != unit.name:
            wrong[what] = f"{where}: pytestmark names {suite_unit(path)!r}, not {unit.name!r}"
        elif what.startswith("API section") and not re.search(rf"^## \d+\. `{re.escape(unit.file)}`",
                                                    path.read_text(encoding="utf-8"), re.M):
            wrong[what] = f"{where} has no heading '## N. `{unit.file}`'"
    return wrong


def orphans(course: Course) -> list[str]:
    """Files named as a unit's piece for a unit that course.toml does not list."""
    expected = {path for unit in course.units.values() for path in pieces(course, unit).values()}
    found = set()
    for pattern in pieces(course, ANY).values():
        relative = pattern.relative_to(course.root)
        if "*" in relative.as_posix():  # not the one API page all units share
            found |= {p for p in course.root.glob(relative.as_posix())
                      if not any(part.startswith(("_", ".")) for part in p.relative_to(course.root).parts)}
    return sorted(p.relative_to(course.root).as_posix() for p in found - expected)


# ------------------------------------------------------------------ the course itself

@pytest.mark.parametrize("unit", list(COURSE.units))
def test_every_unit_has_every_piece(unit):
    assert missing(COURSE, COURSE.units[unit]) == {}


def test_no_piece_of_an_unlisted_unit():
    assert orphans(COURSE) == [], "course.toml does not list these files' units"


def test_no_module_keeps_its_own_list_of_units():
    """A literal naming every unit (a tuple such as the old lessons' and demos' UNITS) is a second
    registry. A demo naming the units it needs is not."""
    names = set(COURSE.units)
    found = []
    for path in [*(ROOT / "course").rglob("*.py"), *(ROOT / "autograder").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                named = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
                if set(named) == names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {named}")
    assert not found, "read the units from course.toml (load_course) instead:\n" + "\n".join(found)


# ------------------------------------------------------------------ the check can fail

def test_the_check_names_exactly_what_a_new_unit_lacks(tmp_path):
    """A sixth unit in a copy of the manifest, with half of its pieces: the rest are reported."""
    (tmp_path / MANIFEST).parent.mkdir(parents=True)
    toy = '\n[units.toy]\ntitle = "A toy unit"\nfile = "toy.py"\n'
    (tmp_path / MANIFEST).write_text((ROOT / MANIFEST).read_text(encoding="utf-8") + toy, encoding="utf-8")
    course = load_course(tmp_path)
    for lang in ("en", "zh"):
        (course.lessons / lang).mkdir(parents=True)
    unit = course.units["toy"]
    have = pieces(course, unit)
    written = {"solution": "", "stub": "", "lesson (en)": "",
               "hidden suite": 'import pytest\npytestmark = pytest.mark.unit("toy")\n',
               "public suite": 'import pytest\npytestmark = [pytest.mark.unit("attention")]\n',
               "API section": "## 2. `attention.py` — scaled dot-product attention\n"}
    for what, text in written.items():
        have[what].parent.mkdir(parents=True, exist_ok=True)
        have[what].write_text(text, encoding="utf-8")
    wrong = missing(course, unit)
    assert list(wrong) == ["public suite", "oracle", "mutants", "alternatives", "notebook", "API section",
                           "lesson (zh)", "answer key (en)", "answer key (zh)", "API section (zh)"]
    assert wrong["public suite"] == "tests/public/test_toy_public.py: pytestmark names 'attention', not 'toy'"
    assert wrong["oracle"] == "tests/hidden/oracles_toy.py does not exist"
    assert wrong["API section"] == "docs/course-api.md has no heading '## N. `toy.py`'"
    assert wrong["API section (zh)"] == "docs/course-api.zh.md does not exist"

    for page in ("API section", "API section (zh)"):
        have[page].write_text("## 6. `toy.py` — a toy\n", encoding="utf-8")
    for what in ("oracle", "mutants", "alternatives", "notebook", "lesson (zh)", "answer key (en)", "answer key (zh)"):
        have[what].parent.mkdir(parents=True, exist_ok=True)
        have[what].write_text("", encoding="utf-8")
    shutil.copyfile(have["hidden suite"], have["public suite"])
    assert missing(course, unit) == {}

    assert orphans(course) == []
    for stray in ("tests/mutants/ghost.toml", "tests/hidden/oracles_ghost.py", "course/lessons/zh/ghost.md",
                  "course/answer_key/en/ghost.md"):
        (tmp_path / stray).write_text("", encoding="utf-8")
    assert orphans(course) == ["course/answer_key/en/ghost.md", "course/lessons/zh/ghost.md",
                               "tests/hidden/oracles_ghost.py", "tests/mutants/ghost.toml"]
