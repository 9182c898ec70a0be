"""Walking a folder nobody trusts: bounded, iterative, never following links.

The sandbox copies submissions with it and the delivery layer unpacks uploads
with it, so no upload can exhaust the recursion limit or memory.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

MAX_DEPTH = 32  # folders below the upload: far more than any real layout
MAX_ENTRIES = 10_000  # files and folders seen in one upload


class SubmissionError(Exception):
    """The submission cannot be graded at all; the message is its status."""


def walk(folder: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry below ``folder`` with its ``lstat``, shallowest first, never following links.

    Raises SubmissionError past :data:`MAX_DEPTH` folders or :data:`MAX_ENTRIES` entries.
    """
    seen, level = 0, [folder]
    for depth in range(MAX_DEPTH + 1):
        below = []
        for top in level:
            with os.scandir(top) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    seen += 1
                    if seen > MAX_ENTRIES:
                        raise SubmissionError(f"{folder.name} holds more than {MAX_ENTRIES} files and folders")
                    info = entry.stat(follow_symlinks=False)
                    yield Path(entry.path), info
                    if stat.S_ISDIR(info.st_mode):
                        below.append(Path(entry.path))
        if not below:
            return
        level = below
    raise SubmissionError(f"{folder.name} is nested more than {MAX_DEPTH} folders deep")
