"""The nbgrader notebooks: generated from ``solutions/`` and the lesson text.

``course/source/<unit>/<unit>.ipynb`` is never edited by hand. It is built
here, cell by cell, with nbformat:

* the lesson text (:func:`lesson_parts`, the one place that decides where it
  comes from: ``course/lessons/<lang>/<unit>.md``, parsed by ``course.lessons``,
  whose ``{{ exercise }}`` placeholder marks where the code and tests go and
  whose ``{{ setup }}``/``{{ demo: NAME }}`` become demo cells that the
  grader's kernel skips; else the solution module's docstring);
* the module, split at its top-level statements. A ``def``/``class`` holding a
  ``### BEGIN SOLUTION`` region becomes an nbgrader *answer* cell (solution,
  not graded: nbgrader's ClearSolutions turns each region into
  ``raise NotImplementedError()`` in the release); everything else becomes a
  read-only cell. A sibling import (``from .attention import ...``) is shown
  in the notebook as the course's trusted stand-in (:func:`sibling`);
* one visible test cell per public test and one hidden-test cell holding all
  hidden properties, with the points of the CLI's rubric.

Every generated cell carries ``metadata.attn_course`` (its part, and for
read-only module cells the text the ``.py`` file holds). The trusted grader
reads that metadata from the *instructor's* source notebook only, and the
student's answers from the submitted notebook by nbgrader ``grade_id``
(:func:`module_source`), so the file it grades never depends on anything a
student can change but their own answer cells.

The kernel-side helpers (:func:`sibling`, :func:`public_test`,
:func:`hidden_tests`) are what the notebook's cells call. Nothing they print
counts: ``attn-course nbgrader`` re-scores every grade cell outside the kernel.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.authoring import stubgen
from autograder.core.manifest import Course, load_course

LESSON_LANGUAGE = "en"
SOURCE = Path("course") / "source"  # the nbgrader source folder, under the course root
META = "attn_course"  # our cell metadata key
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# Set by ``attn-course nbgrader`` for the kernels it starts: the hidden cell then
# leaves the grading to the trusted process instead of grading twice.
TRUSTED_ENV = "ATTN_COURSE_NBGRADER_RESCORE"

HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


# -- what the rubric is worth -----------------------------------------------------

@dataclass(frozen=True)
class Rubric:
    test_id: str  # "<file>::<function>", as in the CLI's JSON
    name: str
    points: float
    visibility: str  # "visible" | "hidden"


def _marker_call(node: ast.AST, name: str):
    """The ``pytest.mark.<name>(...)`` call in ``node``, if it is one."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "mark"):
        return node
    return None


def rubric(course: Course, unit: str) -> list[Rubric]:
    """The graded tests of ``unit`` (public first, then hidden), read statically
    with the conventions :mod:`autograder.core.plugin` enforces."""
    found = []
    for folder, visibility in ((course.public_tests, "visible"), (course.hidden_tests, "hidden")):
        for path in sorted(folder.glob("test_*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            module_unit = None
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                    values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                    for value in values:
                        call = _marker_call(value, "unit")
                        if call and call.args and isinstance(call.args[0], ast.Constant):
                            module_unit = call.args[0].value
            if module_unit != unit:
                continue
            for node in tree.body:
                if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
                    continue
                points = [c for c in map(lambda d: _marker_call(d, "points"), node.decorator_list) if c]
                if not points:
                    continue
                doc = (ast.get_docstring(node) or "").strip()
                found.append(Rubric(f"{path.name}::{node.name}", doc.splitlines()[0].strip() if doc else node.name,
                                    float(ast.literal_eval(points[0].args[0])), visibility))
    return found


# -- the module, in cells ----------------------------------------------------------

@dataclass
class Chunk:
    kind: str  # "frame" (read-only) | "answer" (nbgrader solution cell)
    name: str  # grade_id suffix: the def/class name, or "partN"
    file_text: str  # what the .py file holds
    cell_text: str  # what the notebook shows (differs for sibling imports)


def _strip_blank(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _sibling_import(node: ast.ImportFrom, unit: str, indent: str = "") -> list[str]:
    original = ast.unparse(node)
    lines = [f"{indent}# The .py file says `{original}`; in this notebook that unit is the course's trusted stand-in."]
    if node.module:  # from .attention import a, b as c
        lines.append(f"{indent}from autograder.authoring.notebook import sibling")
        for alias in node.names:
            lines.append(f"{indent}{alias.asname or alias.name} = sibling({unit!r}, {node.module!r}).{alias.name}")
    else:  # from . import attention
        lines.append(f"{indent}from autograder.authoring.notebook import sibling")
        for alias in node.names:
            lines.append(f"{indent}{alias.asname or alias.name} = sibling({unit!r}, {alias.name!r})")
    return lines


def split_module(source: str, unit: str, filename: str = "<source>") -> tuple[str, str, list[Chunk]]:
    """(module docstring, its source text, chunks): one chunk per top-level
    def/class, one per run of other statements; the text between two
    statements goes with the later."""
    tree = ast.parse(source, filename)
    lines = source.splitlines()
    regions = stubgen.find_regions(lines, filename)
    body = list(tree.body)
    docstring = docstring_source = ""
    cursor = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        docstring = body[0].value.value
        cursor = body[0].end_lineno
        docstring_source = "\n".join(lines[:cursor])
        body = body[1:]

    groups: list[list[ast.stmt]] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not groups \
                or isinstance(groups[-1][-1], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            groups.append([node])
        else:
            groups.append(groups.pop() + [node])

    chunks, names = [], set()
    for number, group in enumerate(groups):
        end = group[-1].end_lineno
        for r in regions:  # a trailing `### END SOLUTION` comment is past the def's last statement
            if cursor <= r.start < end <= r.end:
                end = r.end + 1
        span = range(cursor, end)
        file_lines = _strip_blank(lines[cursor:end])
        cell_lines = []
        imports = {n.lineno - 1: n for n in group if isinstance(n, ast.ImportFrom) and n.level > 0}
        skip_to = -1
        for i in range(cursor, end):
            if i < skip_to:
                continue
            if i in imports:
                node = imports[i]
                if node.level != 1:
                    raise stubgen.MarkerError(f"{filename}:{i + 1}: only `from .sibling import ...` is supported")
                cell_lines += _sibling_import(node, unit)
                skip_to = node.end_lineno
            else:
                cell_lines.append(lines[i])
        cell_lines = _strip_blank(cell_lines)
        has_region = any(r.start in span for r in regions)
        if any((r.start in span) != (r.end in span) for r in regions):
            raise stubgen.MarkerError(f"{filename}: a solution region crosses top-level statements near line {end}")
        node = group[0]
        name = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else f"part{number + 1}"
        if name in names:
            name = f"{name}{number + 1}"
        names.add(name)
        chunks.append(Chunk("answer" if has_region else "frame", name, "\n".join(file_lines), "\n".join(cell_lines)))
        cursor = end
    if cursor < len(lines) and "".join(lines[cursor:]).strip():
        chunks.append(Chunk("frame", "tail", "\n".join(_strip_blank(lines[cursor:])), "\n".join(_strip_blank(lines[cursor:]))))
    return docstring, docstring_source, chunks


# -- lesson text: the one place that decides where it comes from --------------------

DEMO_TAG = "attn-course-demo"  # demo cells: skipped by the grader's kernel (nbgrader_config.py)


def _lessons_module(course: Course):
    """``course/lessons`` (the lesson authors' package): its parser and code templates."""
    import importlib

    root = str(course.root)
    added = root not in sys.path
    if added:
        sys.path.insert(0, root)
    try:
        return importlib.import_module("course.lessons")
    finally:
        if added:
            sys.path.remove(root)


def lesson_source(course: Course, unit: str) -> Path | None:
    path = course.root / "course" / "lessons" / LESSON_LANGUAGE / f"{unit}.md"
    return path if path.is_file() else None


def lesson_parts(course: Course, unit: str, docstring: str) -> list[tuple[str, str]]:
    """The lesson of ``unit`` as ("markdown", text), ("exercise", ""), and
    ("setup" | "demo", code) parts, in order.

    From ``course/lessons/<lang>/<unit>.md`` (parsed by ``course.lessons``,
    whose ``{{ exercise }}`` placeholder marks where the unit's code and tests
    go) when it exists, else the solution module's docstring.
    """
    path = lesson_source(course, unit)
    if path is None:
        title = course.units[unit].title
        text = "\n".join(line.rstrip() for line in docstring.strip().splitlines())
        return [("markdown", f"# {title}\n\n{text}"), ("exercise", "")]
    lessons = _lessons_module(course)
    parts = []
    for kind, arg in lessons.parse(path.read_text(encoding="utf-8")):
        if kind == "markdown":
            parts.append(("markdown", arg))
        elif kind == "exercise":
            parts.append(("exercise", ""))
        elif kind == "setup":
            parts.append(("setup", lessons.SETUP))
        elif kind == "demo":
            parts.append(("demo", lessons.DEMO.format(name=arg, unit=unit)))
        else:
            raise ValueError(f"{path}: unknown placeholder {{{{ {kind} }}}}")
    if not any(kind == "exercise" for kind, _ in parts):
        parts.append(("exercise", ""))
    return parts


# -- the notebook ------------------------------------------------------------------

def grade_id(unit: str, part: str) -> str:
    return f"{unit}-{part}".replace("_", "-").replace("::", "-").replace(".", "-")


def _nbgrader(gid: str, *, grade: bool, solution: bool, locked: bool, points: float | None = None) -> dict:
    meta = {"grade": grade, "grade_id": gid, "locked": locked, "schema_version": 3, "solution": solution}
    if points is not None:
        meta["points"] = points
    return meta


def _code(cell_id: str, text: str, nbgrader: dict | None, part: dict) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(text)
    cell.id = cell_id
    cell.metadata = {META: part}
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
        if nbgrader["locked"]:
            cell.metadata.update(deletable=False, editable=False)
    return cell


def _markdown(cell_id: str, text: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(text)
    cell.id = cell_id
    return cell


def _points(x: float) -> str:
    return f"{x:g} point" + ("" if x == 1 else "s")


def _exercise_cells(course: Course, unit: str, docstring_file: str, chunks: list[Chunk]) -> list:
    spec = course.units[unit]
    cells = [_markdown("", (
        "**How this notebook is graded.** "
        "Fill in every cell that says `YOUR CODE HERE`; the docstrings give the shape of every input and "
        "output. Only these answer cells are graded, as the file `" + spec.file + "` they make up "
        "(read-only cells are restored before grading). Put any helper or extra import inside an answer cell."))]
    first_frame = True
    for chunk in chunks:
        if chunk.kind == "answer":
            gid = grade_id(unit, chunk.name)
            cells.append(_code(gid, chunk.cell_text, _nbgrader(gid, grade=False, solution=True, locked=False),
                               {"part": "answer", "defines": chunk.name}))
        else:
            gid = grade_id(unit, f"code-{chunk.name}")
            file_text = chunk.file_text
            if first_frame and docstring_file:
                file_text = docstring_file + "\n\n" + file_text
                first_frame = False
            part = {"part": "frame"}
            if file_text != chunk.cell_text:
                part["file"] = file_text
            cells.append(_code(gid, chunk.cell_text, _nbgrader(gid, grade=False, solution=False, locked=True), part))
    return cells


def _test_cells(course: Course, unit: str) -> list:
    tests = rubric(course, unit)
    visible = [t for t in tests if t.visibility == "visible"]
    hidden = [t for t in tests if t.visibility == "hidden"]
    cells = []
    if visible:
        cells.append(_markdown("", (
            "## Tests\n\nEach cell below runs one public test on the code above (the same test as "
            f"`attn-course check {unit}`). The points shown are what the grader gives.")))
    for test in visible:
        gid = grade_id(unit, f"public-{test.test_id.split('::')[1]}")
        text = (f"# {_points(test.points)}: {test.name}\n"
                "from autograder.authoring.notebook import public_test\n"
                f"public_test({unit!r}, {test.test_id!r}, globals())")
        cells.append(_code(gid, text, _nbgrader(gid, grade=True, solution=False, locked=True, points=test.points),
                           {"part": "test", "tests": [test.test_id]}))
    if hidden:
        gid = grade_id(unit, "hidden")
        total = sum(t.points for t in hidden)
        text = (f"# {_points(total)}: the {len(hidden)} hidden properties of this unit, graded by the course's\n"
                "# grader outside this notebook; your feedback lists each property that failed.\n"
                f"{HIDDEN_BEGIN}\n"
                "from autograder.authoring.notebook import hidden_tests\n"
                f"hidden_tests({unit!r})\n"
                f"{HIDDEN_END}")
        cells.append(_code(gid, text, _nbgrader(gid, grade=True, solution=False, locked=True, points=total),
                           {"part": "test", "tests": [t.test_id for t in hidden]}))
    return cells


def build_notebook(course: Course, unit: str) -> nbformat.NotebookNode:
    spec = course.units[unit]
    path = course.solutions / spec.file
    docstring, docstring_file, chunks = split_module(path.read_text(encoding="utf-8"), unit, f"{course.solutions.name}/{spec.file}")
    cells = []
    for kind, text in lesson_parts(course, unit, docstring):
        if kind == "markdown":
            cells.append(_markdown("", text))
        elif kind == "exercise":
            cells += _exercise_cells(course, unit, docstring_file, chunks) + _test_cells(course, unit)
        else:  # setup and demos: ordinary cells for students; the grader's kernel skips them
            cell = nbformat.v4.new_code_cell(text)
            cell.metadata = {"tags": ["parameters", DEMO_TAG] if kind == "setup" else [DEMO_TAG]}
            cells.append(cell)
    for number, cell in enumerate(cells):  # deterministic ids (nbformat's are random), at most 64 characters
        cell.id = f"{unit.replace('_', '-')}-{number:02d}"
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.nbformat_minor = 5
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"},
                   META: {"unit": unit, "file": spec.file}}
    return nb


def notebook_path(unit: str) -> Path:
    """Relative to the course root: the source notebook of ``unit``."""
    return SOURCE / unit / f"{unit}.ipynb"


def expected_notebooks(course: Course) -> dict[Path, str]:
    """Path (relative to the course root) -> the JSON ``build`` writes, for every
    unit whose solution file exists."""
    out = {}
    for unit, spec in course.units.items():
        if (course.solutions / spec.file).is_file():
            out[notebook_path(unit)] = nbformat.writes(build_notebook(course, unit), version=4) + "\n"
    return out


def stale(course: Course) -> list[str]:
    """Source notebooks that differ from what ``build`` would write (or are missing)."""
    return [
        str(rel) for rel, text in expected_notebooks(course).items()
        if not (course.root / rel).is_file() or (course.root / rel).read_text(encoding="utf-8") != text
    ]


def build(course: Course) -> list[Path]:
    """Write every stale source notebook; returns the paths written."""
    written = []
    for rel, text in expected_notebooks(course).items():
        target = course.root / rel
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written.append(target)
    return written


# -- from a submitted notebook back to the unit's file (trusted side) ---------------

def _stub(text: str) -> str:
    """An answer cell's release text (what nbgrader's ClearSolutions writes)."""
    lines = text.splitlines()
    out, cursor = [], 0
    for region in stubgen.find_regions(lines):
        out += lines[cursor:region.start] + [f"{region.indent}# YOUR CODE HERE", f"{region.indent}raise NotImplementedError()"]
        cursor = region.end + 1
    return "\n".join(out + lines[cursor:])


def answers(submitted: dict) -> dict[str, str]:
    """grade_id -> source of each nbgrader solution code cell (first one wins)."""
    found: dict[str, str] = {}
    for cell in submitted.get("cells", []):
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        gid = meta.get("grade_id")
        if cell.get("cell_type") == "code" and isinstance(gid, str) and gid not in found:
            source = cell.get("source", "")
            found[gid] = "".join(source) if isinstance(source, list) else str(source)
    return found


def _definition(source: str, name: str) -> str | None:
    """From an ordinary cell: its imports and its top-level definition of ``name``, if any."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name]
    if not defs:
        return None
    lines = source.splitlines()
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) or n is defs[-1]]
    segments = []
    for node in keep:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        segments.append("\n".join(lines[start:node.end_lineno]))
    return "\n".join(segments)


def _moved_answers(submitted: dict) -> list[str]:
    """Sources of the code cells without nbgrader metadata, in order."""
    return [
        "".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
        for c in submitted.get("cells", [])
        if c.get("cell_type") == "code" and not (c.get("metadata") or {}).get("nbgrader")
    ]


def module_source(layout: dict, submitted: dict | None) -> str:
    """The unit's ``.py`` file: the instructor's read-only parts (from ``layout``,
    the source notebook) around the student's answer cells (from ``submitted``,
    matched by grade_id).

    An answer cell that is gone (deleted, or its nbgrader metadata lost when
    the student rewrote it in a new cell) is looked for as the last ordinary
    cell that defines the same name, as the kernel would have run it (its
    imports and that definition only); failing that, it counts as the
    untouched stub.
    """
    given = answers(submitted or {})
    ordinary = _moved_answers(submitted or {})
    parts = []
    for cell in layout["cells"]:
        part = (cell.get("metadata") or {}).get(META) or {}
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if part.get("part") == "frame":
            parts.append(part.get("file", source))
        elif part.get("part") == "answer":
            gid = cell["metadata"]["nbgrader"]["grade_id"]
            if gid in given:
                parts.append(given[gid])
                continue
            moved = [d for d in (_definition(text, part.get("defines", "")) for text in ordinary) if d]
            parts.append(moved[-1] if moved else _stub(source))
    return "\n\n\n".join(p.strip("\n") for p in parts) + "\n"


def read_notebook(path: Path) -> dict | None:
    """A notebook as plain JSON, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("cells"), list) else None


# -- kernel side: what the notebook's cells call (nothing here counts) ----------------

_stand_in_packages: dict[str, str] = {}


def sibling(unit: str, name: str) -> types.ModuleType:
    """The trusted stand-in the grader uses for sibling ``name`` while grading ``unit``."""
    from autograder.core.loader import _exec_file

    course = load_course()
    stand_ins = course.units[unit].stand_ins
    if name not in stand_ins:
        raise ImportError(f"{unit} has no stand-in for {name} in course.toml")
    if unit not in _stand_in_packages:
        package = f"_notebook_stand_ins_{unit}"
        pkg = types.ModuleType(package)
        pkg.__path__ = []
        sys.modules[package] = pkg
        for sib, path in stand_ins.items():
            _exec_file(f"{package}.{sib}", course.root / path)
        _stand_in_packages[unit] = package
    return sys.modules[f"{_stand_in_packages[unit]}.{name}"]


def _kernel_subject(course: Course, unit: str, namespace: dict):
    from autograder.core.subject import InProcessSubject

    subject = InProcessSubject(course, Path.cwd(), isolate=False)
    subject._modules[unit] = types.SimpleNamespace(**{k: v for k, v in namespace.items() if isinstance(k, str)})
    return subject


def public_test(unit: str, test_id: str, namespace: dict) -> None:
    """Run one public test on the notebook's own definitions; raise if it fails."""
    import importlib.util

    from hypothesis import settings

    from autograder.core.plugin import PROFILE, failure_message

    course = load_course()
    filename, function = test_id.split("::")
    path = course.public_tests / filename
    spec = importlib.util.spec_from_file_location(f"_notebook_public_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    test = getattr(module, function)
    doc = (test.__doc__ or function).strip().splitlines()[0]
    settings.load_profile(PROFILE)
    with warnings.catch_warnings(record=True) as caught:  # warnings to stdout: stderr would read as a failure
        warnings.simplefilter("always")
        try:
            test(_kernel_subject(course, unit, namespace))
        except Exception as error:  # noqa: BLE001 - reported as the test's failure
            message = failure_message(error)
        else:
            message = None
    for warning in caught:
        print(f"warning: {warning.category.__name__}: {warning.message}")
    if message is not None:
        raise AssertionError(f"{doc}: {message}") from None
    print(f"passed: {doc}")


def _course_dir_of_autograded() -> Path | None:
    """During ``nbgrader autograde`` the kernel runs in <course>/autograded/<student>/<assignment>."""
    cwd = Path.cwd()
    return cwd.parents[2] if len(cwd.parents) > 2 and cwd.parents[1].name == "autograded" else None


def hidden_tests(unit: str) -> None:
    """The hidden properties, graded out of this kernel by ``attn-course grade``.

    Under ``attn-course nbgrader`` this only says so: the trusted process grades
    the submitted notebook and writes the report into the feedback. Under a
    plain ``nbgrader autograde`` it grades the notebook file being autograded
    (never the kernel's objects) in a subprocess, prints each failed property
    with its counterexample, and raises if any failed.
    """
    if os.environ.get(TRUSTED_ENV) == "1":
        print("The hidden properties are graded by the course's grader outside this notebook; "
              "the feedback shows the result.")
        return
    course = load_course()
    course_dir = _course_dir_of_autograded() or (course.root / "course")
    layout = read_notebook(course_dir / "source" / unit / f"{unit}.ipynb")
    submitted = read_notebook(Path.cwd() / f"{unit}.ipynb")
    if layout is None or submitted is None:
        print("The hidden properties run only when the instructor grades this notebook.")
        return
    result = grade_sources(course, {"notebook": {unit: module_source(layout, submitted)}}, [unit])["notebook"]
    lines, failed = hidden_report(result, unit)
    print(lines)
    if failed:
        raise AssertionError(f"{failed} hidden properties failed")


# -- trusted grading of extracted files ----------------------------------------------

def cli_command() -> list[str]:
    return [sys.executable, "-m", "autograder.cli"]


def grade_sources(course: Course, sources: dict[str, dict[str, str]], units: list[str], *,
                  workdir: Path | None = None, background: bool = False):
    """Grade {submission: {unit: file text}} with ``attn-course grade`` in a
    subprocess; returns {submission: result dict} (or, with ``background``, a
    callable that waits for and returns it)."""
    holder = tempfile.TemporaryDirectory(prefix="attn-nbgrader-", dir=workdir)
    root = Path(holder.name)
    folders = []
    for i, (name, files) in enumerate(sources.items()):
        folder = root / f"s{i}"
        folder.mkdir()
        for unit, text in files.items():
            (folder / course.units[unit].file).write_text(text, encoding="utf-8")
        folders.append(folder)
    out = root / "result.json"
    command = [*cli_command(), "grade", *map(str, folders), "--format", "json", "-o", str(out)]
    for unit in units:
        command += ["--unit", unit]
    env = {k: v for k, v in os.environ.items() if k != TRUSTED_ENV}
    log_path = root / "log.txt"  # a file, not a pipe: nobody reads a pipe while polling
    with log_path.open("w", encoding="utf-8") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=str(course.root))

    def wait() -> dict[str, dict]:
        try:
            process.wait()
            log = log_path.read_text(encoding="utf-8", errors="replace")
            if process.returncode != 0 or not out.is_file():
                raise RuntimeError(f"attn-course grade failed (exit {process.returncode}):\n{log[-3000:]}")
            data = json.loads(out.read_text(encoding="utf-8"))
            data = data if isinstance(data, list) else [data]
            return dict(zip(sources, data))
        finally:
            holder.cleanup()

    wait.poll = process.poll
    return wait if background else wait()


def test_scores(result: dict, unit: str) -> dict[str, dict]:
    """test id -> the CLI's record, for ``unit`` of one result."""
    return {t["id"]: t for t in result["units"][unit]["tests"]}


def hidden_report(result: dict, unit: str) -> tuple[str, int]:
    """The student-facing text of the hidden cell: property names and
    counterexamples only; and how many properties failed."""
    record = result["units"][unit]
    tests = [t for t in record["tests"] if t["visibility"] == "hidden"]
    failed = [t for t in tests if t["status"] == "failed"]
    score, total = sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)
    lines = [f"hidden properties: {score:g} / {total:g} points"]
    if record["status"] != "graded" and record["message"]:
        lines.append(f"{record['status']}: {record['message']}")
    for t in tests:
        if t["status"] == "failed":
            lines.append(f"  FAILED {t['name']} (0 / {t['max_score']:g}): {t['output']}")
    passed = [t for t in tests if t["status"] == "passed"]
    if passed:
        lines.append(f"  passed: {len(passed)} properties")
    return "\n".join(lines), len(failed)


def visible_report(result: dict, unit: str, test_id: str) -> str:
    record = result["units"][unit]
    t = test_scores(result, unit).get(test_id)
    if t is None:
        return f"not graded: {record['message'] or 'the test did not run'}"
    text = f"{t['status']}: {t['name']} ({t['score']:g} / {t['max_score']:g})"
    return text + (f": {t['output']}" if t["status"] == "failed" and t["output"] else "")
