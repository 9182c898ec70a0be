"""Uploads nobody trusts: a bounded walk that never follows links, and the one intake.

:func:`intake` is how every path takes in what a student handed in (the CLI's ``grade``,
``grade-batch``, Gradescope, PrairieLearn and nbgrader's ``collect``; the rules are in
:mod:`autograder.delivery.submissions`). It lives here, in the lowest layer, because nbgrader's
pipeline may not import the delivery layer. The sandbox copies a submission with :func:`walk`.
Walking and unpacking are iterative and capped, so no upload can exhaust the recursion limit
or memory, and every refusal is one :class:`SubmissionError` whose message is the upload's
status, the same text on every path.
"""
from __future__ import annotations

import os
import stat
import zipfile
import zlib
from collections.abc import Collection, Iterator
from pathlib import Path, PurePosixPath
from typing import cast

from autograder.core.errors import AutograderError
from autograder.core.safe_text import safe_name
from autograder.core.settings import DEFAULTS, Limits

# The upload sizes (folders deep, entries, bytes of a file and of a zip) are the course's
# ``upload_*`` limits (autograder/core/settings.py): far more than any real layout needs.
STATUS_LIMIT = 300  # characters of a status: one gradebook cell, the same whole text on every path
SHOWN = 60  # characters of one path in a status (its end: the file's own name)
LISTED = 4  # names a status lists at most


class SubmissionError(AutograderError):
    """The submission cannot be graded at all; the message is its status (exit code 2)."""

    exit_code = 2


class NothingFound(SubmissionError):
    """None of the wanted files is in the upload (the CLI grades such a folder as it is: each
    unit then says its file was not found)."""


def _refusal(text: str, kind: type[SubmissionError] = SubmissionError) -> SubmissionError:
    return kind(text if len(text) <= STATUS_LIMIT else text[: STATUS_LIMIT - 1] + "…")


def _show(path: object) -> str:
    text = safe_name(path)
    return text if len(text) <= SHOWN else "…" + text[-(SHOWN - 1):]


def _listed(names: list[str]) -> str:
    shown = [_show(n) for n in names[:LISTED]]
    if len(names) > LISTED:
        return ", ".join(shown) + f" and {len(names) - LISTED} more"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + f" and {shown[-1]}"


def walk(folder: Path, limits: Limits = DEFAULTS) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry below ``folder`` with its ``lstat``, shallowest first, never following links.

    Raises SubmissionError past ``limits.upload_depth`` folders or ``limits.upload_entries`` entries.
    """
    max_depth, max_entries = limits.upload_depth, limits.upload_entries
    seen, level = 0, [folder]
    for depth in range(max_depth + 1):
        below = []
        for top in level:
            with os.scandir(top) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    seen += 1
                    if seen > max_entries:
                        raise SubmissionError(f"the upload holds more than {max_entries} files and folders")
                    info = entry.stat(follow_symlinks=False)
                    yield Path(entry.path), info
                    if stat.S_ISDIR(info.st_mode):
                        below.append(Path(entry.path))
        if not below:
            return
        level = below
    raise SubmissionError(f"the upload is nested more than {max_depth} folders deep")


def read_regular(path: Path, limit: int) -> bytes | None:
    """The first ``limit`` bytes of ``path`` if it is a regular file now, else None: never
    through a link (``O_NOFOLLOW``), never waiting on a pipe (``O_NONBLOCK``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None


def intake(source: Path, dest: Path, wanted: Collection[str], *, max_bytes: int | None = None,
           limits: Limits = DEFAULTS) -> dict[str, Path | None]:
    """Copy each file named in ``wanted`` from the upload ``source`` (a folder, or a .zip) into
    ``dest`` under its own name; returns name -> the file it came from (None: out of a zip).
    ``limits``: the course's upload sizes; ``max_bytes``: one wanted file's (default ``limits.upload_file_bytes``).

    Raises :class:`SubmissionError` when the upload is refused, :class:`NothingFound` when it
    holds none of ``wanted`` (``dest`` exists either way). The rules are
    :mod:`autograder.delivery.submissions`'.
    """
    max_bytes = limits.upload_file_bytes if max_bytes is None else max_bytes
    dest.mkdir(parents=True, exist_ok=True)
    try:
        info = source.lstat()
    except OSError as error:
        raise _refusal(f"the upload cannot be read ({error.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise _refusal("the upload is a symlink; links are not followed: upload the folder or zip itself")
    if stat.S_ISREG(info.st_mode) and source.suffix == ".zip":
        return _from_zip(source, None, dest, wanted, max_bytes, limits)
    if not stat.S_ISDIR(info.st_mode):
        raise _refusal("the upload is neither a folder nor a .zip file")
    candidates: dict[str, list[PurePosixPath]] = {}
    names, zips = [], []
    try:
        for path, info in walk(source, limits):
            rel = PurePosixPath(path.relative_to(source).as_posix())
            names.append(path.name)
            if path.name in wanted and not stat.S_ISDIR(info.st_mode):
                _check(rel, info.st_mode, info.st_size, max_bytes)
                candidates.setdefault(path.name, []).append(rel)
            elif stat.S_ISLNK(info.st_mode) and path.is_dir():  # (the type of its target: nothing in it is read)
                # What lies behind it is never looked at, so it may hide a copy of a wanted file.
                raise _refusal(f"{_show(rel)} is a symlink to a folder; links are not followed: "
                               "upload the folder itself")
            elif len(rel.parts) == 1 and path.suffix == ".zip" and stat.S_ISREG(info.st_mode):
                zips.append(path)
    except OSError as error:
        where = Path(error.filename or source)
        shown = _show(where.relative_to(source)) if where != source and where.is_relative_to(source) else "the upload"
        raise _refusal(f"{shown} cannot be read ({error.strerror})") from None
    if not candidates and len(zips) == 1:  # an upload of one zip holding the files (as Gradescope allows)
        return _from_zip(zips[0], zips[0].name, dest, wanted, max_bytes, limits)
    if not candidates:
        raise _nothing(wanted, names)
    taken: dict[str, Path | None] = {}
    for name, places in candidates.items():
        rel = _choose(name, places)
        data = read_regular(source / rel, max_bytes + 1)
        if data is None:  # it was one a moment ago: changed under us, or unreadable
            raise _refusal(f"{_show(rel)} cannot be read as a regular file")
        if len(data) > max_bytes:
            raise _too_large(rel, max_bytes)
        (dest / name).write_bytes(data)
        taken[name] = source / rel
    return taken


def _check(shown: object, mode: int, size: int, max_bytes: int) -> None:
    """A file named like a wanted one must be a regular file within ``max_bytes``, wherever it is."""
    if stat.S_ISLNK(mode):
        raise _refusal(f"{_show(shown)} is a symlink; links are not followed: upload the file itself")
    if not stat.S_ISREG(mode):
        raise _refusal(f"{_show(shown)} is not a regular file (a pipe, socket or device): upload the file itself")
    if size > max_bytes:
        raise _too_large(shown, max_bytes)


def _too_large(shown: object, max_bytes: int) -> SubmissionError:
    return _refusal(f"{_show(shown)} is larger than {max_bytes / 2**20:g} MiB, the limit for one file")


def _nothing(wanted: Collection[str], names: list[str]) -> NothingFound:
    found = _listed(sorted(names)) if names else "nothing"
    return cast(NothingFound, _refusal(
        f"no unit files found (expected some of {', '.join(sorted(wanted))}; found {found})", NothingFound))


def _choose(name: str, places: list[PurePosixPath], within: str = "") -> PurePosixPath:
    """The one copy of ``name`` to grade: the only one, or the one at the top level of the upload
    (the clear intent: the others are then backups); two copies elsewhere are the student's to
    settle. ``within``: what the status puts before each place (the zip they are in)."""
    top = [p for p in places if len(p.parts) == 1]
    if len(places) == 1 or len(top) == 1:
        return (top or places)[0]
    count = "two" if len(places) == 2 else str(len(places))
    raise _refusal(f"{count} copies of {name}: {_listed([within + str(p) for p in places])}; keep one, or put "
                   "the one to grade at the top level of the upload")


def _from_zip(archive: Path, label: str | None, dest: Path, wanted: Collection[str], max_bytes: int,
              limits: Limits) -> dict[str, Path | None]:
    """The wanted members of ``archive`` (the upload itself when ``label`` is None, else the
    zip of that name in the upload folder), by the same rules as a folder's files."""
    where, within = ("the upload", "") if label is None else (_show(label), f"{label}/")
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if len(members) > limits.upload_entries:
                raise _refusal(f"{where} holds more than {limits.upload_entries} members")
            if sum(m.file_size for m in members) > limits.upload_zip_bytes:
                raise _refusal(f"{where} unpacks to more than {limits.upload_zip_bytes // 2**20} MiB")
            candidates: dict[str, list[PurePosixPath]] = {}
            chosen: dict[PurePosixPath, zipfile.ZipInfo] = {}
            for member in members:
                path = PurePosixPath(member.filename)
                if member.filename.startswith("/") or ".." in path.parts:
                    raise _refusal(f"{where} holds a path outside the upload: {_show(member.filename)}")
                if len(path.parts) > limits.upload_depth:
                    raise _refusal(f"{where} holds a member nested more than {limits.upload_depth} folders deep")
                if member.is_dir() or path.name not in wanted:
                    continue
                # Many zips record no file type (Windows', Python's writestr): a regular file, as it unpacks.
                mode = member.external_attr >> 16
                mode |= 0 if stat.S_IFMT(mode) else stat.S_IFREG
                _check(within + member.filename, mode, member.file_size, max_bytes)
                candidates.setdefault(path.name, []).append(path)
                chosen[path] = member
            if not candidates:
                raise _nothing(wanted, sorted(PurePosixPath(m.filename).name for m in members))
            for name, places in candidates.items():
                # zipfile unpacks no more than the size checked above (the header's).
                with zf.open(chosen[_choose(name, places, within)]) as handle:
                    (dest / name).write_bytes(handle.read())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, RuntimeError, NotImplementedError,
            zlib.error) as error:
        raise _refusal(f"{where} is not a readable zip file ({safe_name(error)})") from None
    except OSError as error:
        raise _refusal(f"{where} is not a readable zip file ({error.strerror or safe_name(error)})") from None
    return dict.fromkeys(candidates)
