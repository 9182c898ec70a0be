"""Turn what a student handed in (a folder, some files, or a zip) into a clean
submission folder holding only the course's unit files.

Nothing is trusted: symlinks and special files are refused, zip members may
not escape the folder, and depth, entry counts and sizes are capped (walking
and unpacking are iterative, so no upload can exhaust the recursion limit or
memory), so a broken or hostile upload gets a clear status instead of
stopping a batch.
"""
from __future__ import annotations

import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

from autograder.core.manifest import Course
from autograder.core.uploads import MAX_DEPTH, MAX_ENTRIES, SubmissionError, walk

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_ZIP_BYTES = 20 * 1024 * 1024


def _unzip(archive: Path, dest: Path, wanted: set[str]) -> None:
    """Extract the members of ``archive`` named in ``wanted`` (and zips), refusing hostile layouts."""
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if len(members) > MAX_ENTRIES:
                raise SubmissionError(f"{archive.name} holds more than {MAX_ENTRIES} members")
            if sum(m.file_size for m in members) > MAX_ZIP_BYTES:
                raise SubmissionError(f"{archive.name} unpacks to more than {MAX_ZIP_BYTES // 2**20} MiB")
            for member in members:
                parts = PurePosixPath(member.filename).parts
                if member.filename.startswith("/") or ".." in parts:
                    raise SubmissionError(f"{archive.name} holds a path outside the submission: {member.filename[:200]}")
                if len(parts) > MAX_DEPTH:
                    raise SubmissionError(f"{archive.name} holds a member nested more than {MAX_DEPTH} folders deep")
                if (member.external_attr >> 16) & 0o170000 == 0o120000:
                    raise SubmissionError(f"{archive.name} holds a symlink: {member.filename[:200]}")
            for member in members:
                name = PurePosixPath(member.filename).name
                if member.is_dir() or not (name in wanted or name.endswith(".zip")):
                    continue  # only what grading can use is written to disk
                target = dest.joinpath(*PurePosixPath(member.filename).parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as error:
        raise SubmissionError(f"{archive.name} is not a readable zip file ({error})") from None


def collect(source: Path, dest: Path, course: Course, *, nested: bool = False) -> Path:
    """Copy the unit files found in ``source`` (a folder or a zip) into ``dest``.

    A unit file may sit in a sub-folder (zips often add one); the shallowest
    copy wins. A folder holding nothing but one zip is unpacked (one level,
    as Gradescope uploads). Raises SubmissionError when nothing gradable is there.
    """
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {u.file for u in course.units.values()}
    if source.is_symlink():
        raise SubmissionError(f"{source.name} is a symlink; submissions must be real files")
    if source.is_file() and source.suffix == ".zip":
        unpacked = dest.with_name(dest.name + ".unzipped")
        unpacked.mkdir(parents=True, exist_ok=True)
        try:
            _unzip(source, unpacked, wanted)
            return collect(unpacked, dest, course, nested=True)
        finally:
            shutil.rmtree(unpacked, ignore_errors=True)
    if not source.is_dir():
        raise SubmissionError(f"{source.name} is neither a folder nor a .zip file")
    found: dict[str, Path] = {}
    names, zips = [], []
    for path, info in walk(source):
        names.append(path.name)
        if path.parent == source and path.suffix == ".zip" and stat.S_ISREG(info.st_mode):
            zips.append(path)
        if path.name not in wanted or path.name in found:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError(f"{path.name} is a symlink or not a regular file; it was refused")
        if info.st_size > MAX_FILE_BYTES:
            raise SubmissionError(f"{path.name} is larger than {MAX_FILE_BYTES // 2**20} MiB")
        found[path.name] = path
    if not found and len(zips) == 1 and not nested:  # an upload of one zip holding the files (as Gradescope allows)
        return collect(zips[0], dest, course, nested=True)
    if not found:
        shown = sorted(names)[:8]
        raise SubmissionError(
            f"no unit files found (expected some of {', '.join(sorted(wanted))}; found {', '.join(shown) or 'nothing'})"
        )
    for name, path in found.items():
        shutil.copyfile(path, dest / name)
    return dest
