"""The one result model every output format is written from.

Its text fields pass :func:`~autograder.core.safe_text.safe_text` whenever they are set (at
construction, from a record, or assigned later), so no writer ever sees a lone surrogate or a
control character, whatever the student's code raised or the upload was called.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

from autograder.core.i18n import N_
from autograder.core.safe_text import safe_name, safe_text


# What a stub's NotImplementedError reads as, in every report (in English here, as the stubs write
# it: a report translates it, i18n._(NOT_IMPLEMENTED)).
NOT_IMPLEMENTED = N_("not implemented yet")


def _round(x: float) -> float:
    return round(float(x), 4)


class _SafeText:
    """Cleans the fields named in ``NAMES`` (one line) and ``TEXTS`` (multi-line) as they are set."""
    NAMES: ClassVar[frozenset[str]] = frozenset()
    TEXTS: ClassVar[frozenset[str]] = frozenset()

    def __setattr__(self, field_name: str, value) -> None:
        if field_name in self.NAMES:
            value = safe_name(value)
        elif field_name in self.TEXTS:
            value = safe_text(value)
        super().__setattr__(field_name, value)


@dataclass
class TestResult(_SafeText):
    NAMES: ClassVar[frozenset[str]] = frozenset({"id", "name"})
    TEXTS: ClassVar[frozenset[str]] = frozenset({"output"})
    id: str  # stable: "<file>::<function>"
    name: str  # the one-line property students read
    score: float
    max_score: float
    status: str  # "passed" | "failed" | "skipped"
    output: str = ""
    visibility: str = "hidden"  # "visible" (public test) | "hidden"


@dataclass
class UnitResult(_SafeText):
    TEXTS: ClassVar[frozenset[str]] = frozenset({"message"})
    name: str
    title: str
    status: str = "graded"  # "graded" | "unavailable" | "forbidden"
    message: str = ""
    tests: list[TestResult] = field(default_factory=list)

    @property
    def score(self) -> float:
        return _round(sum(t.score for t in self.tests))

    @property
    def max_score(self) -> float:
        return _round(sum(t.max_score for t in self.tests))


@dataclass
class GradeResult(_SafeText):
    NAMES: ClassVar[frozenset[str]] = frozenset({"submission"})
    submission: str
    units: dict[str, UnitResult] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return _round(sum(u.score for u in self.units.values()))

    @property
    def max_score(self) -> float:
        return _round(sum(u.max_score for u in self.units.values()))

    def to_dict(self) -> dict:
        return {
            "submission": self.submission,
            "score": self.score,
            "max_score": self.max_score,
            "units": {
                name: {
                    "title": u.title,
                    "score": u.score,
                    "max_score": u.max_score,
                    "status": u.status,
                    "message": u.message,
                    "tests": [asdict(t) for t in u.tests],
                }
                for name, u in self.units.items()
            },
        }

    @classmethod
    def from_dict(cls, data: dict) -> "GradeResult":
        units = {
            name: UnitResult(
                name=name,
                title=u["title"],
                status=u["status"],
                message=u["message"],
                tests=[TestResult(**t) for t in u["tests"]],
            )
            for name, u in data["units"].items()
        }
        return cls(submission=data["submission"], units=units)
