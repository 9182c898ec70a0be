"""The unit at fault, pointed at (issue 58; :mod:`autograder.grading.prerequisites`).

A unit that fails while a unit it builds on fails its own checks says so first:

* ``check`` runs the student's own siblings: it names the file the unit uses, how many of its
  own checks that file fails, which unit to fix first, and the points at stake, measured (the
  unit's failed checks that ran that file's code);
* the hidden grade runs the course's stand-ins in place of the student's siblings: it says so,
  and that none of the unit's points depend on the student's file; it claims no points at stake;
* a correct submission gets no pointer, and every format a student reads carries it.

The bundle's tests run ``check`` as a student does, in the bundle's own venv, in each language.
"""
from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

import mutants
from conftest import ROOT, attn_course, grade_json
from student_bundle import COMMAND, LANGS, finished, readme_run
from autograder.authoring.catalogue import read
from autograder.core import i18n
from autograder.core.manifest import load_course
from autograder.core.results import GradeResult
from autograder.delivery.classroom import Classroom
from autograder.delivery.formats import markdown_text, to_junit, to_markdown
from autograder.delivery.gradescope import Gradescope
from autograder.grading import prerequisites

COURSE = load_course(ROOT)
BROKEN, BROKEN_FILE = "attention", COURSE.units["attention"].file
DEPENDENTS = ("multi_head", "transformer_block")  # the units whose public checks run attention.py
UNITS = (BROKEN, *DEPENDENTS)
MUTANT = next(m for m in mutants.load(BROKEN) if m["name"] == "no_scale")  # forgets 1/sqrt(d_k)
# multi_head's own bug besides: split_heads/merge_heads checks that never run attention.py fail too.
OWN_BUG = next(m for m in mutants.load("multi_head") if m["name"] == "split_by_one_view")
CJK = re.compile(r"[\u3400-\u9fff]")
USES = "{unit} uses your {file}, which fails {failed} of its {total} checks"
THROUGH = "{unit} uses your {file} through {via}, and {file} fails {failed} of its {total} checks"
FIX = "{uses}: fix {units} first."
STAKE = "Points at stake: {points:g}, in {count} of {unit}'s {failed} failed checks, which run your {files}."
STAND_INS = ("{unit} was graded with the course's own {files} in place of yours, so none of its points depend on "
             "yours: {yours}.")
YOURS = "your {file} fails {failed} of its {total} checks"
STAKE_AT = re.compile(r"Points at stake: ([\d.]+), in (\d+) of (\w+)'s (\d+) failed checks")


def said(lang: str, msgid: str) -> str:
    """``msgid`` as ``lang`` says it: the engine's catalogue (English: itself)."""
    if lang == "en":
        return msgid
    message = read(i18n.catalogue_path(i18n.ENGINE_LOCALE, lang, i18n.ENGINE_DOMAIN)).get(msgid)
    if message is None or not message.string:
        raise KeyError(f"{msgid!r} has no {lang} translation")
    return message.string


def pieces(lang: str, msgid: str) -> list[str]:
    """The words of ``msgid`` in ``lang`` between its fields: what any filled-in copy holds."""
    return [p for p in re.split(r"\{[^}]*\}", said(lang, msgid)) if p.strip()]


def counts(unit: dict) -> tuple[int, int]:
    """(failed, checks) of a unit's JSON result: "fails N of its M checks"."""
    return sum(t["status"] == "failed" for t in unit["tests"]), sum(t["status"] != "skipped" for t in unit["tests"])


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """reference; broken (attention.py the mutant, the rest the reference); both (multi_head.py with a
    bug of its own besides)."""
    base = tmp_path_factory.mktemp("unit-at-fault")
    reference = shutil.copytree(ROOT / "solutions", base / "reference")
    broken = mutants.write(BROKEN_FILE, MUTANT, base / "broken")
    both = mutants.write("multi_head.py", OWN_BUG, base / "both")
    shutil.copy(broken / BROKEN_FILE, both / BROKEN_FILE)
    return {"reference": reference, "broken": broken, "both": both}


@pytest.fixture(scope="module")
def checked(folders) -> dict[str, dict]:
    """``check --format json`` of each folder on the three units."""
    return {name: json.loads(attn_course("check", *UNITS, "--path", str(path), "--format", "json").stdout)
            for name, path in folders.items()}


# -- which unit builds on which -----------------------------------------------------------------

def test_what_a_unit_builds_on_comes_from_the_students_imports(tmp_path):
    """The reference reaches exactly what course.toml stands in for each unit (transformer_block reaches
    attention through multi_head); a multi_head that imports nothing builds on nothing; a missing file
    falls back on the course's stand-ins."""
    graph = prerequisites.imports(COURSE, ROOT / "solutions")
    for unit in COURSE.units.values():
        assert set(prerequisites.reach(graph, unit.name)) == set(unit.stand_ins), unit.name
    assert prerequisites.reach(graph, "transformer_block") == {"multi_head": None, "attention": "multi_head"}
    shutil.copytree(ROOT / "solutions", tmp_path / "own", ignore=shutil.ignore_patterns("transformer_block.py"))
    (tmp_path / "own" / "multi_head.py").write_text("import torch\n\n\ndef split_heads(x, h):\n    return x\n")
    graph = prerequisites.imports(COURSE, tmp_path / "own")
    assert prerequisites.reach(graph, "multi_head") == {}
    assert set(prerequisites.reach(graph, "transformer_block")) == set(COURSE.units["transformer_block"].stand_ins)


# -- check: the student's own siblings --------------------------------------------------------------

def test_check_points_at_the_broken_attention_and_measures_the_points_at_stake(checked):
    """Each dependent unit's message names attention.py, its own count of failures, attention as the
    unit to fix first, and the points at stake: every failed check of a unit that is the reference
    runs attention.py; where multi_head has a bug of its own, only some do."""
    for case in ("broken", "both"):
        report = checked[case]["units"]
        failed, total = counts(report[BROKEN])
        assert failed and not report[BROKEN]["message"], report[BROKEN]
        multi, block = report["multi_head"]["message"], report["transformer_block"]["message"]
        lead = FIX.format(uses=USES.format(unit="multi_head", file=BROKEN_FILE, failed=failed, total=total),
                          units=BROKEN)
        assert multi.startswith(lead + " "), multi
        through = THROUGH.format(unit="transformer_block", file=BROKEN_FILE, via="multi_head.py", failed=failed,
                                 total=total)
        assert through in block and block.index(": fix attention first.") > block.index(through), block
        for unit in DEPENDENTS:
            message = report[unit]["message"]
            failures = [t for t in report[unit]["tests"] if t["status"] == "failed"]
            found = STAKE_AT.search(message)
            assert found and found[3] == unit and int(found[4]) == len(failures), message
            if case == "broken":  # its own code is the reference: every failure runs attention.py
                assert int(found[2]) == len(failures) and float(found[1]) == sum(t["max_score"] for t in failures)
    multi = checked["both"]["units"]["multi_head"]
    at_stake = int(STAKE_AT.search(multi["message"])[2])
    assert 0 < at_stake < counts(multi)[0], multi["message"]  # split_heads's own checks run no attention.py


def test_a_correct_submission_gets_no_pointer(checked):
    assert all(not u["message"] for u in checked["reference"]["units"].values()), checked["reference"]
    assert checked["reference"]["score"] == checked["reference"]["max_score"]


def test_the_table_says_it_before_the_units_results(folders):
    """The pointer is the unit's first row in the table."""
    table = attn_course("check", *UNITS, "--path", str(folders["broken"])).stdout
    for unit in UNITS:
        rows = [line for line in table.splitlines() if line.startswith(f"│ {unit} ")]
        assert rows, table
        assert ("builds on" in rows[0]) == (unit in DEPENDENTS), (unit, rows[0])
    assert "multi_head uses your" in " ".join(table.split()), table


def test_a_check_that_recorded_nothing_says_which_points_could_be_at_stake(checked, folders):
    """Sandboxed (Classroom in a bundle), which checks ran attention.py is not known: the unit's failed
    checks are the most that is at stake, and the sentence says so."""
    result = GradeResult.from_dict(checked["broken"])
    for unit in result.units.values():
        unit.message = ""
    prerequisites.annotate(COURSE, result, folders["broken"], stand_ins=False, watched=None)
    message = result.units["multi_head"].message
    failures = [t for t in result.units["multi_head"].tests if t.status == "failed"]
    assert f"Points at stake: up to {sum(t.max_score for t in failures):g}, in multi_head's {len(failures)} " \
           "failed checks" in message, message


# -- the hidden grade: the course's stand-ins -------------------------------------------------------

def test_the_hidden_grade_says_the_stand_ins_took_the_place_of_the_broken_file(folders):
    """Graded with the course's own attention.py, multi_head and transformer_block keep full marks and
    say why: the student's attention.py fails its own checks, and none of their points depend on it.
    No points are claimed at stake. The reference gets no note."""
    broken, reference = grade_json([folders["broken"], folders["reference"]], list(UNITS))
    failed, total = counts(broken["units"][BROKEN])
    assert failed
    for unit in DEPENDENTS:
        result = broken["units"][unit]
        assert result["message"] == STAND_INS.format(
            unit=unit, files=BROKEN_FILE, yours=YOURS.format(file=BROKEN_FILE, failed=failed, total=total)), result
        assert "at stake" not in result["message"]
        assert result["score"] == result["max_score"], f"{unit}: its points depend on the student's {BROKEN_FILE}"
    assert all(not u["message"] for u in reference["units"].values()), reference


# -- every format a student reads --------------------------------------------------------------------

def test_every_format_carries_the_pointer_within_its_schema(checked):
    result = GradeResult.from_dict(checked["broken"])
    message = result.units["multi_head"].message
    assert message
    gradescope = Gradescope().results(result, COURSE)
    jsonschema.validate(gradescope, json.loads((ROOT / "tests/vendor/gradescope/results.schema.json").read_text()))
    assert f"multi_head: {message}" in gradescope["output"].splitlines()
    payload = Classroom().payloads(result, COURSE)["multi_head"]
    note, *tests = payload["tests"]
    assert note["status"] == "error" and note["message"] == message and note["score"] == 0, note
    assert [t["name"] for t in tests] == [t.name for t in result.units["multi_head"].tests if t.status != "skipped"]
    assert payload["max_score"] == result.units["multi_head"].max_score and payload["status"] == "fail"
    assert all(t["status"] != "error" for t in Classroom().payloads(result, COURSE)[BROKEN]["tests"])
    assert markdown_text(message) in to_markdown([result])
    suites = {s.get("name"): s for s in ET.fromstring(to_junit([result]).split("\n", 1)[1])}
    junit = suites[f"{result.submission}.multi_head"].find("properties/property[@name='message']")
    assert junit is not None and junit.get("value") == message


def test_a_passing_unit_with_a_stand_in_note_gets_no_classroom_error():
    """In Classroom a note is a test whose status is "error": only a failing runner gets one."""
    data = {"submission": "s", "units": {
        BROKEN: {"title": "a", "status": "graded", "message": "", "tests": [
            {"id": "t::a", "name": "a", "score": 0.0, "max_score": 1.0, "status": "failed", "output": "x"}]},
        "multi_head": {"title": "m", "status": "graded", "message": "", "tests": [
            {"id": "t::m", "name": "m", "score": 1.0, "max_score": 1.0, "status": "passed", "output": ""}]}}}
    result = prerequisites.annotate(COURSE, GradeResult.from_dict(data), ROOT / "solutions", stand_ins=True)
    assert result.units["multi_head"].message.startswith("multi_head was graded with the course's own")
    assert [t["status"] for t in Classroom().payloads(result, COURSE)["multi_head"]["tests"]] == ["pass"]


def test_the_pointer_reads_in_chinese(checked, folders):
    result = GradeResult.from_dict(checked["both"])
    for unit in result.units.values():
        unit.message = ""
    i18n.choose("zh", COURSE.locale)
    try:
        prerequisites.annotate(COURSE, result, folders["both"], stand_ins=False, watched=None)
        for unit in DEPENDENTS:
            message = result.units[unit].message
            assert CJK.search(message) and BROKEN_FILE in message, message
            assert all(p in message for p in pieces("zh", FIX)), message
            assert not re.search(r"\b(uses|fails|checks|fix|first)\b", message), message
    finally:
        i18n.choose(None)


# -- in the student's bundle, in each language ------------------------------------------------------

@pytest.fixture(scope="module", params=LANGS)
def bundle(request, student_bundles) -> dict:
    return student_bundles[request.param]


@pytest.mark.xdist_group("bundle")
def test_check_in_the_bundle_points_at_the_broken_attention(bundle):
    """The bundle's own check, on finished work whose attention.py is the mutant: multi_head's and
    transformer_block's messages point at attention.py in the bundle's language, as their first table
    row; the same work with the reference attention.py gets no pointer."""
    lang = bundle["lang"]
    json_check = f"{COMMAND} check {' '.join(UNITS)} --format json"
    with finished(bundle):
        correct = json.loads(readme_run(bundle, json_check).stdout)
        assert all(not u["message"] for u in correct["units"].values()), correct
        attention = bundle["root"] / "assignments" / BROKEN_FILE
        attention.write_text(mutants.mutated_source(attention.read_text(encoding="utf-8"), MUTANT), encoding="utf-8")
        report = json.loads(readme_run(bundle, json_check).stdout)
        table = readme_run(bundle, f"{COMMAND} check {' '.join(UNITS)}").stdout
    assert not report["units"][BROKEN]["message"]
    for unit, template in (("multi_head", USES), ("transformer_block", THROUGH)):
        message = report["units"][unit]["message"]
        assert BROKEN_FILE in message and message.startswith(unit), message
        for msgid in (template, FIX, STAKE):
            assert all(p in message for p in pieces(lang, msgid)), (lang, msgid, message)
        if lang != "en":
            assert CJK.search(message) and not re.search(r"\b(uses|fails|checks|stake)\b", message), message
        rows = [line for line in table.splitlines() if line.startswith(f"│ {unit} ")]
        assert rows and said(lang, "builds on") in rows[0], table
