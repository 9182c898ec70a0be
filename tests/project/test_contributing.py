"""CONTRIBUTING's "Adding a unit", followed on a throwaway unit in a copy of the repository.

The section's table lists every piece a unit needs, each by the name the registry check
(:func:`test_registry.missing`) reports it under and the file it lives in. Here a unit ``toy``
is added to a copy's ``course/course.toml``; the check must then report exactly the table's
pieces, at the table's files (a piece of the table that the check does not report, or one the
check reports that the table lacks, fails); the pieces are then written one at a time, at the
table's paths (an existing unit's files, renamed), and each leaves the check's list as it is
written, until nothing is missing. The copy's own ``test_registry.py`` fails before and passes
after, as an author would run it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from autograder.authoring.lesson import languages
from autograder.core.manifest import MANIFEST, load_course
from conftest import CACHE_ENV, ROOT
from test_registry import SUITES, missing, orphans, pieces

NAME = "toy"
MODEL = "attention"  # the unit whose files the throwaway unit's are copied from
# What the registry check reads: the manifest and every folder a piece lives in (no venv, no engine).
PARTS = ("course", "docs", "solutions", "assignments", "tests/public", "tests/hidden", "tests/mutants",
         "tests/alternatives", "tests/project")
ROW = re.compile(r"^\| *(\d+) *\| *(?P<piece>[^|]+?) *\| *`(?P<file>[^`|]+)` *\|", re.M)


def documented(root: Path) -> dict[str, str]:
    """Piece name -> file (relative to the root), as CONTRIBUTING's "Adding a unit" table gives
    them for the unit ``NAME``, each ``<lang>`` row once per lesson language."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("\n## Adding a unit\n", 1)[1].split("\n## ", 1)[0]
    langs = languages(load_course(root))
    table = {}
    for row in ROW.finditer(section):
        piece, file = row["piece"].replace("`", ""), row["file"].replace("<name>", NAME)
        for lang in langs if "<lang>" in piece + file else [None]:
            table[piece.replace("<lang>", lang or "")] = file.replace("<lang>", lang or "")
    assert len(table) >= 10, f"no table of pieces found in CONTRIBUTING's 'Adding a unit': {table}"
    return table


def copy_repository(dest: Path) -> Path:
    for part in PARTS:
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def registry_run(root: Path) -> subprocess.CompletedProcess:
    """The copy's own registry test for the new unit, as CONTRIBUTING says to run it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", CACHE_ENV, "PYTEST_ADDOPTS")}
    return subprocess.run([sys.executable, "-m", "pytest", str(root / "tests" / "project" / "test_registry.py"),
                           "-k", f"{NAME} or unlisted", "-p", "no:cacheprovider", "-vv"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def write_piece(root: Path, piece: str, file: str) -> None:
    """The piece ``piece`` of the throwaway unit at ``file``: the model unit's, renamed."""
    course = load_course(root)
    target, model = root / file, pieces(course, course.units[MODEL])[piece]
    target.parent.mkdir(parents=True, exist_ok=True)
    if piece.startswith("API section"):  # a page all units share: the unit's piece is its section
        section = f"\n## {len(course.units) + 1}. `{NAME}.py` — a throwaway unit\n"
        target.write_text(model.read_text(encoding="utf-8") + section, encoding="utf-8")
    else:
        shutil.copyfile(model, target)


def test_the_table_is_what_the_check_asks_of_a_new_unit(tmp_path):
    root = copy_repository(tmp_path / "copy")
    manifest = root / MANIFEST
    manifest.write_text(manifest.read_text(encoding="utf-8")
                        + f'\n[units.{NAME}]\ntitle = "A throwaway unit"\nfile = "{NAME}.py"\n', encoding="utf-8")
    course = load_course(root)
    toy = course.units[NAME]
    table = documented(root)

    wrong = missing(course, toy)
    assert not set(table) - set(wrong), f"CONTRIBUTING lists pieces the check does not ask for: {set(table) - set(wrong)}"
    assert not set(wrong) - set(table), f"the check asks for pieces CONTRIBUTING does not list: {set(wrong) - set(table)}"
    checked = {p: path.relative_to(root).as_posix() for p, path in pieces(course, toy).items()}
    assert checked == table, "CONTRIBUTING and pieces() put a piece in different files"
    for piece, file in table.items():
        assert wrong[piece].startswith(file), (piece, wrong[piece])
    run = registry_run(root)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert all(f"'{piece}'" in run.stdout for piece in table), run.stdout[-3000:]

    left = dict(wrong)
    for piece, file in table.items():
        write_piece(root, piece, file)
        if piece in SUITES:  # the model's suite grades the model: reported until its marker names the unit
            assert missing(course, toy)[piece] == f"{file}: pytestmark names {MODEL!r}, not {NAME!r}"
            path = root / file
            path.write_text(path.read_text(encoding="utf-8").replace(f'unit("{MODEL}")', f'unit("{NAME}")'),
                            encoding="utf-8")
        del left[piece]
        assert missing(course, toy) == left, f"after writing {piece} ({file})"
    assert missing(course, toy) == {}
    assert not [o for o in orphans(course) if NAME in o]
    run = registry_run(root)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
