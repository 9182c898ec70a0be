"""Turn what a student handed in (a folder, some files, or a zip) into a clean
submission folder holding only the course's unit files.

Nothing is trusted: symlinks and special files are refused, zip members may
not escape the folder, and sizes are capped, so a broken or hostile upload
gets a clear status instead of stopping a batch.
"""
from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from .manifest import Course

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_ZIP_BYTES = 20 * 1024 * 1024


class SubmissionError(Exception):
    """The submission cannot be graded at all; the message is its status."""


def _unzip(archive: Path, dest: Path) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if sum(m.file_size for m in members) > MAX_ZIP_BYTES:
                raise SubmissionError(f"{archive.name} unpacks to more than {MAX_ZIP_BYTES // 2**20} MiB")
            for member in members:
                target = (dest / member.filename).resolve()
                if not target.is_relative_to(dest.resolve()):
                    raise SubmissionError(f"{archive.name} holds a path outside the submission: {member.filename}")
                if (member.external_attr >> 16) & 0o170000 == 0o120000:
                    raise SubmissionError(f"{archive.name} holds a symlink: {member.filename}")
            zf.extractall(dest)
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise SubmissionError(f"{archive.name} is not a readable zip file ({error})") from None


def _walk(folder: Path) -> list[Path]:
    """Every entry below ``folder`` that is not a directory, never following symlinks."""
    return [Path(top) / name for top, dirs, files in os.walk(folder) for name in files + [d for d in dirs if (Path(top) / d).is_symlink()]]


def collect(source: Path, dest: Path, course: Course) -> Path:
    """Copy the unit files found in ``source`` (a folder or a zip) into ``dest``.

    A unit file may sit in a sub-folder (zips often add one); the shallowest
    copy wins. Raises SubmissionError when nothing gradable is there.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
        raise SubmissionError(f"{source.name} is a symlink; submissions must be real files")
    if source.is_file() and source.suffix == ".zip":
        unpacked = dest.with_name(dest.name + ".unzipped")
        unpacked.mkdir(parents=True, exist_ok=True)
        _unzip(source, unpacked)
        try:
            return collect(unpacked, dest, course)
        finally:
            shutil.rmtree(unpacked, ignore_errors=True)
    if not source.is_dir():
        raise SubmissionError(f"{source.name} is neither a folder nor a .zip file")
    wanted = {u.file for u in course.units.values()}
    found: dict[str, Path] = {}
    for path in sorted(_walk(source), key=lambda p: (len(p.parts), str(p))):
        if path.name not in wanted or path.name in found:
            continue
        if path.is_symlink() or not path.is_file():
            raise SubmissionError(f"{path.name} is a symlink or not a regular file; it was refused")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise SubmissionError(f"{path.name} is larger than {MAX_FILE_BYTES // 2**20} MiB")
        found[path.name] = path
    zips = sorted(p for p in source.iterdir() if p.suffix == ".zip" and p.is_file() and not p.is_symlink())
    if not found and len(zips) == 1:  # an upload of one zip holding the files (as Gradescope allows)
        return collect(zips[0], dest, course)
    if not found:
        names = sorted(p.name for p in _walk(source))[:8]
        raise SubmissionError(
            f"no unit files found (expected some of {', '.join(sorted(wanted))}; found {', '.join(names) or 'nothing'})"
        )
    for name, path in found.items():
        shutil.copyfile(path, dest / name)
    return dest
