"""Materialize the correct alternatives kept in tests/alternatives/idioms.toml (issue 57).

Each entry is the reference solution of one unit with find/replace patches applied (the format of
tests/mutants/*.toml: each ``find`` occurs exactly once in the solution). A materialized entry is a
folder holding the entry's unit file only. Used by
tests/project/test_idioms.py and benchmarks/bench_idioms_seeds.py; imported by no other test module.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from mutants import mutated_source

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = ROOT / "tests" / "alternatives" / "idioms.toml"
SOLUTIONS = ROOT / "solutions"
IDIOMS = ("device_type", "type_cast", "autograd_function", "checkpoint", "private_self", "port", "numpy")
EXPECT = ("full_marks", "refused")


def load() -> list[dict]:
    entries = tomllib.loads(CATALOGUE.read_text(encoding="utf-8"))["alternative"]
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)), f"duplicate names in {CATALOGUE.name}"
    for e in entries:
        missing = {"name", "unit", "idiom", "source", "replace", "expect"} - set(e)
        assert not missing, (e.get("name"), missing)
        assert e["idiom"] in IDIOMS and e["expect"] in EXPECT, (e["name"], e["idiom"], e["expect"])
    return entries


def unit_file(unit: str) -> str:
    from autograder.core.manifest import load_course

    return load_course(ROOT).units[unit].file


def patched_source(entry: dict) -> str:
    """The entry's unit file: the reference with its replacements (each ``find`` exactly once)."""
    return mutated_source((SOLUTIONS / unit_file(entry["unit"])).read_text(encoding="utf-8"), entry)


def write(entry: dict, dest: Path) -> Path:
    """A submission in ``dest`` (created) holding only the entry's unit file: graded, its siblings are
    the course's stand-ins, as they would be beside the other solutions, and the other units cost
    nothing to grade."""
    dest.mkdir(parents=True)
    (dest / unit_file(entry["unit"])).write_text(patched_source(entry), encoding="utf-8")
    return dest


def materialize(base: Path, entries: list[dict] | None = None) -> dict[str, Path]:
    """Every entry (or ``entries``) as a submission folder under ``base``, by name."""
    return {e["name"]: write(e, base / e["name"]) for e in (load() if entries is None else entries)}


def line_of(entry: dict, needle: str) -> int:
    """The 1-based line of the patched unit file where ``needle`` first occurs."""
    source = patched_source(entry)
    for number, line in enumerate(source.splitlines(), 1):
        if needle in line:
            return number
    raise ValueError(f"{entry['name']}: {needle!r} is not in the patched file")
