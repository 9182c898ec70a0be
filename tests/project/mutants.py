"""Materialize the buggy versions kept in tests/mutants/<unit>.toml."""
from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

from conftest import ROOT

MUTANTS = ROOT / "tests" / "mutants"


def load(unit: str) -> list[dict]:
    return tomllib.loads((MUTANTS / f"{unit}.toml").read_text(encoding="utf-8"))["mutant"]


def mutated_source(source: str, mutant: dict) -> str:
    for find, replace in mutant["replace"]:
        count = source.count(find)
        if count != 1:
            raise ValueError(f"mutant {mutant['name']}: {find!r} occurs {count} times in the solution, not once")
        source = source.replace(find, replace)
    return source


def write(unit_file: str, mutant: dict, dest: Path) -> Path:
    """A full submission: the reference solutions, with ``unit_file`` mutated."""
    dest.mkdir(parents=True)
    for path in (ROOT / "solutions").glob("*.py"):
        shutil.copy(path, dest / path.name)
    source = (ROOT / "solutions" / unit_file).read_text(encoding="utf-8")
    (dest / unit_file).write_text(mutated_source(source, mutant), encoding="utf-8")
    return dest


def cases(unit: str, base: Path) -> dict[str, Path]:
    """Submission folders under ``base`` for grading ``unit``: its correct alternative (if
    tests/alternatives has one) and every mutant of its catalogue, by name."""
    from autograder.core.manifest import load_course

    spec = load_course(ROOT).units[unit]
    found = {}
    alternative = ROOT / "tests" / "alternatives" / spec.file
    if alternative.is_file():
        found["alternative"] = shutil.copytree(ROOT / "solutions", base / "alternative")
        shutil.copy(alternative, found["alternative"] / spec.file)
    for m in load(unit):
        found[m["name"]] = write(spec.file, m, base / m["name"])
    return found
