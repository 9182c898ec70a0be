"""A course's ``[lms]`` settings: which gradebook column each unit fills, read from its manifest."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field

from autograder.core.errors import UsageError
from autograder.core.manifest import MANIFEST, Course

MOODLE_IDENTIFIERS = ("Email address", "ID number", "Username")  # its import's useremail, useridnumber, username

def fold(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True)
class LmsSettings:
    """How the course's units are found in an LMS's gradebook: course.toml's ``[lms]`` (see
    :func:`parse_lms_settings`) and the units' titles."""

    titles: dict[str, str]  # unit -> its title
    names: dict[str, str] = field(default_factory=dict)  # unit -> the LMS's name for it, where not its title
    canvas_ids: dict[str, str] = field(default_factory=dict)  # unit -> its Canvas assignment id
    moodle_identifier: str = "Email address"  # the column Moodle's import finds users by
    moodle_feedback: bool = False  # write each unit's status in its grade item's feedback column

    def label(self, unit: str) -> str:
        return self.names.get(unit) or self.titles[unit]

    def wanted(self, unit: str) -> set[str]:
        """The names a column of ``unit`` may carry (casefolded, whitespace collapsed): the configured
        name alone, else the unit's title or its name."""
        named = self.names.get(unit)
        return {fold(n) for n in ([named] if named else [self.titles[unit], unit])}


def parse_lms_settings(table: dict | None, titles: dict[str, str]) -> LmsSettings:
    """course.toml's ``[lms]`` table, checked against the units (unit -> title): ``names`` and
    ``canvas_ids`` (unit -> value), ``moodle_identifier`` and ``moodle_feedback``."""
    where = f"{MANIFEST}: [lms]"
    table = dict(table or {})
    unknown = sorted(set(table) - {"names", "canvas_ids", "moodle_identifier", "moodle_feedback"})
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}")
    maps = {}
    for key in ("names", "canvas_ids"):
        value = table.get(key, {})
        if not isinstance(value, dict):
            raise UsageError(f"{where} {key} is a table of unit = value")
        strangers = sorted(set(value) - set(titles))
        if strangers:
            raise UsageError(f"{where} {key}: no unit {', '.join(strangers)}; the units are {', '.join(titles)}")
        maps[key] = value
    for unit, name in maps["names"].items():
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{where} names.{unit} is the LMS's name for the unit, a non-empty string")
    ids = {}
    for unit, value in maps["canvas_ids"].items():
        if isinstance(value, bool) or not re.fullmatch(r"[0-9]+", str(value).strip()):
            raise UsageError(f"{where} canvas_ids.{unit} = {value!r}: a Canvas assignment id is the number in "
                             "the assignment's address and in the export's '<title> (<id>)'")
        ids[unit] = str(value).strip()
    twice = sorted({i for i in ids.values() if list(ids.values()).count(i) > 1})
    if twice:
        raise UsageError(f"{where} canvas_ids: assignment {', '.join(twice)} is given to two units")
    identifier = table.get("moodle_identifier", "Email address")
    if not isinstance(identifier, str) or not identifier.strip():
        raise UsageError(f"{where} moodle_identifier is a column of the roster, e.g. {', '.join(MOODLE_IDENTIFIERS)}")
    feedback = table.get("moodle_feedback", False)
    if not isinstance(feedback, bool):
        raise UsageError(f"{where} moodle_feedback is true or false")
    return LmsSettings(dict(titles), {u: n.strip() for u, n in maps["names"].items()}, ids, identifier.strip(),
                       feedback)


def lms_settings(course: Course) -> LmsSettings:
    """The course's ``[lms]`` settings, read from its manifest."""
    data = tomllib.loads((course.root / MANIFEST).read_text(encoding="utf-8"))
    return parse_lms_settings(data.get("lms"), {name: unit.title for name, unit in course.units.items()})
