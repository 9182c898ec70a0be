"""The removal suite (issue 57) as data: tests/hostile/removal/attacks.toml, each attack a patch of
one unit's reference solution (the find/replace format of tests/mutants/*.toml, tests/project/mutants.py).

:func:`materialize` writes each attack into a folder of its own holding only that unit's file, as
the trust suite's folders do, so its siblings are the course's stand-ins when it is graded.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from conftest import ROOT
from autograder.core.manifest import load_course
from mutants import mutated_source

COURSE = load_course(ROOT)
REMOVAL = ROOT / "tests" / "hostile" / "removal"
KINDS = ("deferred", "c_callable", "swapped_submodule", "kept_reference", "memory")


def load() -> list[dict]:
    return tomllib.loads((REMOVAL / "attacks.toml").read_text(encoding="utf-8"))["attack"]


ATTACKS = load()
BY_NAME = {a["name"]: a for a in ATTACKS}


def source(attack: dict) -> str:
    """The unit file the attack grades: the reference solution with its patch applied."""
    spec = COURSE.units[attack["unit"]]
    return mutated_source((COURSE.solutions / spec.file).read_text(encoding="utf-8"), attack)


def materialize(attack: dict, base: Path) -> Path:
    """``base/<name>/`` holding only the attack's unit file."""
    folder = Path(base) / attack["name"]
    folder.mkdir(parents=True)
    (folder / COURSE.units[attack["unit"]].file).write_text(source(attack), encoding="utf-8")
    return folder


def scan(attack: dict, folder: Path) -> list:
    """What the grader's two static scans (forbidden names, allow-list) find in the materialized file."""
    from autograder.trust import allowlist, forbidden

    spec = COURSE.units[attack["unit"]]
    path = Path(folder) / spec.file
    siblings = tuple(COURSE.units)
    return forbidden.scan_file(path, spec.forbidden) + allowlist.scan_file(path, COURSE.rules, spec.forbidden, siblings)
