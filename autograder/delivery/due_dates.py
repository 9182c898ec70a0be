"""Set a unit's due date in the course manifest, in place, keeping everything else as written.

``<command> course set-due UNIT DATE`` edits ``[units.UNIT] due`` (:mod:`autograder.core.lateness`
reads it). The date is ISO 8601 *with* its UTC offset (``2027-03-01T23:59:00+01:00``, or ``Z``):
a date-time without one names no instant, so it is refused, as the manifest refuses it. With
tomlkit installed the file is edited through it (a style-preserving TOML library: comments, order
and spacing stay); without it, one line is changed or added: the table's ``due = ...`` line (its
comment kept), else a new one after the table's ``file`` line (or its header). Either way the
result is read back with :mod:`tomllib` and written only when it holds exactly the new date and
nothing else changed, so a manifest this edit cannot handle is left as it was, with the reason.
"""
from __future__ import annotations

import datetime
import os
import re
import tempfile
import tomllib
from pathlib import Path

from autograder.core.errors import UsageError
from autograder.core.lateness import UTC


def parse_date(text: str) -> datetime.datetime:
    """``text`` as an aware date-time; ValueError when it is not ISO 8601 or has no offset."""
    raw = text.strip()
    try:
        when = datetime.datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise UsageError(f"{text!r} is no ISO 8601 date-time (write e.g. 2027-03-01T23:59:00+01:00)") from None
    if when.utcoffset() is None:
        raise UsageError(f"{text!r} has no UTC offset: whose midnight? (write e.g. {when.isoformat()}+01:00, "
                         f"or {when.isoformat()}Z for UTC)")
    return when


def _toml(when: datetime.datetime) -> str:
    """A TOML offset date-time (``Z`` for UTC, as TOML writes it)."""
    text = when.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _header(unit: str) -> re.Pattern[str]:
    name = re.escape(unit)
    return re.compile(rf'^\s*\[\s*units\s*\.\s*(?:{name}|"{name}"|\'{name}\')\s*\]\s*(?:#.*)?$')


def edit_lines(text: str, unit: str, when: datetime.datetime) -> str:
    """``text`` with ``[units.<unit>] due`` set to ``when``, by a one-line edit (no TOML library)."""
    lines = text.splitlines(keepends=True)
    header = _header(unit)
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        raise UsageError(f"no [units.{unit}] table in the manifest")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^\s*\[", lines[i])), len(lines))
    newline = "\r\n" if lines[start].endswith("\r\n") else "\n"
    value = _toml(when)
    for i in range(start + 1, end):
        found = re.match(r'^(\s*due\s*=\s*)("[^"]*"|\'[^\']*\'|[^\s#]+)(\s*#.*)?(\r?\n)?$', lines[i])
        if found:
            lines[i] = f"{found[1]}{value}{found[3] or ''}{found[4] or ''}"
            return "".join(lines)
    after = next((i for i in range(start + 1, end) if re.match(r"^\s*file\s*=", lines[i])), start)
    if not lines[after].endswith("\n"):
        lines[after] += newline
    lines.insert(after + 1, f"due = {value}{newline}")
    return "".join(lines)


def edit_tomlkit(text: str, unit: str, when: datetime.datetime) -> str:
    """The same edit through tomlkit (ImportError where it is not installed)."""
    import importlib

    tomlkit = importlib.import_module("tomlkit")  # (optional: ImportError where it is not installed)
    document = tomlkit.parse(text)
    units = document.get("units")
    if units is None or unit not in units:
        raise UsageError(f"no [units.{unit}] table in the manifest")
    units[unit]["due"] = when
    return tomlkit.dumps(document)


def set_due(manifest: Path, unit: str, date: str, *, use_tomlkit: bool = True) -> tuple[datetime.datetime, str]:
    """Set ``[units.<unit>] due`` of ``manifest`` to ``date``; returns (the date, how it was edited:
    ``tomlkit`` or ``line edit``). Raises ValueError (a bad date, no such unit, an edit that would
    change more than the date); the file is then unchanged."""
    when = parse_date(date)
    text = manifest.read_text(encoding="utf-8")
    before = tomllib.loads(text)
    if unit not in before.get("units", {}):
        raise UsageError(f"no unit {unit!r}; the units are {', '.join(before.get('units', {}))}")
    how = "line edit"
    if use_tomlkit:
        try:
            new, how = edit_tomlkit(text, unit, when), "tomlkit"
        except ImportError:
            new = edit_lines(text, unit, when)
    else:
        new = edit_lines(text, unit, when)
    try:
        after = tomllib.loads(new)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"the edit would not leave valid TOML ({error}); set the date by hand") from None
    expected = {**before, "units": {**before["units"], unit: {**before["units"][unit], "due": when}}}
    got = after["units"][unit].get("due")
    if not isinstance(got, datetime.datetime) or got.astimezone(UTC) != when.astimezone(UTC) or \
            {**after, "units": {**after["units"], unit: {**after["units"][unit], "due": when}}} != expected:
        raise UsageError(f"the manifest's [units.{unit}] cannot be edited safely here; set the date by hand")
    handle, tmp = tempfile.mkstemp(dir=manifest.parent, prefix=f".{manifest.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(new)
        os.chmod(tmp, manifest.stat().st_mode & 0o7777)
        os.replace(tmp, manifest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return when, how


def set_due_of(root: Path, unit: str, date: str) -> str:
    """:func:`set_due` on the manifest of the course at ``root``; returns what the command prints."""
    from autograder.core.manifest import MANIFEST

    manifest = root / MANIFEST
    when, how = set_due(manifest, unit, date)
    return f"{manifest}: [units.{unit}] due = {when.isoformat()} ({how})"
