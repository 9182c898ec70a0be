"""One intake for every path: turn what a student handed in (a folder, or a zip) into a clean
folder holding only the files that get graded.

The CLI's ``grade`` (each folder argument), ``grade-batch`` (each student), Gradescope and
PrairieLearn (the upload) take a submission through :func:`collect`, and nbgrader's
``collect`` (each student's inbox folder, for ``<unit>.ipynb``) through the same routine,
:func:`autograder.trust.uploads.intake`, with the notebooks' names as the wanted ones. So the
same upload gets the same status text on every path. Nothing in the upload is trusted:

* **Nothing is followed.** The upload itself may not be a symlink; a file named like a wanted
  one (a unit file, or a unit's notebook) must be a regular file, wherever it lies: a symlink,
  a pipe, a socket or a device of that name refuses the upload, naming it. A symlink to a folder
  refuses it wherever it lies, since what is behind it is never looked at and could be a copy of
  a wanted file. Anything else (a link to a file of another name, a stray pipe) is never opened,
  so it is left alone: an upload of a whole repository keeps working.
* **Bounds.** At most 32 folders deep and 10,000 files and folders (a zip: members), at most
  2 MiB a unit file (16 MiB a notebook, whose outputs hold plots) and 20 MiB for a zip's members
  together (the defaults of the course's ``[limits]``, :mod:`autograder.core.settings`); walking and
  unpacking are iterative, and only the wanted files are read (a 20 GiB
  sparse file beside them costs nothing). A zip member may not leave the upload (``/`` or ``..``).
* **One copy of each file.** A wanted file may sit in a sub-folder (zips often add one). Two
  copies of one name (``backup/attention.py`` and ``final/attention.py``, at any depths) are
  an error that names both, never a choice made for the student; except that a copy at the top
  level of the upload is graded over copies below it: putting it there is the clear intent,
  the others are backups.
* **Zips.** A zip upload is unpacked (only the wanted members are written). So is an upload
  folder holding no wanted file and exactly one zip at its top level (as Gradescope uploads
  come); a zip inside a zip never is.
* **Nothing gradable.** An upload with none of the wanted files is "no unit files found
  (expected ...; found ...)" on the delivery paths; the CLI grades such a folder as it always
  did, each unit saying that its file was not found.

A refusal is the whole upload's, on every path: ``grade-batch``'s status column, Gradescope's
message (score 0), PrairieLearn's ``format_errors`` (no attempt spent), each unit's message in
the CLI's report (0 of its points), and a printed line of nbgrader's ``collect``, which then
collects none of that student's notebooks. Statuses are one line of at most 300 characters, and
the names they show pass :func:`autograder.core.safe_text.safe_name`.
"""
from __future__ import annotations

from pathlib import Path

from autograder.core.manifest import Course
from autograder.trust.uploads import NothingFound, SubmissionError, intake

__all__ = ["NothingFound", "SubmissionError", "collect"]


def collect(source: Path, dest: Path, course: Course) -> Path:
    """Copy the course's unit files found in ``source`` (a folder or a zip) into ``dest``, by the
    rules above; raises SubmissionError (NothingFound when none is there) with the upload's status."""
    intake(source, dest, {u.file for u in course.units.values()}, limits=course.limits)
    return dest
