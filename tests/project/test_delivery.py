"""Delivery: the student bundle, Gradescope, GitHub Classroom, CI formats and batch grading."""
from __future__ import annotations

import base64
import csv
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile

import jsonschema
import pytest
import yaml

import mutants
from autograder import stubgen
from autograder.manifest import load_course
from conftest import ROOT, attn_course

COURSE = load_course(ROOT)

# Gradescope's results.json, as its autograder specification defines it.
GRADESCOPE_SCHEMA = {
    "type": "object",
    "required": ["score", "execution_time", "output", "stdout_visibility", "tests"],
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number"},
        "output": {"type": "string"},
        "stdout_visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "score", "max_score", "status", "output", "visibility"],
                "properties": {
                    "name": {"type": "string"},
                    "score": {"type": "number"},
                    "max_score": {"type": "number"},
                    "status": {"enum": ["passed", "failed"]},
                    "output": {"type": "string"},
                    "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
                },
            },
        },
    },
}

# What classroom-resources/autograding-grading-reporter decodes from <RUNNER>_RESULTS.
CLASSROOM_SCHEMA = {
    "type": "object",
    "required": ["version", "status", "max_score", "tests"],
    "properties": {
        "version": {"const": 1},
        "status": {"enum": ["pass", "fail", "error"]},
        "max_score": {"type": "number"},
        "tests": {"type": "array", "items": {"type": "object", "required": ["name", "status", "score", "message"],
                                             "properties": {"status": {"enum": ["pass", "fail", "error"]}}}},
    },
}


def _hidden_test_names() -> set[str]:
    return {m for p in COURSE.hidden_tests.glob("test_*.py") for m in re.findall(r"def (test_\w+)", p.read_text())}


def test_release_bundle_holds_no_solution_and_no_hidden_test(tmp_path):
    out = tmp_path / "bundle"
    attn_course("release", str(out))
    # One line such as "super().__init__()" also occurs in honest demo code; two consecutive
    # lines of a solution region are specific to it.
    def pairs(lines):
        lines = [line for line in lines if line]
        return {(a, b) for a, b in zip(lines, lines[1:]) if len(a) + len(b) >= 30}

    secrets = set().union(*(pairs(stubgen.solution_lines(p.read_text())) for p in COURSE.solutions.glob("*.py")))
    hidden = _hidden_test_names() - {"test_cpu_and_cuda_agree"} - {
        m for p in COURSE.public_tests.glob("*.py") for m in re.findall(r"def (test_\w+)", p.read_text())}
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in {".py", ".md", ".toml", ".yml", ".ipynb", ".txt", ".html"}:
            text = path.read_text(encoding="utf-8")
            lines = {line.strip() for line in text.splitlines()}
            assert not secrets & lines, f"{path}: solution lines {sorted(secrets & lines)[:3]}"
            named = [n for n in hidden if re.search(rf"\b{n}\b", text)]
            assert not named, f"{path} names hidden tests: {named}"
    assert not (out / "solutions").exists() and not (out / "tests" / "hidden").exists()
    assert (out / "assignments" / "attention.py").is_file()
    assert f'"hypothesis=={_base_version("hypothesis")}"' in (out / "pyproject.toml").read_text(), \
        "the bundle must pin the grader's hypothesis: its examples are a function of the version"


def test_release_bundle_checks_student_work(tmp_path):
    out = tmp_path / "bundle"
    attn_course("release", str(out))
    shutil.copy(COURSE.solutions / "attention.py", out / "assignments" / "attention.py")
    proc = subprocess.run([sys.executable, "-m", "autograder.cli", "check", "attention", "--format", "json"],
                          cwd=out, capture_output=True, text=True, env={**os.environ, "ATTN_COURSE_ROOT": str(out)})
    assert proc.returncode == 0, proc.stderr
    unit = json.loads(proc.stdout)["units"]["attention"]
    assert unit["score"] == unit["max_score"] > 0
    assert all(t["visibility"] == "visible" for t in unit["tests"])


def _base_version(name: str) -> str:
    return importlib.metadata.version(name).split("+")[0]


def _gradescope_root(tmp_path, submission_files: dict[str, bytes]):
    zip_path = tmp_path / "autograder.zip"
    attn_course("export", "gradescope", "-o", str(zip_path))
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
        assert "setup.sh" in names and "run_autograder" in names
        setup = zf.read("setup.sh").decode()
        assert all(f"{name}=={_base_version(name)} " in setup for name in ("torch", "hypothesis")), setup
        assert not [n for n in names if n.startswith("solutions/")], "the reference must not ship to Gradescope"
        zf.extractall(root / "source")
    (root / "submission").mkdir()
    for name, body in submission_files.items():
        (root / "submission" / name).write_bytes(body)
    os.chmod(root / "source" / "run_autograder", 0o755)
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], capture_output=True, text=True,
                          env={**os.environ, "ATTN_GRADESCOPE_ROOT": str(root), "ATTN_PYTHON": sys.executable}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text())


def test_gradescope_results_follow_the_schema(tmp_path):
    mutant = next(m for m in mutants.load("attention") if m["name"] == "no_scale")
    source = mutants.mutated_source((COURSE.solutions / "attention.py").read_text(), mutant)
    data = _gradescope_root(tmp_path, {"attention.py": source.encode()})
    jsonschema.validate(data, GRADESCOPE_SCHEMA)
    attention = [t for t in data["tests"] if "attention" in t.get("tags", [])]
    assert {t["visibility"] for t in attention} == {"visible", "after_published"}
    assert 0 < data["score"] < sum(t["max_score"] for t in data["tests"])
    assert "Hidden properties count too" in data["output"]


def test_gradescope_zip_submission_and_corrupt_zip(tmp_path):
    corrupt = _gradescope_root(tmp_path / "a", {"submission.zip": b"PK\x03\x04 not really a zip"})
    jsonschema.validate(corrupt, GRADESCOPE_SCHEMA)
    assert corrupt["score"] == 0 and "not a readable zip" in corrupt["output"]


def test_classroom_workflow_and_payloads(tmp_path):
    attn_course("export", "classroom", str(tmp_path))
    flow = yaml.safe_load((tmp_path / ".github" / "workflows" / "classroom.yml").read_text())
    steps = flow["jobs"]["run-autograding-tests"]["steps"]
    assert any(f"pip install torch=={_base_version('torch')} " in s.get("run", "") for s in steps), steps
    grading = next(s for s in steps if s.get("id") == "public-tests")
    reporter = next(s for s in steps if "autograding-grading-reporter" in s.get("uses", ""))
    runners = reporter["with"]["runners"].split(",")
    assert runners == list(COURSE.units)
    # Run the grading step's command as the workflow would, on a student's partly done work.
    work = tmp_path / "student"
    shutil.copytree(COURSE.assignments, work)
    shutil.copy(COURSE.solutions / "attention.py", work / "attention.py")
    output = tmp_path / "github_output"
    command = grading["run"].replace('"$GITHUB_OUTPUT"', str(output)).replace("attn-course", f"{sys.executable} -m autograder.cli")
    subprocess.run(f"{command} --path {work}", shell=True, cwd=ROOT, check=True, capture_output=True)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    for runner in runners:
        env_value = reporter["env"][f"{runner.upper()}_RESULTS"]
        assert f"outputs.{runner}" in env_value
        payload = json.loads(base64.b64decode(outputs[runner]))
        jsonschema.validate(payload, CLASSROOM_SCHEMA)
    attention = json.loads(base64.b64decode(outputs["attention"]))
    assert attention["status"] == "pass" and sum(t["score"] for t in attention["tests"]) == attention["max_score"] > 0


def test_junit_markdown_and_fail_under(tmp_path):
    junit = attn_course("grade", "assignments", "--unit", "attention", "--format", "junit").stdout
    suite = ET.fromstring(junit).find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) > 10 and all(c.find("properties/property[@name='max_score']") is not None for c in cases)
    assert int(suite.get("failures")) > 0
    markdown = attn_course("grade", "assignments", "--unit", "attention", "--format", "markdown").stdout
    assert "| unit | property | points | reason |" in markdown and "not implemented yet" in markdown
    assert attn_course("grade", "assignments", "--unit", "attention", "--fail-under", "1", check=False).returncode == 1
    assert attn_course("grade", "solutions", "--unit", "attention", "--fail-under", "100").returncode == 0


def test_batch_grading_resumes_and_reports_broken_submissions(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copytree(COURSE.solutions, subs / "alice")
    mutants.write("attention.py", next(m for m in mutants.load("attention") if m["name"] == "no_scale"), subs / "bob")
    with zipfile.ZipFile(subs / "carol.zip", "w") as zf:
        zf.write(COURSE.solutions / "attention.py", "carol/attention.py")
    (subs / "dave.zip").write_bytes(b"corrupt")
    (subs / "erin").mkdir()
    (subs / "erin" / "attention.txt").write_text("wrong name")
    (subs / "frank").mkdir()
    (subs / "frank" / "attention.py").symlink_to("/etc/passwd")
    (subs / "grace").mkdir()
    (subs / "grace" / "attention.py").write_bytes(b"\xff\xfe not utf-8")
    out = tmp_path / "out"
    first = attn_course("grade-batch", str(subs), "-o", str(out), "-j", "2", "--unit", "attention")
    rows = list(csv.reader((out / "gradebook.csv").open()))
    assert rows[0][:3] == ["student", "status", "attention"] and rows[1][0] == "Points Possible"
    book = {r[0]: r for r in rows[2:]}
    possible = float(rows[1][2])
    assert float(book["alice"][2]) == possible and float(book["carol"][2]) == possible
    assert 0 < float(book["bob"][2]) < possible
    assert "not a readable zip" in book["dave"][1]
    assert "no unit files" in book["erin"][1]
    assert "symlink" in book["frank"][1]
    assert book["grace"][1] == "graded" and float(book["grace"][2]) == 0
    assert (out / "students" / "bob.md").read_text().count("sqrt(d_k)") >= 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["graded_now"] == 7 and summary["most_failed"][0]["students"] >= 1
    # A second run grades nothing again; a changed submission is graded again.
    attn_course("grade-batch", str(subs), "-o", str(out), "--unit", "attention")
    assert json.loads((out / "summary.json").read_text())["graded_now"] == 0
    shutil.rmtree(subs / "bob")
    shutil.copytree(COURSE.solutions, subs / "bob")
    attn_course("grade-batch", str(subs), "-o", str(out), "--unit", "attention")
    assert json.loads((out / "summary.json").read_text())["graded_now"] == 1
    assert first.returncode == 0


def test_a_killed_batch_resumes_with_nothing_lost(tmp_path):
    """SIGKILL mid-batch (the machine went down): what was recorded stays, the rest is graded once."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    for name in ("a1", "a2", "a3", "a4", "a5"):  # the first chunk: recorded at once (no unit files)
        (subs / name).mkdir(parents=True)
        (subs / name / "notes.txt").write_text("nothing handed in")
    shutil.copytree(COURSE.solutions, subs / "b6")  # the second chunk: still grading when killed
    batch = subprocess.Popen([sys.executable, "-m", "autograder.cli", "grade-batch", str(subs), "-o", str(out),
                              "-j", "1", "--unit", "attention", "--no-progress"],
                             cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = out / "students"
    deadline = time.monotonic() + 120
    while len(list(records.glob("a*.json"))) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(batch.pid, signal.SIGKILL)
    batch.wait()
    assert len(list(records.glob("a*.json"))) == 5 and not (records / "b6.json").exists(), "killed too late to test"
    attn_course("grade-batch", str(subs), "-o", str(out), "--unit", "attention", "--no-progress")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["graded_now"] == 1, "only the student the kill interrupted is graded again"
    book = {row[0]: row for row in csv.reader((out / "gradebook.csv").open())}
    assert set(book) == {"student", "Points Possible", "a1", "a2", "a3", "a4", "a5", "b6"}
    assert float(book["b6"][2]) == float(book["Points Possible"][2]) and "no unit files" in book["a1"][1]
