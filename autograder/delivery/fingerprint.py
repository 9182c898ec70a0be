"""What grades a batch's students, as one digest: a recorded result stands only while it holds.

``grade-batch`` keeps each student's result beside the hash of their upload, so a resumed batch
grades only what is new. A result is the grade of an upload *by a grader*: the hidden and public
suites (and their helpers and oracles), the stand-ins, course.toml, the message catalogues, the
engine's own source files, and the versions of what a grade is computed with (Python, torch's
arithmetic, hypothesis's examples, pytest's collection). :func:`fingerprint` hashes each of these
parts; a record keeps the parts' digests, so a later run knows both *that* the grader changed
(every student it grades is graded again) and *what* changed (:func:`changed`, which the summary
prints as ``grader changed: tests/hidden/test_x.py``).

Reading the files costs a few milliseconds a batch (the engine and the suites are a few hundred
files of text), once per run, never per student.
"""
from __future__ import annotations

import hashlib
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from autograder.core.manifest import MANIFEST, Course

VERSIONED = ("torch", "hypothesis", "pytest")  # the libraries a grade is computed with
SHOWN = 4  # changed parts named in a reason, at most (then "and N more")


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return "unreadable"


def _files(folder: Path, *suffixes: str) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in suffixes
                  and "__pycache__" not in p.parts)


def parts(course: Course) -> dict[str, str]:
    """Each part of the grader -> its digest. Course files are named from the course root
    (``tests/hidden/test_x.py``), the engine's as ``engine: autograder/core/x.py``, versions as
    ``torch version``."""
    root = course.root
    found: dict[str, str] = {}
    course_files = [root / MANIFEST]
    course_files += _files(course.hidden_tests, ".py") + _files(course.public_tests, ".py")
    course_files += [root / rel for unit in course.units.values() for rel in unit.files()]
    if course.locale is not None:
        course_files += _files(course.locale, ".po")
    for path in course_files:
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        found[name] = _digest(path)
    engine = Path(__file__).resolve().parents[1]  # the autograder package, wherever it is installed
    for path in _files(engine, ".py", ".po"):
        found[f"engine: {path.relative_to(engine.parent).as_posix()}"] = _digest(path)
    for name in VERSIONED:
        try:
            found[f"{name} version"] = version(name)
        except PackageNotFoundError:
            found[f"{name} version"] = "absent"
    found["python version"] = platform.python_version()
    return dict(sorted(found.items()))


def digest(grader_parts: dict[str, str]) -> str:
    """One digest of all the parts."""
    sha = hashlib.sha256()
    for name, value in sorted(grader_parts.items()):
        sha.update(f"{name}\0{value}\0".encode())
    return sha.hexdigest()


def fingerprint(course: Course) -> dict:
    """``{"digest": ..., "parts": {part: digest}}``: what a record keeps of the grader that graded it."""
    found = parts(course)
    return {"digest": digest(found), "parts": found}


def changed(recorded: dict | None, now: dict) -> list[str]:
    """The parts that differ between a record's fingerprint and ``now`` (added, removed or
    changed), the course's files first; ``["no fingerprint recorded"]`` for a record written before fingerprints."""
    if not recorded or not isinstance(recorded.get("parts"), dict):
        return ["no fingerprint recorded"]
    before, after = recorded["parts"], now["parts"]
    names = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
    # The course's own files first (what an instructor changed), then the engine's, then versions.
    return sorted(names, key=lambda n: (n.startswith("engine: "), n.endswith(" version"), n))


def reason(names: list[str]) -> str:
    """``grader changed: tests/hidden/test_x.py, torch version`` (the first :data:`SHOWN` parts)."""
    shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    return f"grader changed: {shown}"
