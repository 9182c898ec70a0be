"""The gradebooks Canvas and Moodle import as they are: the instructor's own export, with the
course's columns filled in (and the nbgrader export read back as records).

Cells are written with :func:`autograder.core.safe_text.csv_cell`, as every CSV here is.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograder.core.errors import UsageError
from autograder.core.safe_text import csv_cell
from autograder.delivery.lms_settings import MOODLE_IDENTIFIERS, LmsSettings, fold
from autograder.delivery.formats import POINTS_POSSIBLE, graded, one_line, unit_score

# -- LMS gradebooks -------------------------------------------------------------------------
# Canvas and Moodle each import the layout they export, so an LMS gradebook is the instructor's
# own export with the course's columns filled in: its header, its students with their IDs, every
# other cell as it was. The layouts' sources: tests/vendor/lms/SOURCE.md.

LMS_LAYOUTS = ("canvas", "moodle")
FOLDER = "folder"  # a roster column naming a student's upload, as grade-batch names it (after --map)

# Canvas (instructure/canvas-lms: lib/gradebook_exporter.rb writes the export, lib/gradebook_importer.rb reads it).
CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")  # a roster's identity columns
CANVAS_POINTS_LABEL = "    Points Possible"  # the exporter's label, four spaces and all
CANVAS_STUDENT_COLUMNS = ("Student", "LastName", "FirstName", "ID", "SIS User ID", "SIS Login ID",
                          "Integration ID", "Root Account", "Section")  # the importer's reserved names
CANVAS_KEYS: tuple[str, ...] = ("ID", "SIS User ID", "SIS Login ID")  # what the importer finds a student by
CANVAS_KEPT = frozenset({"EX", "N/A"})  # excused, not assigned to the student: the instructor's cells, kept
# The read-only totals (with "Unposted ", an assignment group's name before, a grading period's after).
_CANVAS_TOTALS = re.compile("Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade"
                            "|Override Score|Override Grade|Override Status")
_CANVAS_ASSIGNMENT = re.compile(r"\A(.*)\s\((\d+)\)\Z", re.S)  # Assignment.title_and_id: "<title> (<id>)"
_CANVAS_HIDDEN = re.compile(r"\A\s*(Muted|Manual Posting.*)?\s*\Z", re.I | re.S)  # a row the importer skips

# Moodle (grade/export/txt writes "<Module>: <item> (Real)"; grade/import/csv maps users by one column).
MOODLE_MAX = 100  # the largest grade Moodle imports unless the site sets unlimitedgrades
_MOODLE_COLUMN = re.compile(r"\A(.*) \((Real|Percentage|Letter|Feedback)\)\Z", re.S)

# A number as an LMS writes one, or Moodle's "-" (no grade): never a formula, so written as it is.
_NUMBER = re.compile(r"\A(?:-?\d+(?:[.,]\d+)?%?|-)\Z")




def _num(value: float) -> str:
    return f"{float(value):g}"


def _float(text: str) -> float | None:
    try:
        return float(text.strip().replace(",", "."))
    except (AttributeError, ValueError):
        return None


def _copied(text: str) -> str:
    """A cell of the LMS's export, written back: a number as it was, any text through :func:`csv_cell`."""
    return text.strip() if _NUMBER.match(text.strip()) else csv_cell(text)


@dataclass
class LmsRoster:
    """An LMS's gradebook export as read: its header, its students' rows (each as long as the
    header) and, from Canvas, its "Points Possible" and "Manual Posting" rows."""

    layout: str
    header: list[str]
    students: list[list[str]]
    points: list[str] | None = None
    hidden: list[str] | None = None
    delimiter: str = ","


def _delimiter(text: str) -> str:
    """The separator that splits the header into the most cells (a comma on a tie): Canvas writes
    ``;`` in locales with a decimal comma, Moodle's export offers tab, ``;`` and ``:`` too."""
    first = text.split("\n", 1)[0]
    counts = {d: len(next(csv.reader([first], delimiter=d), [])) for d in ",;\t:"}
    return max(counts, key=lambda d: (counts[d], d == ","))


def read_lms_roster(layout: str, path: Path) -> LmsRoster:
    """The roster of an LMS gradebook: for ``canvas``, Canvas's gradebook export (Grades > Export),
    or a CSV with a ``folder`` column and any of Student, ID, SIS User ID, SIS Login ID, Section; for
    ``moodle``, Moodle's grade export as a plain text file, or any CSV with the column its import
    finds users by (``[lms] moodle_identifier``). A ``folder`` column, if any, names each student's
    upload and is left out of the gradebook."""
    if layout not in LMS_LAYOUTS:
        raise UsageError(f"no LMS layout {layout!r}; the layouts are {', '.join(LMS_LAYOUTS)}")
    text = path.read_text(encoding="utf-8-sig")
    delimiter = _delimiter(text)
    rows = [row for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter) if any(c.strip() for c in row)]
    if not rows:
        raise UsageError(f"{path}: empty")
    header = [cell.strip() for cell in rows[0]]
    width = len(header)
    body = []
    for row in rows[1:]:
        if any(cell.strip() for cell in row[width:]):
            raise UsageError(f"{path}: a row has {len(row)} cells, the header {width}")
        body.append((row + [""] * width)[:width])
    if layout == "moodle":
        return LmsRoster("moodle", header, body, delimiter=delimiter)
    canvas = header[:2] == ["Student", "ID"] or header[:3] == ["LastName", "FirstName", "ID"]
    if not canvas and FOLDER in header:  # a roster of uploads and Canvas's identity columns
        cells = [dict(zip(header, row)) for row in body]
        students = [[(c.get(k) or "").strip() or (c[FOLDER].strip() if k == "Student" else "") for k in CANVAS_IDENTITY]
                    + [c[FOLDER].strip()] for c in cells]
        return LmsRoster("canvas", [*CANVAS_IDENTITY, FOLDER], students, delimiter=delimiter)
    if not canvas:
        raise UsageError(f"{path}: not a Canvas gradebook export (Grades > Export), whose header starts "
                         f"Student, ID; this one starts {', '.join(header[:3])}")
    roster = LmsRoster("canvas", header, [], delimiter=delimiter)
    for row in body:
        if row[0].strip() == POINTS_POSSIBLE:
            roster.points = row
        elif all(_CANVAS_HIDDEN.match(cell) for cell in row):
            roster.hidden = row
        else:
            roster.students.append(row)
    return roster


@dataclass
class _Plan:
    header: list[str]  # the gradebook's header
    keep: list[int]  # the roster's columns it keeps, in order (all but folder)
    grade: dict[str, int]  # unit -> its column in the gradebook
    feedback: dict[str, int]  # unit -> its feedback column (Moodle)
    warnings: list[str]


def _canvas_column(header: list[str], width: int, unit: str, settings: LmsSettings) -> int | None:
    columns = {i: m for i in range(width) if header[i] not in CANVAS_STUDENT_COLUMNS
               and not _CANVAS_TOTALS.search(header[i]) and (m := _CANVAS_ASSIGNMENT.match(header[i]))}
    wanted, cid = settings.wanted(unit), settings.canvas_ids.get(unit)
    found = [i for i, m in columns.items() if (m[2] == cid if cid else fold(m[1]) in wanted)]
    if len(found) > 1:
        raise UsageError(f"unit {unit}: {len(found)} columns of the Canvas export match it "
                         f"({'; '.join(header[i] for i in found)}): set [lms] canvas_ids.{unit}")
    if not found and not cid:
        titles = "; ".join(m[0] for m in columns.values()) or "none"
        raise UsageError(f"unit {unit}: no assignment of the Canvas export is titled {settings.label(unit)!r} "
                         f"(its assignments: {titles}); set [lms] canvas_ids.{unit} (or names.{unit})")
    return found[0] if found else None


def _moodle_names(header: str) -> set[str]:
    """The grade item names a Moodle column stands for: ``Assignment: Essay (Real)`` is "Assignment:
    Essay" and "Essay"; a Percentage, Letter or Feedback column is none."""
    m = _MOODLE_COLUMN.match(header)
    if m and m[2] != "Real":
        return set()
    base = m[1] if m else header
    return {fold(base), *([fold(base.split(": ", 1)[1])] if ": " in base else [])}


def _moodle_base(header: str) -> str:
    m = _MOODLE_COLUMN.match(header)
    return m[1] if m else header


def _plan(layout: str, roster: LmsRoster, names: list[str], settings: LmsSettings) -> _Plan:
    if roster.layout != layout:
        raise UsageError(f"a {roster.layout} roster cannot make a {layout} gradebook")
    keep = [i for i, h in enumerate(roster.header) if h != FOLDER]
    header = [roster.header[i] for i in keep]
    owner: dict[int, str]  # a gradebook column -> the unit it holds
    width, grade, feedback, warnings, owner = len(header), {}, {}, [], {}
    identifier = settings.moodle_identifier
    if layout == "moodle" and identifier not in header:
        raise UsageError(f"the Moodle roster has no {identifier!r} column ([lms] moodle_identifier): its columns "
                         f"are {', '.join(header)}")

    def add(title: str) -> int:
        header.append(title)
        return len(header) - 1

    for unit in names:
        if layout == "canvas":
            col = _canvas_column(header, width, unit, settings)
            if col is None:
                cid = settings.canvas_ids[unit]
                col = add(f"{settings.label(unit)} ({cid})")
                warnings.append(f"{unit}: the Canvas export has no column of assignment {cid}; the gradebook adds "
                                f"'{header[col]}', which Canvas fills by its id")
        else:
            found = [i for i in range(width) if header[i] not in (identifier, FOLDER)
                     and _moodle_names(header[i]) & settings.wanted(unit)]
            if len(found) > 1:
                raise UsageError(f"unit {unit}: {len(found)} columns of the Moodle roster match it "
                                 f"({'; '.join(header[i] for i in found)}): set [lms] names.{unit}")
            col = found[0] if found else add(settings.label(unit))
            if not found:
                warnings.append(f"{unit}: the roster has no grade item column named {settings.label(unit)!r}; the "
                                "gradebook adds one: map it to its grade item in Moodle's import")
            if settings.moodle_feedback:
                name = f"{_moodle_base(header[col])} (Feedback)"
                feedback[unit] = header.index(name) if name in header else add(name)
        if col in owner:
            raise UsageError(f"units {owner[col]} and {unit} both match the column {header[col]!r}: "
                             f"tell them apart in [lms] {'canvas_ids' if layout == 'canvas' else 'names'}")
        owner[col], grade[unit] = unit, col
    return _Plan(header, keep, grade, feedback, warnings)


def lms_columns(layout: str, roster: LmsRoster, names: list[str], settings: LmsSettings) -> dict[str, str]:
    """unit -> the header of its column in the gradebook. Raises ValueError where a unit matches no
    column of a Canvas export and has no Canvas id, matches several, or shares one: call it before
    grading, so a class is not graded for a gradebook that cannot be written."""
    plan = _plan(layout, roster, names, settings)
    return {unit: plan.header[col] for unit, col in plan.grade.items()}




def _cell(record: dict | None, unit: str) -> str:
    """A unit's grade cell: the score of graded work (a unit it holds no score for: blank, as nbgrader's
    export of a notebook not submitted), blank for anything else."""
    if not graded(record):
        return ""
    score = ((record or {}).get("result") or {}).get("units", {}).get(unit, {}).get("score")
    return "" if score is None else _num(score)


def _feedback(record: dict | None, unit: str, possible: dict[str, float]) -> str:
    if record is None:
        return "no upload matched this student"
    if not graded(record) or not _cell(record, unit):
        return f"not graded: {record.get('status') or 'no result'}"
    parts = [f"{_num(unit_score(record, unit))}/{_num(possible.get(unit, 0))}"]
    status = record.get("status") or ""
    if status and status != "graded":
        parts.append(status)
    message = ((record.get("result") or {}).get("units", {}).get(unit) or {}).get("message") or ""
    if message and message not in status:
        parts.append(message)
    return "; ".join(parts)


def _unmatched(record: dict, reason: str, names: list[str]) -> dict:
    return {"student": record["student"], "reason": reason, "status": record.get("status") or "",
            "scores": {unit: unit_score(record, unit) for unit in names if _cell(record, unit)}}


def _match(roster: LmsRoster, records: list[dict], keys: tuple[str, ...], required: tuple[str, ...],
           names: list[str]) -> tuple[dict[int, dict], set[int], list[dict], list[str]]:
    """Each record to the one roster row whose ``folder``, else one of whose ``keys``, is exactly its
    name. Returns (row -> record, rows left out, the records no row takes, warnings): a row with none of
    ``required`` is left out (the LMS could only guess whose it is), so is a row two uploads claim
    (until --map says whose each is), and their uploads are unmatched."""
    header = roster.header
    key_cols = [i for i, h in enumerate(header) if h in keys]
    folder = header.index(FOLDER) if FOLDER in header else None
    need = [i for i, h in enumerate(header) if h in required]
    by_folder: dict[str, set[int]] = {}
    by_key: dict[str, set[int]] = {}
    left_out, warnings = set(), []
    row: list[str] | int  # a roster row, then (the claims below) its index
    for r, row in enumerate(roster.students):
        if not any(row[i].strip() for i in need):
            left_out.add(r)
            warnings.append(f"roster row {r + 1} ({one_line(' '.join(row[:2]).strip())}) has no "
                            f"{' / '.join(required)}: left out, since the LMS could only guess whose it is")
            continue
        if folder is not None and row[folder].strip():
            by_folder.setdefault(row[folder].strip(), set()).add(r)
        for i in key_cols:
            if row[i].strip():
                by_key.setdefault(row[i].strip(), set()).add(r)
    claims: dict[int, list[dict]] = {}
    unmatched = []
    for record in records:
        rows = by_folder.get(record["student"]) or by_key.get(record["student"]) or set()
        if len(rows) == 1:
            claims.setdefault(next(iter(rows)), []).append(record)
        elif rows:
            unmatched.append(_unmatched(record, f"its name is on {len(rows)} roster rows", names))
        else:
            where = " or ".join(([FOLDER] if folder is not None else []) + [h for h in keys if h in header])
            unmatched.append(_unmatched(record, f"no roster row has it as its {where or 'identifier'}", names))
    matched = {}
    for row, claimants in claims.items():
        if len(claimants) == 1:
            matched[row] = claimants[0]
            continue
        left_out.add(row)
        uploads = ", ".join(r["student"] for r in claimants)
        warnings.append(f"roster row {row + 1}: uploads {one_line(uploads)} all match it; left out until --map says "
                        "whose each is")
        unmatched += [_unmatched(r, f"uploads {uploads} all match one roster row", names) for r in claimants]
    return matched, left_out, unmatched, warnings


@dataclass
class LmsGradebook:
    """An LMS's gradebook: ``text`` to import as it is, each unit's column, the uploads it holds
    no row for (write them down: :func:`unmatched_csv`), and what the instructor should check."""

    text: str
    columns: dict[str, str]
    unmatched: list[dict]
    warnings: list[str]
    no_upload: list[str] = field(default_factory=list)  # the roster's students no upload matched


def lms_gradebook(layout: str, names: list[str], possible: dict[str, float], records: list[dict],
                  roster: LmsRoster, settings: LmsSettings) -> LmsGradebook:
    """The gradebook ``layout`` (``canvas`` or ``moodle``) imports: ``roster`` (the LMS's own export,
    :func:`read_lms_roster`) with each unit of ``names`` in its column, from records of the shape
    :func:`gradebook_csv` takes (``student``, ``status``, ``result``).

    The header is the roster's (less a ``folder`` column), plus a column for a unit it lacks: on Canvas
    only one whose assignment id is configured, as ``<title> (<id>)``. The rows are the roster's
    students, in its order, with every cell but the units' as exported; a student matches the record
    whose name is the row's ``folder``, else its ID, SIS User ID or SIS Login ID (Canvas) or its
    Email address, ID number or Username (Moodle), exactly. Only graded work gets a number: a student
    no upload matches, or whose upload was refused or not graded, keeps the grade (and feedback) the
    LMS holds and is left blank where it holds none (never a 0 the import would take for a grade); a
    Canvas ``EX`` (excused) or ``N/A`` (not assigned) cell is kept. Canvas's "Points Possible" row carries each unit's
    points. Moodle's feedback column (``[lms] moodle_feedback``) holds the score and the status. A
    record no row takes is in ``unmatched``, never in the gradebook. Text cells pass
    :func:`csv_cell`; a number (or Moodle's ``-``) is written as it is."""
    if layout not in LMS_LAYOUTS:
        raise UsageError(f"no LMS layout {layout!r}; the layouts are {', '.join(LMS_LAYOUTS)}")
    plan = _plan(layout, roster, names, settings)
    warnings = list(plan.warnings)
    if layout == "canvas":
        keys = required = CANVAS_KEYS
    else:
        required = (settings.moodle_identifier,)
        keys = tuple(dict.fromkeys((settings.moodle_identifier, *MOODLE_IDENTIFIERS)))
    matched, left_out, unmatched, found = _match(roster, records, keys, required, names)
    warnings += found
    width = len(plan.header)

    def copied(row: list[str]) -> list[str]:
        return [_copied(row[i]) for i in plan.keep] + [""] * (width - len(plan.keep))

    table = io.StringIO()
    writer = csv.writer(table, delimiter=roster.delimiter, lineterminator="\n")
    writer.writerow([csv_cell(h) for h in plan.header])
    if layout == "canvas":
        if roster.hidden:
            writer.writerow(copied(roster.hidden))
        points = copied(roster.points) if roster.points else [""] * width
        points[0] = CANVAS_POINTS_LABEL
        for unit, col in plan.grade.items():
            theirs = _float(points[col])
            if theirs is not None and theirs != possible.get(unit, 0):
                warnings.append(f"{unit}: Canvas has {_num(theirs)} points possible for '{plan.header[col]}', the "
                                f"course {_num(possible.get(unit, 0))}; the import sets "
                                f"{_num(possible.get(unit, 0))}")
            points[col] = _num(possible.get(unit, 0))
        writer.writerow(points)
    elif any(possible.get(unit, 0) > MOODLE_MAX for unit in names):
        warnings.append(f"Moodle imports no grade over {MOODLE_MAX} unless the site allows unlimited grades "
                        "(unlimitedgrades, gradepointmax)")
    no_upload = []
    for r, row in enumerate(roster.students):
        if r in left_out:
            continue
        record, out = matched.get(r), copied(row)
        if record is None:
            no_upload.append(one_line(" ".join(c for c in row[:2] if c.strip()).strip()) or f"roster row {r + 1}")
        for unit, col in plan.grade.items():
            held, cell = out[col].strip(), _cell(record, unit)
            if layout == "canvas" and held.upper() in CANVAS_KEPT:
                continue  # the instructor's EX / N/A
            if cell or not held:
                out[col] = cell
            elif held != "-":
                continue  # a grade the LMS holds where nothing was graded stays, with its feedback
            if unit in plan.feedback:
                out[plan.feedback[unit]] = csv_cell(_feedback(record, unit, possible))
        writer.writerow(out)
    return LmsGradebook(table.getvalue(), {u: plan.header[c] for u, c in plan.grade.items()}, unmatched, warnings,
                        no_upload)


def unmatched_csv(names: list[str], unmatched: list[dict]) -> str:
    """The uploads an LMS gradebook holds no row for: student (the upload's name), why, its status,
    one column per unit and the total (blank where nothing was graded); every text cell through
    :func:`csv_cell`."""
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(["student", "reason", "status", *names, "total"])
    for entry in unmatched:
        scores = [entry["scores"].get(unit) for unit in names]
        given = [s for s in scores if s is not None]
        writer.writerow([csv_cell(entry["student"]), csv_cell(entry["reason"]), csv_cell(entry["status"]),
                         *("" if s is None else _num(s) for s in scores), _num(sum(given)) if given else ""])
    return table.getvalue()


def records_from_nbgrader_csv(path: Path) -> tuple[list[str], dict[str, float], list[dict]]:
    """(units, points possible, records) from the CSV of ``nbgrader export`` (one row per assignment
    and student: ``assignment``, ``student_id``, ``score``, ``max_score``, and the pipeline's
    ``status``), in the shape :func:`lms_gradebook` takes. A student's status is ``graded``, else each
    unit's status that is not. A blank score (a notebook not submitted, a student not collected) is
    no score: blank in the LMS's gradebook; a student with no score at all has no result."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.DictReader(handle))
    missing = {"assignment", "student_id", "score"} - set(rows[0] if rows else ())
    if rows and missing:
        raise UsageError(f"{path}: not nbgrader's export (no {', '.join(sorted(missing))} column)")
    possible: dict[str, float]  # unit -> its points possible
    students: dict[str, dict[str, dict]]  # student -> unit -> its record
    names, possible, students = [], {}, {}
    for row in rows:
        unit, student = row["assignment"].strip(), row["student_id"].strip()
        if unit not in names:
            names.append(unit)
        most = _float(row.get("max_score") or "")
        if most is not None:
            possible[unit] = max(possible.get(unit, 0), most)
        status = " ".join((row.get("status") or "graded").split()) or "graded"
        units = students.setdefault(student, {})
        score = _float(row.get("score") or "")
        units[unit] = {"status": status, "message": "" if status.startswith("graded") else status,
                       **({"score": score} if score is not None else {})}
    records = []
    for student, units in students.items():
        bad = [f"{unit}: {u['status']}" for unit, u in units.items() if u["status"] != "graded"]
        scored = {unit: u for unit, u in units.items() if "score" in u}
        records.append({"student": student, "status": "; ".join(bad) or "graded",
                        "result": {"units": units} if scored else None})
    return names, {n: possible.get(n, 0) for n in names}, records
