"""``attn-course similarity``: a renamed copy is caught, independent work and the stubs are not.

A class built here, for the grade-batch path: alice hands in ``solutions/``; bob hands in alice's
file of one unit with its local variables renamed and its comments rewritten (stubs for the rest);
carol the correct alternatives (``tests/alternatives/``, as a zip); dave, for every unit, a kept
mutant (``tests/mutants/``: the reference with one bug, so derived from what alice has, not
independent of it); erin the blank stubs; and two uploads whose names clash, refused. Each file's
lineage (reference, alternative, stub) says which pairs are independent. Then the nbgrader path: the
real ``nbgrader collect`` lays out the course's ``submitted/``, and the same holds for notebooks.
"""
from __future__ import annotations

import ast
import csv
import io
import json
import random
import shutil
import string
import tokenize
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, attn_course
from mutants import ALTERNATIVES, load, mutated_source

from autograder.authoring.stubgen import clear_regions
from autograder.core.manifest import load_course
from autograder.delivery import similarity, similarity_compare

COURSE = load_course(ROOT)
UNITS = list(COURSE.units.values())
TARGET = UNITS[0]  # the unit bob copies (any would do: every unit is handed in by every student)
THRESHOLD = similarity.DEFAULT_THRESHOLD


def renamed(source: str, rng: random.Random, comment: str | None = None) -> str:
    """``source`` with every function's local variables renamed (parameters, the module's names
    and attributes kept, as a student hiding a copy would) and every comment rewritten."""
    tree = ast.parse(source)
    module_names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.col_offset == 0}
    local: set[str] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = fn.args
            params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}
            local |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - params
    local -= module_names | {"self", "cls"}
    mapping: dict[str, str] = {}
    for name in sorted(local):
        mapping[name] = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9))) + f"_{len(mapping)}"
    edits: list[tuple[int, int, int, str]] = []  # (row, start col, end col, new text)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    depth = 0
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif tok.type == tokenize.COMMENT:
            edits.append((*tok.start, tok.end[1], comment or f"# step {rng.randint(1, 99)}, my way"))
        elif tok.type == tokenize.NAME and tok.string in mapping:
            after_dot = i > 0 and tokens[i - 1].string == "."
            keyword_arg = depth > 0 and i + 1 < len(tokens) and tokens[i + 1].string == "="
            if not after_dot and not keyword_arg:
                edits.append((*tok.start, tok.end[1], mapping[tok.string]))
    lines = source.splitlines(keepends=True)
    for row, start, end, text in sorted(edits, reverse=True):
        lines[row - 1] = lines[row - 1][:start] + text + lines[row - 1][end:]
    return "".join(lines)


def _filtered(text: str) -> str:
    from copydetect.utils import filter_code

    return filter_code(text, "x.py", "python")[0]


def distinct_mutant(unit) -> str:
    """The first kept mutant of ``unit`` that is more than a renaming: the tokenizer copydetect
    uses sees names as one symbol, so a mutant that only swaps two names is the reference itself."""
    reference = (ROOT / "solutions" / unit.file).read_text(encoding="utf-8")
    for mutant in load(unit.name):
        text = mutated_source(reference, mutant)
        if _filtered(text) != _filtered(reference):
            return text
    raise AssertionError(f"every mutant of {unit.name} is a renaming of the reference")


def _rows(out: Path) -> list[dict]:
    with (out / "similarity.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["a"], row["b"] = float(row["similarity_a_to_b"]), float(row["similarity_b_to_a"])
        row["score"], row["tokens"] = max(row["a"], row["b"]), int(row["tokens_overlapping"])
    return rows


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """(the report's folder, the CLI's stdout, (student, unit) -> lineage) for the batch class."""
    base = tmp_path_factory.mktemp("similarity")
    subs, lineage = base / "submissions", {}

    def hand_in(student: str, unit, text: str, kind: str) -> None:
        (subs / student).mkdir(parents=True, exist_ok=True)
        (subs / student / unit.file).write_text(text, encoding="utf-8")
        lineage[student, unit.name] = kind

    for unit in UNITS:
        reference = (ROOT / "solutions" / unit.file).read_text(encoding="utf-8")
        stub = (COURSE.assignments / unit.file).read_text(encoding="utf-8")
        hand_in("alice", unit, reference, "reference")
        if unit is TARGET:
            copy = renamed(reference, random.Random(59))
            assert copy != reference and ast.dump(ast.parse(copy)) != ast.dump(ast.parse(reference))
            hand_in("bob", unit, copy, "reference")
        else:
            hand_in("bob", unit, stub, "stub")
        hand_in("carol", unit, (ALTERNATIVES / unit.file).read_text(encoding="utf-8"), "alternative")
        hand_in("dave", unit, distinct_mutant(unit), "reference")  # the reference with one bug
        hand_in("erin", unit, stub, "stub")
    with zipfile.ZipFile(subs / "carol.zip", "w") as archive:  # carol's upload is a zip, as uploads often are
        for path in sorted((subs / "carol").iterdir()):
            archive.write(path, f"carol/{path.name}")
    shutil.rmtree(subs / "carol")
    (subs / "zed").mkdir()  # zed/ and zed.zip clash: grade-batch refuses both, so does similarity
    (subs / "zed" / TARGET.file).write_text(renamed((ROOT / "solutions" / TARGET.file).read_text(), random.Random(1)))
    shutil.make_archive(str(subs / "zed"), "zip", subs / "zed")
    out = base / "report"
    proc = attn_course("similarity", str(subs), "-o", str(out), "--threshold", str(THRESHOLD))
    return out, proc.stdout, lineage


def test_the_renamed_copy_ranks_first_and_above_the_threshold(batch):
    out, stdout, _ = batch
    rows = _rows(out)
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    top = rows[0]
    assert (top["unit"], top["student_a"], top["student_b"]) == (TARGET.name, "alice", "bob"), rows[:3]
    assert top["a"] > THRESHOLD and top["b"] > THRESHOLD and top["tokens"] > 0
    assert rows[1]["score"] < top["score"]  # first on its own: the mutants' changed lines cost them a share
    students = {r["student_a"] for r in rows} | {r["student_b"] for r in rows}
    assert students == {"alice", "bob", "carol", "dave", "erin"}  # carol's zip read, the clash refused
    assert len(rows) == len(UNITS) * 10  # every pair of five students, unit by unit
    assert "not compared: zed, zed.zip: name clash" in stdout
    assert f"{len(rows)} pairs compared" in stdout


def test_no_independent_pair_is_flagged(batch):
    out, _, lineage = batch
    independent = [r for r in _rows(out)
                   if lineage[r["student_a"], r["unit"]] != lineage[r["student_b"], r["unit"]]]
    assert len(independent) > len(UNITS) * 4
    worst = max(independent, key=lambda r: r["score"])
    assert worst["score"] <= THRESHOLD, worst


def test_derived_code_is_flagged(batch):
    """A mutant is the reference with one changed line: it is copied code, and the report says so."""
    out, _, _ = batch
    derived = {r["unit"] for r in _rows(out) if {r["student_a"], r["student_b"]} == {"alice", "dave"}
               and r["score"] > THRESHOLD}
    assert derived == {u.name for u in UNITS}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # copydetect's own use of importlib.resources
def test_the_stubs_are_boilerplate(batch, tmp_path):
    out, _, lineage = batch
    blanks = [r for r in _rows(out) if lineage[r["student_a"], r["unit"]] == lineage[r["student_b"], r["unit"]] == "stub"]
    assert len(blanks) == len(UNITS) - 1  # bob and erin, in every unit bob did not copy
    assert all(r["a"] == r["b"] == 0 and r["tokens"] == 0 for r in blanks), blanks
    # Without the stubs as boilerplate, the same two blank files are one file.
    stub = (COURSE.assignments / TARGET.file).read_text(encoding="utf-8")
    job = {"entries": [[TARGET.name, s, TARGET.file, stub] for s in ("bob", "erin")], "threshold": THRESHOLD,
           "html": str(tmp_path / "r.html")}
    assert similarity_compare.compare({**job, "boilerplate": {TARGET.name: []}})[0][2:4] == [1.0, 1.0]
    assert similarity_compare.compare({**job, "boilerplate": {TARGET.name: [stub]}})[0][2:] == [0.0, 0.0, 0, False]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_html_keeps_the_most_similar_pairs(tmp_path):
    """The HTML holds both files of each pair it shows: past the threshold, only the most similar."""
    reference = (ROOT / "solutions" / TARGET.file).read_text(encoding="utf-8")
    texts = [reference, renamed(reference, random.Random(1)), distinct_mutant(TARGET),
             (ALTERNATIVES / TARGET.file).read_text(encoding="utf-8")]
    job = {"entries": [[TARGET.name, f"s{n}", TARGET.file, text] for n, text in enumerate(texts)],
           "boilerplate": {TARGET.name: []}, "threshold": 0.0, "html": str(tmp_path / "r.html"), "most": 1}
    shown = [(i, j) for i, j, *_, flag in similarity_compare.compare(job) if flag]
    assert shown == [(0, 1)]  # the copy (1.0) over the mutant (about 0.9) and the alternative
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert html.count("View matched code") == 1 and f"s0/{TARGET.file}" in html


def test_the_html_report_shows_the_pair_and_its_matched_regions(batch):
    out, _, _ = batch
    html = (out / "similarity.html").read_text(encoding="utf-8")
    assert f"alice/{TARGET.file}" in html and f"bob/{TARGET.file}" in html
    assert "highlight-red" in html and "highlight-green" in html  # copydetect's marks on the matched regions
    assert f"erin/{TARGET.file}" in html  # every file compared is listed


def test_the_report_is_the_same_on_every_run(batch, tmp_path):
    """copydetect hashes with Python's salted hash: the comparison runs with the salt fixed."""
    out, _, _ = batch
    subs = out.parent / "submissions"
    again = attn_course("similarity", str(subs), "-o", str(tmp_path), fresh=True, env={"PYTHONHASHSEED": "random"})
    assert again.returncode == 0
    assert (tmp_path / "similarity.csv").read_bytes() == (out / "similarity.csv").read_bytes()


def test_bad_arguments_exit_2(tmp_path):
    assert attn_course("similarity", str(tmp_path / "missing"), "-o", str(tmp_path / "o"), check=False).returncode == 2
    (tmp_path / "class").mkdir()
    for extra in (["--unit", "no_such_unit"], ["--threshold", "2"]):
        proc = attn_course("similarity", str(tmp_path / "class"), "-o", str(tmp_path / "o"), *extra, check=False)
        assert proc.returncode == 2, proc.stderr
    (tmp_path / "class" / similarity.NBGRADER_CONFIG).write_text("")  # an nbgrader course before `collect`
    proc = attn_course("similarity", str(tmp_path / "class"), "-o", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2 and "no submitted/ folder" in proc.stderr


def _notebook(source: dict, answer) -> dict:
    """The source notebook with each answer cell's text replaced by ``answer(text)``."""
    notebook = json.loads(json.dumps(source))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code" and cell["metadata"].get("nbgrader", {}).get("solution"):
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"] = answer(text)
    return notebook


def test_an_nbgrader_course(tmp_path):
    """The notebooks that `nbgrader collect` lays out: the code cells a student writes are compared,
    the released notebook's code (stubbed answers, frame, tests, demos) is boilerplate."""
    course_dir, inbox, unit = tmp_path / "course", tmp_path / "inbox", TARGET.name
    shutil.copytree(COURSE.nbgrader_source / unit, course_dir / "source" / unit)
    (course_dir / similarity.NBGRADER_CONFIG).write_text("c = get_config()  # noqa: F821\n", encoding="utf-8")
    source = json.loads((course_dir / "source" / unit / f"{unit}.ipynb").read_text(encoding="utf-8"))
    rng = random.Random(7)
    students = {"alice": _notebook(source, lambda t: t),  # the reference answers
                "bob": _notebook(source, lambda t: renamed(t, rng)),
                "carol": _notebook(source, clear_regions), "dave": _notebook(source, clear_regions)}
    for name, notebook in students.items():
        (inbox / name / "work").mkdir(parents=True)
        (inbox / name / "work" / f"{unit}.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    attn_course("nbgrader", "--course", str(course_dir), "--unit", unit, "collect", str(inbox))
    assert (course_dir / "submitted" / "bob" / unit / f"{unit}.ipynb").is_file()
    out = tmp_path / "report"
    attn_course("similarity", str(course_dir), "-o", str(out), "--unit", unit)
    rows = {(r["student_a"], r["student_b"]): r for r in _rows(out)}
    assert len(rows) == 6 and next(iter(rows)) == ("alice", "bob")
    assert rows["alice", "bob"]["a"] > THRESHOLD and rows["alice", "bob"]["b"] > THRESHOLD
    assert rows["carol", "dave"]["tokens"] == 0  # two blank notebooks: all of it released
    assert max(r["score"] for pair, r in rows.items() if pair != ("alice", "bob")) <= THRESHOLD
    assert f"bob/{TARGET.file}" in (out / "similarity.html").read_text(encoding="utf-8")
