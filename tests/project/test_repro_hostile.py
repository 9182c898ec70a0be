"""`repro` reads examples that students share (issue 43, item 4): the corpus in
tests/hostile/repro/ (its README names each attack) is refused with a message that says why, and
nothing it names runs or is written; what is admitted is data of the unit's own API, and the
script `--snippet` prints calls nothing else; the examples the grader's own failure messages carry
still rerun."""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cli_runner
import mutants
from autograder.authoring.contract import unit_section
from autograder.core.manifest import load_course
from autograder.core.protocol import Call
from autograder.grading import repro
from conftest import ROOT, grade_json

COURSE = load_course(ROOT)
CORPUS = ROOT / "tests" / "hostile" / "repro"
ATTACKS = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(CORPUS.glob("*.json"))}
REFUSED = [name for name, a in ATTACKS.items() if a["refused"] is not None]
ADMITTED = [name for name, a in ATTACKS.items() if a["refused"] is None]

# What a script may call besides the unit's API (functions, classes, the methods of its classes,
# the torch modules handed in): building the values, the object's own set-up, and the comparison.
SCRIPT_CALLS = {"print", "float", "dict", "zip", "built", "obj", "torch.tensor", "torch.empty", "torch.device",
                "torch.manual_seed", "torch.testing.assert_close", "torch.autograd.backward",
                "torch.utils._pytree.tree_leaves", "obj.load_state_dict", "obj.to", "obj.train", "obj.named_parameters"}


def _api(unit: str) -> repro.Api:
    return repro.Api.parse(unit, unit_section(COURSE, unit))


def _dotted(node: ast.AST) -> str:
    """``torch.nn.LSTMCell`` for a chain of names; '<expression>' for anything else called."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "<expression>"


def assert_script_calls_only_the_api(script: str, unit: str) -> ast.Module:
    """The script parses, imports torch and the unit's API names only, and calls nothing else."""
    api = _api(unit)
    names = api.functions | set(api.classes)
    allowed = (SCRIPT_CALLS | names | {f"torch.nn.{n}" for n in api.handed}
               | {f"obj.{m}" for methods in api.classes.values() for m in methods | repro.READ_OUTS})
    tree = ast.parse(script)
    module = f"{COURSE.assignments.name}.{Path(COURSE.units[unit].file).stem}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert [a.name for a in node.names] == ["torch"], ast.unparse(node)
        elif isinstance(node, ast.ImportFrom):
            assert node.module == module and {a.name for a in node.names} <= names, ast.unparse(node)
    called = {_dotted(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert called <= allowed, f"the script calls {sorted(called - allowed)}:\n{script}"
    return tree


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _repro(home: Path, unit: str, example: str, *extra: str) -> subprocess.CompletedProcess:
    """``repro`` as a student runs it from their bundle's folder (relative paths land there)."""
    return cli_runner.run(["repro", unit, "test_shared", "--example", example, *extra], cwd=home,
                          env=dict(os.environ), timeout=120)


@pytest.fixture
def home(tmp_path) -> Path:
    """A student's folder: the finished units (the reference) as the stubs' package."""
    shutil.copytree(COURSE.solutions, tmp_path / "home" / COURSE.assignments.name)
    return tmp_path / "home"


@pytest.mark.parametrize("name", REFUSED)
def test_a_hostile_example_is_refused_and_nothing_runs(name, home):
    attack = ATTACKS[name]
    before = _snapshot(home)
    for extra in (["--snippet"], ["--path", str(home / COURSE.assignments.name)]):
        proc = _repro(home, attack["unit"], json.dumps(attack["example"]), *extra)
        assert proc.returncode == 2 and attack["refused"] in proc.stderr, (extra, proc.stderr[-1500:])
        assert "Traceback" not in proc.stderr and proc.stdout == "", (extra, proc.stdout[-500:], proc.stderr[-1500:])
        assert "copy the whole reproduce command" in proc.stderr or "take the command from your own" in proc.stderr
    assert _snapshot(home) == before, "a refused example changed the student's folder"


@pytest.mark.parametrize("name", ADMITTED)
def test_hostile_strings_in_admitted_data_stay_strings(name, home):
    """Well-formed data of the unit's API, whose strings hold code: the script holds them as
    constants, calls only the API, and running it runs none of them."""
    attack = ATTACKS[name]
    proc = _repro(home, attack["unit"], json.dumps(attack["example"]), "--snippet")
    assert proc.returncode == 0, proc.stderr[-1500:]
    tree = assert_script_calls_only_the_api(proc.stdout, attack["unit"])
    constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert any(attack["payload"] in c for c in constants), proc.stdout
    subprocess.run([sys.executable, "-c", proc.stdout], cwd=home, capture_output=True, text=True, timeout=120)
    assert not (home / "PWNED").exists(), "the pasted script ran code from the example"


def test_an_example_nested_past_any_case_is_refused(home):
    """Nesting deep enough to exhaust the parser's or the validator's recursion is an error
    message, not a traceback."""
    for depth in (900, 5000):  # past the validator's recursion, then past the JSON parser's
        example = json.dumps({"unit": "attention", "call": {"unit": "attention", "target": "softmax", "kwargs": {}}})
        example = example.replace('"kwargs"', '"args": [' + "[" * depth + "]" * depth + '], "kwargs"')
        proc = _repro(home, "attention", example, "--snippet")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (depth, proc.stderr[-1500:])
        assert "--example" in proc.stderr, proc.stderr[-1500:]


def test_the_script_writes_a_name_only_if_it_is_a_name():
    """The script's own guard, whatever reached it: a keyword's name that would end the call is
    refused, so are values with no literal form."""
    x = torch.tensor([0.0, 1.0], dtype=torch.float64)
    api = _api("attention")
    hostile = {"call": Call("attention", "softmax", (x,), {"dim=1)\nopen('PWNED', 'w')\n#": 1}), "part": None,
               "expected": None, "what": "output", "atol": 0.0, "rtol": 0.0}
    with pytest.raises(ValueError, match="is not a Python name"):
        repro.snippet(COURSE, hostile, api)
    opaque = dict(hostile, call=Call("attention", "softmax", (x,), {"dim": object()}))
    with pytest.raises(ValueError, match="no literal"):
        repro.snippet(COURSE, opaque, api)


def test_the_api_comes_from_the_course_page():
    """What repro admits is each unit's section of the API page; the torch modules it admits are
    exactly those the unit's hidden tests build for it (New("torch.nn....")), none elsewhere."""
    oracles = ast.parse((COURSE.hidden_tests / "oracles_recurrent_cells.py").read_text(encoding="utf-8"))
    cells = next(ast.literal_eval(n.value) for n in oracles.body
                 if isinstance(n, ast.Assign) and [_dotted(t) for t in n.targets] == ["CLASS"])
    for unit in COURSE.units:
        api = _api(unit)
        assert api.functions or api.classes, f"{unit}: the API page declares nothing"
        tests = (COURSE.hidden_tests / f"test_{unit}_properties.py").read_text(encoding="utf-8")
        built = set(re.findall(r'New\("torch\.nn\.(\w+)"', tests))
        # recurrent_cells builds torch's cell of each kind by name: New(f"torch.nn.{CLASS[kind]}", ...).
        each_kind = tests.count('New(f"torch.nn.{CLASS[kind]}"')
        assert tests.count('New(f"torch.nn.') == each_kind, f"{unit}: a torch.nn recipe this test cannot read"
        assert api.handed == built | (set(cells.values()) if each_kind else set()), (unit, api.handed)


# -- the grader's own examples still rerun ------------------------------------------------------

# Failures whose reproduce commands carry what the restriction must admit: torch's cells handed
# to unroll, a cache inside decode_in_chunks' recipe, state_dict on a module with a state.
HONEST = [("recurrent_cells", "unroll_returns_first_state"), ("efficient_attention", "fresh_cache_per_chunk"),
          ("multi_head", "out_proj_bias_flag_ignored")]


@pytest.mark.parametrize("unit, mutant", HONEST)
def test_the_graders_own_examples_still_rerun(unit, mutant, tmp_path):
    spec = next(m for m in mutants.load(unit) if m["name"] == mutant)
    folder = mutants.write(COURSE.units[unit].file, spec, tmp_path / mutant)
    [result] = grade_json([folder], [unit], "--no-sandbox")  # the catalogue's own grade, when it ran
    outputs = [t["output"] for t in result["units"][unit]["tests"] if "\nreproduce: " in t["output"]]
    commands = [shlex.split(o.split("\nreproduce: ", 1)[1].splitlines()[0])[1:] for o in outputs]
    assert commands, f"{mutant}: no failure carries a reproduce command"
    for args in commands:
        script = cli_runner.run([*args, "--snippet"], cwd=ROOT, env=dict(os.environ), timeout=120)
        assert script.returncode == 0, (args, script.stderr[-1500:])
        assert_script_calls_only_the_api(script.stdout, unit)
        rerun = cli_runner.run([*args, "--path", str(folder)], cwd=ROOT, env=dict(os.environ), timeout=120)
        assert rerun.returncode in (0, 1) and "the call: " in rerun.stdout, (args, rerun.stdout[-800:], rerun.stderr[-1500:])
