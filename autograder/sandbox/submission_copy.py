"""A submission copied into a worker's box: every file at most once, nothing followed out of the
folder, within the course's copy limits, owned by the worker's uid."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from autograder.core.i18n import N_
from autograder.core.settings import DEFAULTS, Limits
from autograder.trust.uploads import SubmissionError, walk

SKIPPED = {"__pycache__", ".git", ".ipynb_checkpoints", ".venv", "node_modules"}


def copy_submission(folder: Path, box: Path, uid: int | None,
                    limits: Limits = DEFAULTS) -> tuple[list[str], str | None]:
    """Copy ``folder``'s files into ``box`` without recursion, within the limits of
    :func:`autograder.trust.uploads.walk` and ``limits``' copy sizes (the box holds ``box_tmp``);
    returns the paths refused (links that leave the folder) and why the submission cannot be
    graded at all (or None)."""
    refused, total = [], 0
    box.mkdir(mode=0o700)
    try:
        for source, info in walk(folder, limits):
            rel = source.relative_to(folder)
            if any(part in SKIPPED for part in rel.parts):
                continue
            if stat.S_ISDIR(info.st_mode):
                (box / rel).mkdir(mode=0o700)
                continue
            if stat.S_ISLNK(info.st_mode):
                target = Path(os.path.realpath(source))
                if not target.is_relative_to(folder):
                    refused.append(str(rel))
                    continue
                source = target
            try:
                size = source.stat().st_size
                if (not source.is_file() or size > limits.copy_file_bytes or total + size > limits.copy_bytes
                        or not (box / rel).parent.is_dir()):
                    continue
                total += size
                shutil.copyfile(source, box / rel)
            except OSError:
                continue
    except SubmissionError as error:
        return refused, N_("the submission cannot be graded: {problem}").format(problem=error)
    except OSError as error:
        return refused, N_("the submission cannot be read: {problem}").format(problem=error.strerror or error)
    if uid is not None:
        for path, _ in [(box, None), *walk(box, limits)]:
            os.lchown(path, uid, uid)
    return refused, None
