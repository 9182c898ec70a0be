"""The one boundary for text nobody trusts: what a worker says and what a file is named.

Every string of the result model (:mod:`autograder.core.results`) and every status a delivery
path writes passes :func:`safe_text` before a writer sees it, so each writer may assume valid
Unicode without control characters, and only escape for its own format (CSV formulas with
:func:`csv_cell`, here since two layers write gradebooks; Markdown and XML in
:mod:`autograder.delivery.formats`). What a worker says is redacted on the trusted side as it arrives
(:mod:`autograder.core.redact`, in the sandbox's host); this function is what every path has in
common after that.

Decisions: a lone surrogate (from an exception message, or a file name that is not UTF-8, which
Python decodes with surrogate escapes) becomes U+FFFD, never an error; control characters go,
except newline and tab (messages are multi-line); so do the bidirectional overrides (a reversed
run can make "0/64" read as "64/0") and the two non-characters XML refuses. Text past ``limit``
characters is cut with an ellipsis.
"""
from __future__ import annotations

import re

TEXT_LIMIT = 10_000  # characters of one message or output: more than any honest report, less than a flood
NAME_LIMIT = 500  # characters of a name (a submission path, a property): one line of a gradebook

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 but tab and newline, DEL, C1, bidi embeddings/overrides/isolates, and the non-characters XML forbids.
_UNWANTED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff]")


def safe_text(value: object, limit: int = TEXT_LIMIT) -> str:
    """``value`` as printable, valid Unicode of at most ``limit`` characters (plus an ellipsis)."""
    text = value if isinstance(value, str) else str(value)
    text = text[: 4 * limit]  # bounds the work below; what is cut here is cut at the end anyway
    text = _UNWANTED.sub("", _SURROGATE.sub("\ufffd", text.replace("\r\n", "\n")))
    return text if len(text) <= limit else text[:limit] + "…"


def safe_name(value: object) -> str:
    """A name as one line: :func:`safe_text` with line breaks and tabs as spaces."""
    return " ".join(safe_text(value, 4 * NAME_LIMIT).split())[:NAME_LIMIT]


_FORMULA = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")  # OWASP's, and their full-width forms


def csv_cell(text: str) -> str:
    """A CSV text cell no spreadsheet runs as a formula (OWASP's advice on CSV injection): one
    line, and a leading ``= + - @`` behind a single quote (tabs and carriage returns, OWASP's
    other two, are gone with the line breaks). Every CSV writer of a gradebook uses it."""
    text = " ".join(safe_text(text).split())
    return "'" + text if text.startswith(_FORMULA) else text
