"""Hostile uploads for the one intake (issue 43, item 2), built at test time (links, pipes and
sparse files are no files to commit).

``build(case, upload, file, reference)`` makes the upload ``upload`` for the wanted file name
``file`` (``attention.py``, or ``attention.ipynb`` for nbgrader); ``reference`` is the file an
attacker would like graded as theirs (the reference solution, the course's source notebook).
``tests/project/test_intake.py`` runs each through every path (``collect()``, the CLI's
``grade``, ``grade-batch``, Gradescope, PrairieLearn, nbgrader's ``collect``) and asserts the
same status on each; :data:`EXPECTED` is what that status must say (``{file}`` filled in).

| case | upload |
|---|---|
| ``link_outside`` | ``{file}`` is a symlink to the reference (nbgrader: the course's source notebook, full marks) |
| ``link_folder`` | ``work`` is a symlink to the reference's folder, which holds ``{file}`` |
| ``upload_link`` | the upload itself is a symlink to the reference's folder |
| ``two_copies`` | ``backup/{file}`` and ``final/{file}``: which one? |
| ``two_depths`` | ``final/{file}`` and ``old/v1/{file}``: neither at the top level |
| ``zip_two_copies`` | a folder holding one zip, which holds ``a/{file}`` and ``b/{file}`` |
| ``fifo`` | ``{file}`` is a named pipe (a reader that opens it waits forever) |
| ``too_deep`` | ``{file}`` 40 folders deep |
| ``too_many`` | ``{file}`` beside 10,000 empty files |
| ``oversize`` | ``{file}`` is a 64 MiB sparse file (no disk used) |

``top_wins`` is the honest control: the reference as ``{file}`` at the top level, and a
broken ``backup/{file}`` below it; the top-level copy is graded.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

from autograder.core.settings import DEFAULTS

MAX_DEPTH, MAX_ENTRIES = DEFAULTS.upload_depth, DEFAULTS.upload_entries  # the default limits

EXPECTED = {
    "link_outside": "{file} is a symlink; links are not followed",
    "link_folder": "work is a symlink to a folder; links are not followed",
    "upload_link": "the upload is a symlink; links are not followed",
    "two_copies": "two copies of {file}: backup/{file} and final/{file}",
    "two_depths": "two copies of {file}: final/{file} and old/v1/{file}",
    "zip_two_copies": "two copies of {file}: upload.zip/a/{file} and upload.zip/b/{file}",
    "fifo": "{file} is not a regular file",
    "too_deep": f"the upload is nested more than {MAX_DEPTH} folders deep",
    "too_many": f"the upload holds more than {MAX_ENTRIES} files and folders",
    "oversize": "{file} is larger than",
}
BROKEN = "this is no answer: a backup that must never be graded\n"


def build(case: str, upload: Path, file: str, reference: Path) -> Path:
    upload.parent.mkdir(parents=True, exist_ok=True)
    if case == "upload_link":
        upload.symlink_to(reference.parent, target_is_directory=True)
        return upload
    upload.mkdir()
    text = reference.read_bytes()
    if case == "link_outside":
        (upload / file).symlink_to(reference)
    elif case == "link_folder":
        (upload / "work").symlink_to(reference.parent, target_is_directory=True)
    elif case in ("two_copies", "two_depths"):
        for where in (("backup", "final") if case == "two_copies" else ("final", "old/v1")):
            (upload / where).mkdir(parents=True)
            (upload / where / file).write_bytes(text)
    elif case == "zip_two_copies":
        with zipfile.ZipFile(upload / "upload.zip", "w") as zf:
            zf.writestr(f"a/{file}", text)
            zf.writestr(f"b/{file}", text)
    elif case == "fifo":
        os.mkfifo(upload / file)
    elif case == "too_deep":
        deep = upload.joinpath(*["d"] * (MAX_DEPTH + 8))
        deep.mkdir(parents=True)
        (deep / file).write_bytes(text)
    elif case == "too_many":
        (upload / file).write_bytes(text)
        for i in range(MAX_ENTRIES):
            (upload / f"empty{i:05d}").touch()
    elif case == "oversize":
        with open(upload / file, "wb") as handle:
            handle.truncate(64 << 20)
    elif case == "top_wins":
        (upload / file).write_bytes(text)
        (upload / "backup").mkdir()
        (upload / "backup" / file).write_text(BROKEN, encoding="utf-8")
    else:
        raise ValueError(f"no such case: {case}")
    return upload
