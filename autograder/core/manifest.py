"""The course manifest (``course/course.toml``): units, files and rules."""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = Path("course") / "course.toml"


@dataclass(frozen=True)
class Unit:
    name: str
    title: str
    file: str
    forbidden: tuple[str, ...] = ()
    # Sibling modules replaced by trusted stand-ins while this unit is graded,
    # so that a bug in one unit never costs points in another.
    stand_ins: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Course:
    root: Path
    name: str
    units: dict[str, Unit]
    solutions: Path
    assignments: Path
    hidden_tests: Path
    public_tests: Path
    # Extra `attn-course` commands the course provides: name -> file (relative to root) with main(argv).
    commands: dict[str, str] = field(default_factory=dict)

    def unit_for_file(self, filename: str) -> Unit | None:
        return next((u for u in self.units.values() if u.file == filename), None)

    def select(self, names: list[str] | None) -> list[Unit]:
        """The units named (all of them when ``names`` is empty), in course order."""
        if not names:
            return list(self.units.values())
        unknown = [n for n in names if n not in self.units]
        if unknown:
            raise ValueError(f"unknown unit(s) {', '.join(unknown)}; the units are {', '.join(self.units)}")
        return [u for u in self.units.values() if u.name in names]


def find_root(start: Path | None = None) -> Path:
    """The course root: $ATTN_COURSE_ROOT, else the nearest folder above ``start``
    (default: this package) that holds ``course/course.toml``."""
    env = os.environ.get("ATTN_COURSE_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path(__file__)).resolve()
    for folder in [here, *here.parents]:
        if (folder / MANIFEST).is_file():
            return folder
    raise FileNotFoundError(f"no {MANIFEST} above {here}; set ATTN_COURSE_ROOT to the course folder")


def load_course(root: Path | None = None) -> Course:
    root = (root or find_root()).resolve()
    data = tomllib.loads((root / MANIFEST).read_text(encoding="utf-8"))
    paths = data["course"]
    units = {
        name: Unit(
            name=name,
            title=spec["title"],
            file=spec["file"],
            forbidden=tuple(spec.get("forbidden", ())),
            stand_ins=dict(spec.get("stand_ins", {})),
        )
        for name, spec in data["units"].items()
    }
    return Course(
        root=root,
        name=paths["name"],
        units=units,
        solutions=root / paths["solutions"],
        assignments=root / paths["assignments"],
        hidden_tests=root / paths["hidden_tests"],
        public_tests=root / paths["public_tests"],
        commands=dict(data.get("commands", {})),
    )
