"""Keep trusted code out of the text a worker sends back.

A worker can read the stand-ins of its unit's dependencies (trusted, correct
code) and could raise them, chunk by chunk, in its error messages, which land
in the student's own report. On the trusted side every such text is cut to a
few hundred characters and loses whatever it shares with a stand-in's
source: whole lines (whitespace normalized, at least ``MIN_LINE``
characters) and any run of ``RUN`` consecutive tokens, so that joining lines
or changing their spacing hides nothing. A student's own message keeps its
words: a run of ``RUN`` tokens is far longer than ``x = 1``, and a message
that quotes a number breaks the run where the stand-in's source has
``{name}``.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

MESSAGE_LIMIT = 500  # characters of a worker's error message kept (it sends at most ~300 of an exception)
RUN = 12  # consecutive tokens of a stand-in that are removed wherever they appear
MIN_LINE = 20  # characters of a stand-in line (whitespace normalized) that are removed as a whole line
REMOVED = "[…]"
_TOKEN = re.compile(r"\w+|[^\w\s]")


def _normal(line: str) -> str:
    return " ".join(line.split())


class Redactor:
    """Removes from texts what they share with ``sources`` (the stand-ins' code)."""

    def __init__(self, sources: Iterable[str]):
        self.lines: set[str] = set()
        self.runs: set[tuple[str, ...]] = set()
        for source in sources:
            self.lines |= {n for n in map(_normal, source.splitlines()) if len(n) >= MIN_LINE}
            tokens = _TOKEN.findall(source)
            self.runs |= {tuple(tokens[i:i + RUN]) for i in range(len(tokens) - RUN + 1)}

    def clean(self, text: str, limit: int = MESSAGE_LIMIT) -> str:
        """``text`` without stand-in lines or runs, cut to ``limit`` characters."""
        text = text[: 4 * limit]  # bounds the work; what is cut here is cut below anyway
        if self.lines or self.runs:
            kept = [line if _normal(line) not in self.lines else REMOVED for line in text.split("\n")]
            text = self._without_runs("\n".join(kept))
        return text if len(text) <= limit else text[:limit] + "…"

    def _without_runs(self, text: str) -> str:
        tokens = list(_TOKEN.finditer(text))
        words = [t.group() for t in tokens]
        hit = [False] * len(tokens)
        for i in range(len(tokens) - RUN + 1):
            if tuple(words[i:i + RUN]) in self.runs:
                hit[i:i + RUN] = [True] * RUN
        out, at, i = [], 0, 0
        while i < len(tokens):
            if not hit[i]:
                i += 1
                continue
            j = i
            while j + 1 < len(tokens) and hit[j + 1]:
                j += 1
            out += [text[at:tokens[i].start()], REMOVED]
            at, i = tokens[j].end(), j + 1
        return "".join(out) + text[at:]


def stand_in_sources(root: Path, paths: Iterable[str]) -> tuple[str, ...]:
    """The text of each stand-in file (relative to the course ``root``) that exists."""
    files = sorted({root / p for p in paths})
    return tuple(f.read_text(encoding="utf-8", errors="replace") for f in files if f.is_file())


@lru_cache(maxsize=8)
def _for(root: Path, paths: tuple[str, ...]) -> Redactor:
    return Redactor(stand_in_sources(root, paths))


def for_course(course) -> Redactor:
    """One :class:`Redactor` for every stand-in of ``course`` (built once per course)."""
    paths = tuple(sorted({p for unit in course.units.values() for p in unit.files()}))
    return _for(Path(course.root), paths)
