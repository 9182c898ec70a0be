"""Late work: due dates and the penalty policy (course.toml ``[late]`` and each unit's ``due``).

One policy for every path that knows when work was handed in (``grade-batch`` and the
nbgrader pipeline); each path finds the time its own way and asks this module what it costs.

Decisions:

* **Due dates** are TOML offset date-times (``due = 2027-03-01T23:59:00+01:00``) or the
  same text quoted (ISO 8601). The offset is required: a date-time without one names no
  instant (whose midnight?), so the manifest refuses it. Times are compared as instants.
* **Policies**: ``none`` (lateness is recorded, nothing is taken), ``per_day`` (``rate``
  percent of the points per started day late) and ``zero`` (a late unit scores 0).
* **Days are started days**: ``ceil(seconds late / 86400)``. One second late is one day;
  exactly 24 hours late is one day; 24 hours and one second is two. On the due instant
  itself is on time.
* **The points** the penalty is taken from are the trusted points (the re-scored ones),
  never what a kernel or nbgrader claimed. ``per_day``: ``points * min(1, rate/100 * days)``;
  ``zero``: all of them. The penalty is rounded to 4 decimals (as results are), is never
  negative and never more than the points, so a score never goes below zero.
* **Submission times** without an offset (nbgrader's ``timestamp.txt`` may omit it) are UTC,
  as nbgrader reads them.
* **Extensions** (``[late] extensions = "extensions.csv"``, a path from the course root): one row per
  student and unit (``*``: every unit), with either ``days`` (added to the unit's due date) or
  ``due`` (a new due date, with its offset). Every path that prices late work asks
  :meth:`Extensions.due` for a student's due date; the last row that names a student and unit wins.
"""
from __future__ import annotations

import csv
import datetime
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograder.core.errors import UsageError

DAY = 86_400.0  # seconds
POLICIES = ("none", "per_day", "zero")
UTC = datetime.timezone.utc
TIMESTAMP = "timestamp.txt"  # nbgrader's name for the file beside a submission that says when it was handed in


@dataclass(frozen=True)
class LatePolicy:
    """What late work costs (course.toml ``[late]``)."""

    policy: str = "none"  # one of POLICIES
    rate: float = 0.0  # per_day: percent of the points taken per started day late
    # The per-student extensions file, relative to the course root (None: no extensions).
    extensions: str | None = field(default=None, compare=False)

    @classmethod
    def from_table(cls, table: dict | None, where: str = "[late]") -> "LatePolicy":
        """The policy of a manifest's ``[late]`` table (none when there is no table)."""
        table = dict(table or {})
        unknown = sorted(set(table) - {"policy", "rate", "extensions"})
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} (the keys are policy, rate and extensions)")
        extensions = table.pop("extensions", None)
        if extensions is not None and (not isinstance(extensions, str) or not extensions.strip()):
            raise UsageError(f"{where}: extensions is a CSV file's path from the course root, e.g. \"extensions.csv\"")
        extensions = extensions.strip() if extensions else None
        policy = table.get("policy", "none")
        if policy not in POLICIES:
            raise UsageError(f"{where}: policy {policy!r} is not one of {', '.join(POLICIES)}")
        if policy == "per_day":
            rate = table.get("rate")
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 100:
                raise UsageError(f"{where}: policy per_day needs a rate, the percent taken per started day (0 < rate <= 100)")
            return cls(policy, float(rate), extensions)
        if "rate" in table:
            raise UsageError(f"{where}: rate is for policy per_day only (the policy is {policy})")
        return cls(policy, extensions=extensions)

    def describe(self) -> str:
        if self.policy == "per_day":
            return f"{self.rate:g}% of the points per started day late"
        return "a late unit scores 0" if self.policy == "zero" else "no penalty"

    def penalty(self, points: float, seconds_late: float) -> float:
        """The points taken from ``points`` (the trusted ones) for work ``seconds_late`` late."""
        points = max(0.0, float(points))
        days = days_late(seconds_late)
        if days == 0 or self.policy == "none":
            return 0.0
        fraction = 1.0 if self.policy == "zero" else min(1.0, self.rate / 100 * days)
        return min(points, max(0.0, round(points * fraction, 4)))


def days_late(seconds_late: float) -> int:
    """Started days: ``ceil(seconds / 86400)``, 0 when on time."""
    return math.ceil(seconds_late / DAY) if seconds_late > 0 else 0


def parse_due(value: object, where: str) -> datetime.datetime:
    """A due date from the manifest: a TOML offset date-time, or ISO 8601 text with an offset."""
    when = value
    if isinstance(value, str):
        try:
            when = datetime.datetime.fromisoformat(value.strip())
        except ValueError:
            raise UsageError(f"{where}: {value!r} is no ISO 8601 date-time") from None
    if not isinstance(when, datetime.datetime):  # a TOML date or time alone
        raise UsageError(f"{where}: {value!r} is no date-time (write e.g. 2027-03-01T23:59:00+01:00)")
    if when.utcoffset() is None:
        raise UsageError(f"{where}: {value!s} has no UTC offset (write e.g. {when.isoformat()}+00:00)")
    return when.astimezone(UTC)


def parse_timestamp(text: str) -> datetime.datetime | None:
    """A submission time: ISO 8601, or nbgrader's ``timestamp.txt`` form
    (``2027-03-01 23:59:00.000000 UTC``); no offset means UTC. None when unreadable."""
    text = " ".join(text.split())
    for suffix in (" UTC", " GMT", " Z"):
        if text.endswith(suffix):
            text = text[: -len(suffix)] + "+00:00"
    text = re.sub(r" ([+-]\d\d:?\d\d)$", r"\1", text)  # "... 12:00:00 +0100"
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return (when if when.utcoffset() is not None else when.replace(tzinfo=UTC)).astimezone(UTC)


def utc_naive(when: datetime.datetime | None) -> datetime.datetime | None:
    """``when`` as a naive UTC date-time (how nbgrader's gradebook stores them)."""
    return None if when is None else when.astimezone(UTC).replace(tzinfo=None)


def shown(when: datetime.datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def note(days: int, penalty: float) -> str:
    """``1 day late: -2.6 points`` (or ``: no penalty``), for a status or a feedback line."""
    late = f"{days} day{'s' if days != 1 else ''} late"
    return f"{late}: -{penalty:g} points" if penalty > 0 else f"{late}: no penalty"


@dataclass(frozen=True)
class Late:
    """One unit's lateness: when it was due and handed in, and what that cost."""

    due: datetime.datetime
    submitted: datetime.datetime
    points: float  # the trusted points, before the penalty
    penalty: float

    @property
    def seconds(self) -> float:
        return max(0.0, (self.submitted - self.due).total_seconds())

    @property
    def days(self) -> int:
        return days_late(self.seconds)

    @property
    def score(self) -> float:
        return round(max(0.0, self.points - self.penalty), 4)

    def to_dict(self) -> dict:
        return {"due": self.due.isoformat(), "submitted": self.submitted.isoformat(), "days_late": self.days,
                "points": self.points, "penalty": self.penalty, "score": self.score}


def assess(policy: LatePolicy, points: float, submitted: datetime.datetime, due: datetime.datetime) -> Late:
    """What handing in ``points`` (trusted) at ``submitted`` costs against ``due``."""
    seconds = (submitted - due).total_seconds()
    return Late(due, submitted, float(points), policy.penalty(points, seconds))


# -- per-student extensions ---------------------------------------------------------------------

EVERY_UNIT = "*"


@dataclass(frozen=True)
class Extension:
    """One row of the extensions file: ``days`` more, or a new ``due`` date."""

    days: float | None = None
    due: datetime.datetime | None = None

    def applied(self, due: datetime.datetime) -> datetime.datetime:
        return self.due if self.due is not None else due + datetime.timedelta(days=self.days or 0.0)


@dataclass(frozen=True)
class Extensions:
    """The course's per-student extensions (``[late] extensions``): (student, unit or ``*``) -> extension."""

    rows: dict[tuple[str, str], Extension] = field(default_factory=dict)
    source: str = ""

    @classmethod
    def load(cls, root: Path, policy: LatePolicy) -> "Extensions":
        """The extensions file ``policy`` names, read from the course ``root`` (none when it names
        none). Raises ValueError when it is missing or a row is unusable: a grade must never be
        priced without the extensions the instructor gave."""
        if not policy.extensions:
            return cls()
        path = root / policy.extensions
        try:
            text = path.read_text(encoding="utf-8-sig")
        except OSError as error:
            raise UsageError(f"[late] extensions: {path} cannot be read ({error.strerror or error})") from None
        return cls.parse(text, policy.extensions)

    @classmethod
    def parse(cls, text: str, where: str = "extensions") -> "Extensions":
        reader = csv.DictReader(text.splitlines())
        fields = set(reader.fieldnames or ())
        if not {"student", "unit"} <= fields or not fields & {"days", "due"}:
            raise UsageError(f"{where}: the columns are student, unit (or * for every unit) and days or due")
        rows = {}
        for number, row in enumerate(reader, start=2):
            student, unit = (row.get("student") or "").strip(), (row.get("unit") or "").strip() or EVERY_UNIT
            days, due = (row.get("days") or "").strip(), (row.get("due") or "").strip()
            if not student and not days and not due:
                continue  # a blank line
            if not student or bool(days) == bool(due):
                raise UsageError(f"{where}, line {number}: a row names a student and gives days or a due date, "
                                 "not both")
            if days:
                try:
                    value = float(days)
                except ValueError:
                    raise UsageError(f"{where}, line {number}: days {days!r} is not a number") from None
                if not math.isfinite(value) or value < 0:
                    raise UsageError(f"{where}, line {number}: days {days!r} is not a number of days (0 or more)")
                rows[(student, unit)] = Extension(days=value)
            else:
                rows[(student, unit)] = Extension(due=parse_due(due, f"{where}, line {number}"))
        return cls(rows, where)

    def find(self, unit: str, *students: str) -> Extension | None:
        """The extension of the first of ``students`` (a student's names: folder, email, id...) that
        has one for ``unit``: a row naming the unit wins over a ``*`` row."""
        for key in (unit, EVERY_UNIT):
            for student in students:
                if student and (student, key) in self.rows:
                    return self.rows[(student, key)]
        return None

    def due(self, unit: str, due: datetime.datetime, *students: str) -> datetime.datetime:
        """``unit``'s due date for the student known by ``students``: ``due``, extended."""
        extension = self.find(unit, *students)
        return due if extension is None else extension.applied(due)
