"""Delivery to each platform, checked against the platform's own artefacts
(tests/vendor/), and the same points everywhere for the same code."""
from __future__ import annotations

import base64
import csv
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

import mutants
from autograder.delivery.formats import gradebook_csv
from autograder.core.manifest import load_course
from conftest import ROOT, attn_course, third_party
from modes import in_container

COURSE = load_course(ROOT)
VENDOR = ROOT / "tests" / "vendor"
GRADESCOPE_SCHEMA = json.loads((VENDOR / "gradescope" / "results.schema.json").read_text())
PL_RESULTS_SCHEMA = json.loads((VENDOR / "prairielearn" / "results.schema.json").read_text())
IN_PROCESS = {"AUTOGRADER_UNSAFE_NO_SANDBOX": "1", "AUTOGRADER_PYTHON": sys.executable}


def _pin(name: str) -> str:
    return f"{name}=={importlib.metadata.version(name).split('+')[0]}"


def _gradescope(tmp_path: Path, files: dict[str, str], *, python: bool = True, sandbox: bool = False,
                env: dict[str, str] | None = None, container: bool = False) -> tuple[dict, str, str]:
    """run_autograder of the exported zip in a fake /autograder (``tmp_path``, with
    ``source/`` already there); results.json, what Gradescope keeps as results/stdout, and stderr.
    In-process unless ``sandbox``; ``env``: added to this process's; ``container``: under Docker's
    seccomp profile (``modes.in_container``)."""
    (tmp_path / "submission").mkdir()
    for name, text in files.items():
        (tmp_path / "submission" / name).write_text(text)
    (tmp_path / "results").mkdir(exist_ok=True)
    env = {**os.environ, **IN_PROCESS, **(env or {}), "AUTOGRADER_GRADESCOPE_ROOT": str(tmp_path)}
    if not python:
        del env["AUTOGRADER_PYTHON"]
    if sandbox:
        del env["AUTOGRADER_UNSAFE_NO_SANDBOX"]
    script = ["bash", str(tmp_path / "source" / "run_autograder")]
    with open(tmp_path / "results" / "stdout", "w") as log:
        proc = subprocess.run(in_container(script) if container else script, stdout=log,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    return results, (tmp_path / "results" / "stdout").read_text(), proc.stderr


def _unzip_autograder(tmp_path: Path) -> Path:
    attn_course("export", "gradescope", "-o", str(tmp_path / "autograder.zip"))
    with zipfile.ZipFile(tmp_path / "autograder.zip") as zf:
        zf.extractall(tmp_path / "root" / "source")
    for script in ("setup.sh", "run_autograder"):
        os.chmod(tmp_path / "root" / "source" / script, 0o755)
    return tmp_path / "root"


STUB_PYTHON3 = """#!/usr/bin/env bash
# The base image's python3, stubbed: `python3 -m venv DIR` makes a bootstrap venv whose
# pip and uv only log; `uv venv DIR` makes DIR/bin/python run this project's interpreter.
echo "python3 $*" >> "$STUB_LOG"
[ "$1 $2" = "-m venv" ] || exit 1
mkdir -p "$3/bin"
printf '#!/usr/bin/env bash\\necho "bootstrap-python $*" >> "$STUB_LOG"\\n' > "$3/bin/python"
cat > "$3/bin/uv" <<'EOF'
#!/usr/bin/env bash
echo "uv $*" >> "$STUB_LOG"
if [ "$1" = venv ]; then
  mkdir -p "${@: -1}/bin"
  printf '#!/usr/bin/env bash\\nexec "%s" "$@"\\n' "$REAL_PYTHON" > "${@: -1}/bin/python"
  chmod +x "${@: -1}/bin/python"
fi
EOF
chmod +x "$3/bin/python" "$3/bin/uv"
"""


def test_gradescope_setup_and_run_autograder_in_a_fake_root(tmp_path):
    """setup.sh (apt-get, the image's python3, pip and uv stubbed: they need the network)
    then run_autograder with no AUTOGRADER_PYTHON, as Gradescope runs them."""
    root = _unzip_autograder(tmp_path)
    stubs, log = tmp_path / "stubs", tmp_path / "stub.log"
    stubs.mkdir()
    (stubs / "apt-get").write_text('#!/usr/bin/env bash\necho "apt-get $*" >> "$STUB_LOG"\n')
    (stubs / "python3").write_text(STUB_PYTHON3)
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "STUB_LOG": str(log), "REAL_PYTHON": sys.executable,
           "AUTOGRADER_GRADESCOPE_ROOT": str(root)}
    subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, check=True, capture_output=True, timeout=60)
    steps = log.read_text().splitlines()
    version = "{}.{}".format(*sys.version_info[:2])
    assert "apt-get install -y --no-install-recommends python3 python3-venv ca-certificates" in steps
    assert not any("python3." in s for s in steps if s.startswith("apt-get")), "no versioned apt package: 20.04 and 24.04 lack them"
    assert f"uv python install {version}" in steps and f"uv venv --python {version} {root}/venv" in steps
    installs = [s for s in steps if s.startswith("uv pip install")]
    assert f"{_pin('torch')} --index-url https://download.pytorch.org/whl/cpu" in installs[0], installs
    assert _pin("hypothesis") in installs[1].split(), installs
    data, stdout, _ = _gradescope(root, {"attention.py": (COURSE.solutions / "attention.py").read_text()}, python=False)
    jsonschema.validate(data, GRADESCOPE_SCHEMA)
    attention = [t for t in data["tests"] if t["tags"] == ["attention"]]
    assert attention and all(t["status"] == "passed" for t in attention)
    assert f"attention: {sum(t['max_score'] for t in attention):g}/" in stdout and "total " in stdout


def _prairielearn(question: Path, grade_root: Path, files: dict[str, str]) -> dict:
    """PrairieLearn's external grading job, by hand: tests/ and the student's files in a fake /grade."""
    (grade_root / "student").mkdir(parents=True)
    for name, text in files.items():
        (grade_root / "student" / name).write_text(text)
    os.symlink(question / "tests", grade_root / "tests")
    info = json.loads((question / "info.json").read_text())
    entry = info["externalGradingOptions"]["entrypoint"].replace("/grade", str(grade_root), 1)
    env = {**os.environ, **IN_PROCESS, "AUTOGRADER_PRAIRIELEARN_ROOT": str(grade_root)}
    proc = subprocess.run([entry], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((grade_root / "results" / "results.json").read_text())
    jsonschema.validate(data, PL_RESULTS_SCHEMA)
    return data


@pytest.fixture(scope="module")
def question(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pl") / "question"
    attn_course("export", "prairielearn", str(out))
    return out


@pytest.mark.xdist_group("platforms-question")  # the two share one worker's question
def test_prairielearn_question_and_results_follow_its_schemas(question, tmp_path):
    info = json.loads((question / "info.json").read_text())
    jsonschema.validate(info, json.loads(third_party("prairielearn/infoQuestion.json").read_text()))
    options = info["externalGradingOptions"]
    assert options["entrypoint"] == "/grade/tests/run.sh" and 0 < options["timeout"] <= 600
    dockerfile = (question / "Dockerfile").read_text()
    assert f"{_pin('torch')} --index-url https://download.pytorch.org/whl/cpu" in dockerfile and _pin("hypothesis") in dockerfile
    assert not (question / "tests" / "solutions").exists(), "the reference must not ship to PrairieLearn"
    none = _prairielearn(question, tmp_path / "a", {"notes.txt": "nothing handed in"})
    assert none["gradable"] is False and "no unit files" in none["format_errors"][0]
    mutant = next(m for m in mutants.load("attention") if m["name"] == "no_scale")
    bug = mutants.mutated_source((COURSE.solutions / "attention.py").read_text(), mutant)
    data = _prairielearn(question, tmp_path / "b", {"attention.py": bug})
    assert data["gradable"] is True and 0 < data["score"] < 1
    attention = [t for t in data["tests"] if t["name"].startswith(COURSE.units["attention"].title)]
    assert any(t["points"] < t["max_points"] and "sqrt" in t["message"] for t in attention)
    total = sum(t["points"] for t in data["tests"]) / sum(t["max_points"] for t in data["tests"])
    assert abs(data["score"] - total) < 1e-6


@pytest.mark.xdist_group("platforms-question")
def test_prairielearn_prices_no_late_work_its_assessment_does(question, tmp_path):
    """issue 59, decided (README, "Instructors: PrairieLearn"): PrairieLearn applies lateness itself,
    by the ``credit`` of its assessments' access rules, to the score the grader reports; the grading
    job is given no submission time. So the exported question carries no access rule (PrairieLearn's
    own question schema refuses one: they belong to the assessment, infoAssessment.json) and the
    grader reports the raw score: with the unit due in 2020 under ``zero`` (set by the project's
    set-due in the question's own manifest) and an upload late by its timestamp.txt and by its
    files' times, the score is still every test's points over the maximum, not 0."""
    schema = json.loads(third_party("prairielearn/infoQuestion.json").read_text())
    info = json.loads((question / "info.json").read_text())
    jsonschema.validate(info, schema)
    assert not {"allowAccess", "accessControl"} & set(info)
    for rules in ({"allowAccess": [{"credit": 100, "endDate": "2027-03-01T23:59:59"}]},
                  {"accessControl": [{"dateControl": {"due": {"date": "2027-03-01T23:59:59"}}}]}):
        with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
            jsonschema.validate({**info, **rules}, schema)

    late = tmp_path / "question"
    shutil.copytree(question, late, symlinks=True)
    manifest = late / "tests" / "course" / "course.toml"
    set_due = subprocess.run([sys.executable, "-m", "autograder.cli", "set-due", "attention", "2020-01-01T00:00:00Z"],
                             cwd=ROOT, env={**os.environ, "AUTOGRADER_COURSE_ROOT": str(late / "tests")},
                             capture_output=True, text=True, timeout=120)
    assert set_due.returncode == 0, set_due.stderr
    text = manifest.read_text(encoding="utf-8")
    assert 'policy = "per_day"\nrate = 10\n' in text
    manifest.write_text(text.replace('policy = "per_day"\nrate = 10\n', 'policy = "zero"\n', 1), encoding="utf-8")
    shipped = load_course(late / "tests")
    assert shipped.late.policy == "zero" and shipped.units["attention"].due.year == 2020
    solution = (COURSE.solutions / "attention.py").read_text()
    data = _prairielearn(late, tmp_path / "grade", {"attention.py": solution, "timestamp.txt": "2021-01-01 00:00:00 UTC"})
    attention = [t for t in data["tests"] if t["name"].startswith(COURSE.units["attention"].title)]
    assert attention and all(t["points"] == t["max_points"] for t in attention)
    total = sum(t["points"] for t in data["tests"]) / sum(t["max_points"] for t in data["tests"])
    assert data["gradable"] is True and data["score"] > 0 and abs(data["score"] - total) < 1e-6
    assert "day late" not in data["output"] and "penalty" not in data["output"]


def test_gradebook_csv_default_layout():
    """(The LMS layouts: test_lms_gradebooks.py.)"""
    records = [
        {"student": "alice", "status": "graded",
         "result": {"units": {"attention": {"score": 60, "tests": []}, "multi_head": {"score": 2.5, "tests": []}}}},
        {"student": "bob", "status": "grader failure:\nTraceback (most recent call last):\n  boom", "result": None},
    ]
    possible = {"attention": 62, "multi_head": 30}
    default = list(csv.reader(gradebook_csv(["attention", "multi_head"], possible, records).splitlines()))
    assert default[0] == ["student", "status", "attention", "multi_head", "total"]
    assert default[1] == ["Points Possible", "", "62", "30", "92"]
    # Not graded: blank, never 0 (issue 59: only graded work gets a number).
    assert default[3] == ["bob", "grader failure: Traceback (most recent call last): boom", "", "", ""]


# The same code on every platform: the reference, and three mutants, one unit each.
CASES = {"reference": ("attention", None), "attention_bug": ("attention", "no_scale"),
         "multi_head_bug": ("multi_head", "no_out_proj"), "positional_bug": ("positional_encoding", "sin_cos_swapped")}


def _case_source(unit: str, mutant_name: str | None) -> str:
    source = (COURSE.solutions / COURSE.units[unit].file).read_text()
    if mutant_name is None:
        return source
    return mutants.mutated_source(source, next(m for m in mutants.load(unit) if m["name"] == mutant_name))


def _points(tests, key=lambda t: t["name"]) -> dict[str, float]:
    out = {}
    for test in tests:
        assert key(test) not in out, f"two properties are named {key(test)!r}"
        out[key(test)] = test["score"] if "score" in test else test["points"]
    return out


@pytest.mark.xdist_group("platforms-question")
def test_points_agree_across_cli_gradescope_prairielearn_classroom_and_batch(tmp_path, question):
    subs = tmp_path / "subs"
    for case, (unit, mutant_name) in CASES.items():
        (subs / case).mkdir(parents=True)
        (subs / case / COURSE.units[unit].file).write_text(_case_source(unit, mutant_name))
    units = sorted({unit for unit, _ in CASES.values()})
    unit_args = [arg for u in units for arg in ("--unit", u)]
    cli = json.loads(attn_course("grade", *(str(subs / c) for c in CASES), *unit_args, "--no-sandbox",
                                 "--format", "json").stdout)
    roster = tmp_path / "roster.csv"  # Canvas's gradebook export (ids made up), the uploads' names beside
    columns = {unit: f"{COURSE.units[unit].title} ({9000 + i})" for i, unit in enumerate(units)}
    with roster.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "folder",
                                       *columns.values()],
                                      *([c, str(i), "", "", "A", c, *[""] * len(units)] for i, c in enumerate(CASES))])
    out = tmp_path / "batch"
    attn_course("grade-batch", str(subs), "-o", str(out), *unit_args, "--no-progress", "--csv", "canvas",
                "--roster", str(roster))
    canvas = {row["ID"]: row for row in csv.DictReader((out / "gradebook.csv").open())}
    root = _unzip_autograder(tmp_path / "gs")
    for index, ((case, (unit, _)), expected) in enumerate(zip(CASES.items(), cli)):
        title = COURSE.units[unit].title
        mine = expected["units"][unit]
        counted = [t for t in mine["tests"] if t["status"] != "skipped"]
        want = _points(counted)
        assert 0 < sum(want.values()), f"{case}: the case must score something"
        if case != "reference":
            assert sum(want.values()) < mine["max_score"], f"{case}: the mutant must lose points"
        batch = json.loads((out / "students" / f"{case}.json").read_text())["result"]["units"][unit]
        assert _points(t for t in batch["tests"] if t["status"] != "skipped") == want, f"{case}: batch"
        assert float(canvas[str(index)][columns[unit]]) == mine["score"], f"{case}: the Canvas gradebook"
        files = {COURSE.units[unit].file: (subs / case / COURSE.units[unit].file).read_text()}
        case_root = tmp_path / "gs" / case
        case_root.mkdir()
        (case_root / "source").symlink_to(root / "source")
        gradescope, _, _ = _gradescope(case_root, files)
        scope = [t for t in gradescope["tests"] if t["tags"] == [unit]]
        assert _points(scope, key=lambda t: t["name"].removeprefix(f"{title}: ")) == want, f"{case}: Gradescope"
        pl = _prairielearn(question, tmp_path / "pl" / case, files)
        pl_tests = [t for t in pl["tests"] if t["name"].startswith(f"{title}: ")]
        assert _points(pl_tests, key=lambda t: t["name"].removeprefix(f"{title}: ")) == want, f"{case}: PrairieLearn"
        # Classroom: the public part, which Gradescope shows as visible.
        output = tmp_path / f"{case}.github_output"
        attn_course("check", unit, "--path", str(subs / case), "--format", "classroom", "-o", str(output))
        payload = json.loads(base64.b64decode(dict(line.split("=", 1) for line in output.read_text().splitlines())[unit]))
        visible = _points(t for t in counted if t["visibility"] == "visible")
        assert visible and _points(payload["tests"]) == visible, f"{case}: Classroom"
        shown = {k.removeprefix(f"{title}: "): t["score"] for t in scope if t["visibility"] == "visible" for k in [t["name"]]}
        assert shown == visible, f"{case}: Gradescope's visible tests are the Classroom's"
