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
"""
from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass

DAY = 86_400.0  # seconds
POLICIES = ("none", "per_day", "zero")
UTC = datetime.timezone.utc
TIMESTAMP = "timestamp.txt"  # nbgrader's name for the file beside a submission that says when it was handed in


@dataclass(frozen=True)
class LatePolicy:
    """What late work costs (course.toml ``[late]``)."""

    policy: str = "none"  # one of POLICIES
    rate: float = 0.0  # per_day: percent of the points taken per started day late

    @classmethod
    def from_table(cls, table: dict | None, where: str = "[late]") -> "LatePolicy":
        """The policy of a manifest's ``[late]`` table (none when there is no table)."""
        table = dict(table or {})
        unknown = sorted(set(table) - {"policy", "rate"})
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (the keys are policy and rate)")
        policy = table.get("policy", "none")
        if policy not in POLICIES:
            raise ValueError(f"{where}: policy {policy!r} is not one of {', '.join(POLICIES)}")
        if policy == "per_day":
            rate = table.get("rate")
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 100:
                raise ValueError(f"{where}: policy per_day needs a rate, the percent taken per started day (0 < rate <= 100)")
            return cls(policy, float(rate))
        if "rate" in table:
            raise ValueError(f"{where}: rate is for policy per_day only (the policy is {policy})")
        return cls(policy)

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
            raise ValueError(f"{where}: {value!r} is no ISO 8601 date-time") from None
    if not isinstance(when, datetime.datetime):  # a TOML date or time alone
        raise ValueError(f"{where}: {value!r} is no date-time (write e.g. 2027-03-01T23:59:00+01:00)")
    if when.utcoffset() is None:
        raise ValueError(f"{where}: {value!s} has no UTC offset (write e.g. {when.isoformat()}+00:00)")
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
