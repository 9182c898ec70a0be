"""A class's code similarity, MOSS-style: every pair of students, unit by unit.

``report`` reads a class, either a ``grade-batch`` submissions folder (one sub-folder or zip per
student, named as :func:`autograder.delivery.batch.discover` names them, read through the one
intake, :func:`autograder.delivery.submissions.collect`) or an nbgrader course folder (its
``submitted/<student>/<unit>/<unit>.ipynb``, read through the same intake; the student's code is
the notebook's unlocked code cells). Each unit file (the manifest's) is compared with the same
unit's file of every other student by ``copydetect``'s winnowed fingerprints, with the released
stub (the manifest's assignments folder; for nbgrader also the released notebook's code) as
boilerplate, so that what every student was handed matches nothing.

Out come ``similarity.csv`` (every pair compared, the most similar first) and ``similarity.html``
(copydetect's own report: the pairs above the threshold, their matched regions highlighted).

``copydetect`` hashes k-grams with Python's ``hash``, salted per process: the comparison
(:mod:`.similarity_compare`) runs in a child interpreter with string hashes fixed, so the same class
gives the same report on every run and machine (the child is also where matplotlib, which the
HTML's plots need, is imported).
"""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autograder.core.errors import UsageError
from autograder.authoring.stubgen import clear_regions
from autograder.core.manifest import Course, Unit
from autograder.core.safe_text import csv_cell, safe_name
from autograder.trust.uploads import SubmissionError, intake
from autograder.delivery.atomic import atomic_write
from autograder.delivery.similarity_compare import rank
from autograder.delivery.submissions import collect
from autograder.core.errors import GraderError

DEFAULT_THRESHOLD = 0.5  # independent correct versions of this repository's units measure 0.02-0.22
COLUMNS = ("unit", "student_a", "student_b", "similarity_a_to_b", "similarity_b_to_a", "tokens_overlapping")
NBGRADER_CONFIG = "nbgrader_config.py"


@dataclass(frozen=True)
class Pair:
    """Two students' files of one unit. ``a_to_b``: the share of a's fingerprinted tokens (the
    boilerplate's excluded) that b's file holds too; ``tokens``: how many of a's tokens those are."""

    unit: str
    student_a: str
    student_b: str
    a_to_b: float
    b_to_a: float
    tokens: int

    @property
    def score(self) -> float:
        return max(self.a_to_b, self.b_to_a)


@dataclass
class Report:
    """What :func:`report` found and wrote."""

    pairs: list[Pair]  # ranked: the most similar first
    students: list[str]
    skipped: list[tuple[str, str]]  # (upload or student, why it was not compared)
    threshold: float
    csv: Path
    html: Path
    shown: int = 0  # pairs in the HTML: those above the threshold, at most HTML_PAIRS of them

    @property
    def flagged(self) -> list[Pair]:
        return [p for p in self.pairs if p.score > self.threshold]


# -- reading a class ----------------------------------------------------------------------------

def is_nbgrader_course(folder: Path) -> bool:
    """An nbgrader course folder: its config and its ``submitted/`` (where ``collect`` puts the notebooks)."""
    return (folder / NBGRADER_CONFIG).is_file() and (folder / "submitted").is_dir()


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _batch_files(course: Course, folder: Path, units: list[Unit], tmp: Path, skipped: list) -> dict[str, dict[str, str]]:
    """student -> unit -> file text, from a grade-batch submissions folder."""
    from autograder.delivery.batch import discover  # grade-batch's own naming, clashes refused alike

    students, refused = discover(folder)
    skipped += [(", ".join(r["uploads"]), r["reason"]) for r in refused]
    found: dict[str, dict[str, str]] = {}
    for i, student in enumerate(students):
        try:
            taken = collect(student.source, tmp / f"{i:05d}", course)
        except SubmissionError as error:  # NothingFound included: nothing to compare
            skipped.append((student.name, str(error)))
            continue
        for unit in units:
            if (taken / unit.file).is_file():
                text = _read_text(taken / unit.file)
                if text is None:
                    skipped.append((student.name, f"{unit.file} is not UTF-8 text"))
                else:
                    found.setdefault(student.name, {})[unit.name] = text
    return found


def _cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def notebook_code(notebook: dict) -> str:
    """What a student wrote in a notebook: its code cells that nbgrader does not lock (answer
    cells, and cells of their own); the locked ones (the frame, the tests) are restored by nbgrader."""
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    return "\n\n".join(_cell_source(c) for c in cells or [] if isinstance(c, dict) and c.get("cell_type") == "code"
                       and not ((c.get("metadata") or {}).get("nbgrader") or {}).get("locked"))


def released_code(notebook: dict) -> list[str]:
    """A source notebook's code as students receive it (answer cells cleared as nbgrader's
    ClearSolutions clears them): all its code cells (frame, tests, demos), and the cells a student
    writes in, joined as :func:`notebook_code` joins them (so their seams are boilerplate too)."""
    released = json.loads(json.dumps(notebook))
    code = [c for c in released.get("cells") or [] if isinstance(c, dict) and c.get("cell_type") == "code"]
    for cell in code:
        if ((cell.get("metadata") or {}).get("nbgrader") or {}).get("solution"):
            cell["source"] = clear_regions(_cell_source(cell))
    return ["\n\n".join(_cell_source(c) for c in code), notebook_code(released)]


def _load_json(path: Path) -> dict | None:
    text = _read_text(path)
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _nbgrader_files(course: Course, folder: Path, units: list[Unit], tmp: Path,
                    skipped: list) -> dict[str, dict[str, str]]:
    """student -> unit -> the code they wrote, from an nbgrader course's ``submitted/``."""
    wanted = {f"{unit.name}.ipynb": unit for unit in units}
    found: dict[str, dict[str, str]] = {}
    entries = sorted(p for p in (folder / "submitted").iterdir() if not p.name.startswith("."))
    for i, student_dir in enumerate(entries):
        name = safe_name(student_dir.name)
        try:
            taken = intake(student_dir, tmp / f"{i:05d}", wanted, max_bytes=course.limits.notebook_bytes,
                           limits=course.limits)
        except SubmissionError as error:
            skipped.append((name, str(error)))
            continue
        for notebook_name in taken:
            data = _load_json(tmp / f"{i:05d}" / notebook_name)
            if data is None:
                skipped.append((name, f"{notebook_name} is not a readable notebook"))
            else:
                found.setdefault(name, {})[wanted[notebook_name].name] = notebook_code(data)
    return found


def read_class(course: Course, folder: Path, units: list[Unit],
               tmp: Path) -> tuple[dict[str, dict[str, str]], dict[str, list[str]], list[tuple[str, str]]]:
    """(student -> unit -> text, unit -> boilerplate texts, skipped) for ``folder``."""
    skipped: list[tuple[str, str]] = []
    boilerplate: dict[str, list[str]] = {}
    for unit in units:
        stub = _read_text(course.assignments / unit.file)
        if stub is None:
            raise UsageError(f"no released stub {course.assignments / unit.file}: run `{course.brand.command} build`")
        boilerplate[unit.name] = [stub]
    if (folder / NBGRADER_CONFIG).is_file() and not is_nbgrader_course(folder):
        raise UsageError(f"{folder} is an nbgrader course with no submitted/ folder: collect the notebooks first")
    if is_nbgrader_course(folder):
        for unit in units:
            source = _load_json(folder / "source" / unit.name / f"{unit.name}.ipynb")
            if source is not None:
                boilerplate[unit.name] += released_code(source)
        files = _nbgrader_files(course, folder, units, tmp, skipped)
    else:
        files = _batch_files(course, folder, units, tmp, skipped)
    return files, boilerplate, skipped


def _compare_in_child(job: dict, tmp: Path) -> list[list]:
    (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
    # The child imports this engine from where this process did, whatever the working folder.
    engine_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (engine_root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-m", "autograder.delivery.similarity_compare", str(tmp / "job.json"),
                           str(tmp / "pairs.json")],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise GraderError(f"the similarity comparison failed: {' '.join(done.stderr.split()[-60:])}")
    return json.loads((tmp / "pairs.json").read_text(encoding="utf-8"))


# -- the report ---------------------------------------------------------------------------------

def report(course: Course, folder: Path, out: Path, units: list[str] | None = None,
           threshold: float = DEFAULT_THRESHOLD) -> Report:
    """Compare every pair of students of ``folder`` unit by unit; write ``out/similarity.csv`` and
    ``out/similarity.html``."""
    if not 0 <= threshold <= 1:
        raise UsageError(f"the threshold is a share of a file, from 0 to 1, not {threshold:g}")
    chosen = course.select(units)
    out.mkdir(parents=True, exist_ok=True)
    html = (out / "similarity.html").resolve()
    with tempfile.TemporaryDirectory(prefix="attn-similarity-") as tmp:
        files, boilerplate, skipped = read_class(course, folder, chosen, Path(tmp) / "class")
        entries = [[unit.name, student, unit.file, files[student][unit.name]]
                   for unit in chosen for student in sorted(files) if unit.name in files[student]]
        job = {"entries": entries, "boilerplate": boilerplate, "threshold": threshold, "html": str(html)}
        found = _compare_in_child(job, Path(tmp)) if len(entries) > 1 else []
    order = {unit.name: n for n, unit in enumerate(chosen)}
    pairs = sorted((Pair(entries[i][0], entries[i][1], entries[j][1], a, b, tokens) for i, j, a, b, tokens, _ in found),
                   key=lambda p: (rank(p.a_to_b, p.b_to_a, p.tokens), order[p.unit], p.student_a, p.student_b))
    if not pairs:  # copydetect writes no report without a pair to compare: say so in its place
        atomic_write(html, "<!DOCTYPE html><html><body><p>No two students handed in the same unit: nothing "
                         "was compared.</p></body></html>\n")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([p.unit, csv_cell(p.student_a), csv_cell(p.student_b), f"{p.a_to_b:.4f}", f"{p.b_to_a:.4f}",
                      p.tokens] for p in pairs)
    atomic_write(out / "similarity.csv", buffer.getvalue())
    return Report(pairs, sorted(files), skipped, threshold, out / "similarity.csv", html,
                  shown=sum(1 for *_, shown in found if shown))
