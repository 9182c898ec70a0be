"""Materialize the buggy versions kept in tests/mutants/<unit>.toml."""
from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT, grade_json

MUTANTS = ROOT / "tests" / "mutants"
ALTERNATIVES = ROOT / "tests" / "alternatives"


def grouped(units) -> list:
    """``units`` as pytest params, each in its catalogue's xdist group: every test that reads a
    unit's catalogue grade runs on the worker that grades it (one worker asking for every unit's
    catalogue held the other one waiting on the grade cache's locks)."""
    return [pytest.param(u, marks=pytest.mark.xdist_group(f"mutants-{u}"), id=u) for u in units]


def load(unit: str, root: Path = ROOT) -> list[dict]:
    return tomllib.loads((root / MUTANTS.relative_to(ROOT) / f"{unit}.toml").read_text(encoding="utf-8"))["mutant"]


def mutated_source(source: str, mutant: dict) -> str:
    for find, replace in mutant["replace"]:
        count = source.count(find)
        if count != 1:
            raise ValueError(f"mutant {mutant['name']}: {find!r} occurs {count} times in the solution, not once")
        source = source.replace(find, replace)
    return source


def write(unit_file: str, mutant: dict, dest: Path, root: Path = ROOT) -> Path:
    """A full submission: the reference solutions (``root``'s), with ``unit_file`` mutated."""
    dest.mkdir(parents=True)
    for path in (root / "solutions").glob("*.py"):
        shutil.copy(path, dest / path.name)
    source = (root / "solutions" / unit_file).read_text(encoding="utf-8")
    (dest / unit_file).write_text(mutated_source(source, mutant), encoding="utf-8")
    return dest


def alternative(unit_file: str, dest: Path, root: Path = ROOT) -> Path:
    """A full submission: the reference solutions, with ``unit_file`` the correct alternative's."""
    shutil.copytree(root / "solutions", dest)
    shutil.copy(root / ALTERNATIVES.relative_to(ROOT) / unit_file, dest / unit_file)
    return dest


def cases(unit: str, base: Path, keep=lambda name: True, root: Path = ROOT) -> dict[str, Path]:
    """Submission folders under ``base`` for grading ``unit``: its correct alternative and every
    mutant of its catalogue that ``keep(name)`` keeps, by name (the folders the grade cache knows);
    those of the checkout ``root`` (tests/project/snapshot_grades.py reads an older one)."""
    from autograder.core.manifest import load_course

    spec = load_course(root).units[unit]
    found = {"alternative": alternative(spec.file, base / "alternative", root)}
    for m in load(unit, root):
        if keep(m["name"]):
            found[m["name"]] = write(spec.file, m, base / m["name"], root)
    return found


class Graded(dict):
    """unit -> case name -> that unit's result, from one grading run per unit on first use.

    The cases are "solutions", "assignments", "alternative" (the unit's correct alternative in
    the reference) and every mutant of the unit's catalogue that ``keep(unit, name)`` keeps (all
    by default); ``options`` are the grade's (``--no-sandbox``). Every test that reads a unit's
    catalogue asks for it here, in the unit's xdist group (:func:`grouped`), so each unit costs
    one grading run: three runs a unit, each starting torch, pytest and hypothesis, when the
    alternative's test, the catalogue's and the stubs' asked one after the other.
    """

    def __init__(self, tmp_path_factory, *options: str, keep=lambda unit, name: True):
        super().__init__()
        self.tmp, self.options, self.keep = tmp_path_factory, options, keep

    def __missing__(self, unit: str) -> dict[str, dict]:
        from autograder.core.manifest import load_course

        course = load_course(ROOT)
        folders = {"solutions": course.solutions, "assignments": course.assignments,
                   **cases(unit, self.tmp.mktemp(unit), lambda name: self.keep(unit, name))}
        results = grade_json(list(folders.values()), [unit], *self.options)
        self[unit] = {name: r["units"][unit] for name, r in zip(folders, results)}
        return self[unit]

    def mutants(self, unit: str) -> dict[str, dict]:
        """Only the catalogue's mutants, by name."""
        names = {m["name"] for m in load(unit)}
        return {name: r for name, r in self[unit].items() if name in names}
