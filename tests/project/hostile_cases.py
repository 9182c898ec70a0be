"""The hostile corpus's single-file cases: the folders of tests/hostile that hold unit files, and the
entries of tests/hostile/patches.toml, each another case with a patch applied (find/replace, the format
of tests/mutants/*.toml, tests/project/mutants.py), so that what two cases share is written once.

:func:`write` puts a case, either kind, into a folder of its own named after it, as the tests that grade
the corpus take it. To grade one by hand: ``python tests/project/hostile_cases.py DIR`` writes every
patched case under DIR (``DIR/<case>/``), then ``attn-course grade DIR/<case> --unit <unit>``.
"""
from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

if __name__ == "__main__":  # run as a script: the test helpers' imports, as under pytest
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

from conftest import ROOT
from autograder.core.manifest import load_course
from mutants import mutated_source

CORPUS = ROOT / "tests" / "hostile"
UNIT_FILES = {unit.file for unit in load_course(ROOT).units.values()}

__all__ = ["CORPUS", "NAMES", "PATCHED", "files", "load", "patched", "write"]


def load(path: Path = CORPUS / "patches.toml", table: str = "case") -> dict[str, dict]:
    """The patches of a data file, by name."""
    return {entry["name"]: entry for entry in tomllib.loads(path.read_text(encoding="utf-8"))[table]}


PATCHED = load()
FOLDERS = sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and any(f.name in UNIT_FILES for f in p.iterdir()))
if set(FOLDERS) & set(PATCHED):
    raise ValueError(f"cases both folders and patches: {sorted(set(FOLDERS) & set(PATCHED))}")
NAMES = sorted([*FOLDERS, *PATCHED])


def files(name: str) -> dict[str, str]:
    """The case's unit files: name -> text."""
    if name in PATCHED:
        return dict([patched(PATCHED[name])])
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((CORPUS / name).iterdir()) if p.name in UNIT_FILES}


def patched(entry: dict) -> tuple[str, str]:
    """(file name, text) of a patch: its base case's one unit file with the patch applied, under the
    name of that file (or of the entry's ``file``)."""
    [(file, source)] = files(entry["base"]).items()
    return entry.get("file", file), mutated_source(source, entry)


def write(name: str, base: Path) -> Path:
    """``base/<name>/``: a copy of the case's folder, or the patched case's one file."""
    folder = Path(base) / name
    if name not in PATCHED:
        shutil.copytree(CORPUS / name, folder)
        return folder
    folder.mkdir(parents=True)
    file, source = patched(PATCHED[name])
    (folder / file).write_text(source, encoding="utf-8")
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/project/hostile_cases.py DIR  (writes DIR/<case>/<unit file> for every patched case)")
    for case in PATCHED:
        print(write(case, Path(sys.argv[1])))
