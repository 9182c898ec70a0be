"""One student's text cannot break a writer nor the class (issue 43, "one boundary for text").

The hostile strings (tests/hostile/text/strings.py) go where a student can put them: in the
message of every exception the unit raises, and in the names of upload folders. Each writer's
output is then read back by its platform's own parser or schema: JSON, JUnit on junit-10.xsd,
Markdown rendered by a CommonMark parser, CSV by Python's reader, Gradescope's and
PrairieLearn's results schemas, Classroom's reporter under node, nbgrader's notebook format and
its HTML export. And the classmate graded in the same run keeps full marks. What a worker
sends back crosses the boundary in each isolation mode (tests/project/modes.py): the grading
runs are made in full, container and plain mode.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import nbformat
import pytest
from markdown_it import MarkdownIt
from rich.console import Console

import modes
from conftest import ROOT, third_party
from autograder.core.manifest import load_course
from autograder.core.results import GradeResult
from autograder.delivery.classroom import Classroom
from autograder.delivery.gradescope import Gradescope
from autograder.delivery.prairielearn import PrairieLearn
from autograder.delivery.formats import gradebook_csv, to_junit, to_markdown
from autograder.grading.report import print_results
from autograder.nbgrader import rescore
from autograder.nbgrader.pipeline import _stream

sys.path.insert(0, str(ROOT / "tests" / "hostile" / "text"))
from strings import HOSTILE, message_source  # noqa: E402

COURSE = load_course(ROOT)
VENDOR = ROOT / "tests" / "vendor"
UNIT = "attention"
FORMULA = ("=", "+", "-", "@", "\t", "\r")
# A folder name holding every hostile string that a file name can hold (no "/", no NUL), plus a
# byte that is not UTF-8 (Python reads it back as a lone surrogate).
FOLDER_NAME = b"=HYPERLINK(1) \xff <img src=x onerror=alert(1)> \x1b[31m \xe2\x80\xae"


@pytest.fixture(scope="module", params=modes.params("text"))
def graded(request, tmp_path_factory) -> list[GradeResult]:
    """carol (the reference) and a hostile classmate, graded together, sandboxed, as the CLI's JSON
    (in each mode)."""
    modes.require(request.param)
    base = tmp_path_factory.mktemp(f"text-{request.param}")
    shutil.copytree(COURSE.solutions, base / "carol")
    hostile = os.path.join(os.fsencode(base), FOLDER_NAME)
    os.mkdir(hostile)
    Path(os.fsdecode(hostile), COURSE.units[UNIT].file).write_text(message_source(), encoding="utf-8")
    out = base / "report.json"
    modes.attn_course(request.param, "grade", str(base / "carol"), os.fsdecode(hostile), "--unit", UNIT,
                      "--format", "json", "-o", str(out))
    data = json.loads(out.read_text(encoding="utf-8"))
    return [GradeResult.from_dict(r) for r in data]


def _texts(result: GradeResult) -> list[str]:
    return [result.submission, *(u.message for u in result.units.values()),
            *(t.output for u in result.units.values() for t in u.tests)]


def test_the_class_is_graded_and_the_text_arrives_clean(graded):
    carol, hostile = graded
    assert carol.score == carol.max_score > 0, "the classmate keeps full marks"
    assert hostile.score == 0
    outputs = [t.output for t in hostile.units[UNIT].tests if t.status == "failed"]
    assert outputs and all("ValueError" in o for o in outputs)
    for text in _texts(hostile):
        text.encode("utf-8")  # strict: no lone surrogate survives
        assert not any(c in text for c in "\x00\x07\x1b\x7f\x85\r\u202e\ufffe"), repr(text[:200])
    assert "\ufffd" in hostile.submission and "HYPERLINK" in hostile.submission


def test_the_terminal_table_prints_markup_as_text(graded):
    buffer = io.StringIO()
    markup = _result_of("rich_markup", HOSTILE["rich_markup"])
    print_results([*graded, markup], verbose=True, console=Console(file=buffer, width=400, color_system=None))
    shown = buffer.getvalue()
    shown.encode("utf-8")
    assert shown.count("[bold green]64/64[/bold green]") >= 3, "rich markup is shown as text, not applied"


def test_json_and_junit_parse(graded):
    for result in graded:
        text = json.dumps(result.to_dict(), ensure_ascii=False)
        assert GradeResult.from_dict(json.loads(text.encode("utf-8").decode("utf-8"))).to_dict() == result.to_dict()
    xmlschema = pytest.importorskip("xmlschema", reason="xmlschema validates against Jenkins xunit's junit-10.xsd")
    schema = xmlschema.XMLSchema(str(third_party("junit/junit-10.xsd")))
    junit = to_junit(graded)
    junit.encode("utf-8")
    assert not list(schema.iter_errors(junit))
    assert len(schema.to_dict(junit)["testsuite"]) == 2


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.rows = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append(0)
        elif tag in ("td", "th"):
            self.rows[-1] += 1


def test_markdown_renders_no_markup_of_the_students():
    """Every hostile string as a submission name, a unit message and a failed property's reason."""
    results = [_result_of(name, text) for name, text in HOSTILE.items()]
    html = MarkdownIt("commonmark").enable("table").render(to_markdown(results))
    parsed = _Tags()
    parsed.feed(html)
    assert set(parsed.tags) <= {"h2", "table", "thead", "tbody", "tr", "th", "td"}, set(parsed.tags)
    assert parsed.tags.count("h2") == len(results), "one heading per submission, none of a student's"
    assert set(parsed.rows) == {3, 4}, "no student text adds or splits a table cell"
    assert "evil.example" not in " ".join(a for a in html.split('"') if a.startswith("http")), "no link is made"


def _result_of(name: str, text: str) -> GradeResult:
    data = {"submission": text, "units": {UNIT: {
        "title": "Attention", "status": "unavailable", "message": text,
        "tests": [{"id": f"t::{name}", "name": text, "score": 0, "max_score": 1, "status": "failed", "output": text}]}}}
    return GradeResult.from_dict(data)


def test_gradebooks_hold_no_formula_and_one_row_per_student():
    """(The LMS layouts' own hostile names: test_lms_gradebooks.py.)"""
    records = [{"student": _result_of(n, t).submission, "status": t, "result": _result_of(n, t).to_dict()}
               for n, t in HOSTILE.items()]
    book = list(csv.reader(io.StringIO(gradebook_csv([UNIT], {UNIT: 1}, records))))
    assert len(book) == 2 + len(HOSTILE)
    assert len({len(row) for row in book}) == 1, "every row has the header's cells"
    cells = [cell for row in book[2:] for cell in row]
    assert not [c for c in cells if c.startswith(FORMULA)]
    assert [row[0] for row in book].count("Points Possible") == 1


def test_gradescope_prairielearn_and_classroom_results_follow_their_schemas(graded):
    gs_schema = json.loads((VENDOR / "gradescope" / "results.schema.json").read_text())
    pl_schema = json.loads((VENDOR / "prairielearn" / "results.schema.json").read_text())
    results = graded + [_result_of(n, t) for n, t in HOSTILE.items()]
    for result in results:
        for data, schema in ((Gradescope().results(result, COURSE, seconds=1.0), gs_schema),
                             (PrairieLearn().results(result, COURSE), pl_schema)):
            jsonschema.validate(json.loads(json.dumps(data, ensure_ascii=False).encode("utf-8")), schema)
    lines = Classroom().results(graded[1], COURSE)
    assert all(line.count("=") >= 1 for line in lines.splitlines())
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the reporter's own run is not checked")
    reporter = third_party("classroom-reporter/dist/main.js")
    outputs = dict(line.split("=", 1) for line in lines.splitlines())
    env = {"PATH": os.environ["PATH"], "INPUT_RUNNERS": ",".join(COURSE.units),
           **{f"{r.upper()}_RESULTS": outputs.get(r, "") for r in COURSE.units}}
    proc = subprocess.run(["node", str(reporter)], env=env, capture_output=True, text=True, timeout=60)
    assert "Points 0/" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_nbgrader_feedback_is_a_valid_notebook_and_inert_html(graded):
    from nbconvert import HTMLExporter

    result = graded[1].to_dict()
    text, failed = rescore.hidden_report(result, UNIT)
    assert failed > 0
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("pass", outputs=[_stream(text)])])
    nbformat.validate(nb)
    written = nbformat.writes(nb)
    written.encode("utf-8")
    html, _ = HTMLExporter(template_name="classic").from_notebook_node(nbformat.reads(written, as_version=4))
    assert "<h1 style=" not in html and "<img src=x" not in html, "a student's tags are text, not HTML"
    assert "&lt;h1 style=" in html


RUN_PLATFORMS = """
import json, sys
from pathlib import Path
from autograder.core.manifest import load_course
from autograder.delivery.gradescope import Gradescope
from autograder.delivery.prairielearn import PrairieLearn
course, root = load_course(Path.cwd()), Path(sys.argv[1])
Gradescope().run(root / "gs", course)
PrairieLearn().run(root / "pl", course)
"""


@pytest.mark.parametrize("upload", ["hostile_messages", "hostile_file_names"])
@pytest.mark.parametrize("mode", modes.MODES)
def test_gradescope_and_prairielearn_write_their_results(tmp_path, upload, mode):
    """Their entry points, sandboxed in each mode: a results.json that their schemas accept,
    whatever the upload says."""
    modes.require(mode)
    for folder in (tmp_path / "gs" / "submission", tmp_path / "pl" / "student"):
        folder.mkdir(parents=True)
        if upload == "hostile_messages":
            (folder / COURSE.units[UNIT].file).write_text(message_source(), encoding="utf-8")
        else:  # nothing gradable: the status names files whose names are not UTF-8
            Path(os.fsdecode(os.path.join(os.fsencode(folder), FOLDER_NAME))).write_text("x")
    run = modes.run_python(mode, RUN_PLATFORMS, str(tmp_path), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    gs = json.loads((tmp_path / "gs" / "results" / "results.json").read_text(encoding="utf-8"))
    pl = json.loads((tmp_path / "pl" / "results" / "results.json").read_text(encoding="utf-8"))
    jsonschema.validate(gs, json.loads((VENDOR / "gradescope" / "results.schema.json").read_text()))
    jsonschema.validate(pl, json.loads((VENDOR / "prairielearn" / "results.schema.json").read_text()))
    assert gs["score"] == 0 and (pl.get("score") or 0) == 0
    if upload == "hostile_messages":  # graded: each results file records what the mode hid less
        warned = [m for m in modes.MODES if f"WARNING: {m} mode" in gs["output"] and f"WARNING: {m} mode" in pl["output"]]
        assert warned == ([] if mode == "full" else [mode]), (gs["output"][:300], pl["output"][:300])
    if upload == "hostile_file_names":
        assert "\ufffd" in gs["output"] and "no unit files" in gs["output"], gs["output"]
    else:
        assert any("ValueError" in t["output"] for t in gs["tests"])
