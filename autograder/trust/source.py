"""What a student wrote, read as Python reads it, and their exceptions, printed safely: the two
things every trust module takes from a submission before judging it."""
from __future__ import annotations

import io
import tokenize
from pathlib import Path

from autograder.core.i18n import N_

def read_source(path: Path) -> tuple[str, str]:
    """The text Python executes for ``path`` and the encoding it was decoded with
    (the file's own coding cookie or BOM, UTF-8 by default)."""
    data = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:  # an unknown or contradicted cookie, or first lines that are not UTF-8
        data.decode("utf-8")  # the last is reported as such
        raise
    return data.decode(encoding), encoding


def safe_str(error: BaseException, limit: int = 300) -> str:
    """``str(error)`` that survives a hostile ``__str__``, cut to ``limit`` characters."""
    try:
        text = str(error)
    except BaseException:  # noqa: BLE001 - the submission controls __str__
        text = N_("<the exception's message could not be printed>")
    return text if len(text) <= limit else text[:limit] + "…"
