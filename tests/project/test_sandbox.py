"""The sandbox (issue 6): hostile submissions end at zero, within their limits,
leaving nothing behind; honest ones score exactly as they do in-process.

The hostile corpus lives in tests/hostile/ (one folder per attack, plus
generated.py for the cases built from the course's own files).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from autograder import transport
from autograder.manifest import load_course
from autograder.sandbox import SandboxSubject, isolation_mode, processes_of
from autograder.subject import Call, New, Result, StudentError

COURSE = load_course(ROOT)
HOSTILE = ROOT / "tests" / "hostile"
sys.path.insert(0, str(HOSTILE))
import generated  # noqa: E402

TIMEOUT = 0.5  # per call, for the hostile runs
# What the sleepers of session_children (rewritten on copy) and of test_closing_leaves_nothing
# carry: one per test process, since the leftover scan sees the whole machine and another
# xdist worker may be grading its own copy of the corpus at the same moment.
CORPUS_MARK = "987654321"
MARK = f"9{os.getpid():08d}"

# Driver run in a fresh interpreter: grade, then report what the sandbox used.
DRIVER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from autograder import sandbox
    from autograder.grading import grade
    from autograder.manifest import load_course
    spec = json.loads(sys.argv[1])
    start = time.monotonic()
    results = grade(load_course(), [Path(p) for p in spec["paths"]], units=spec["units"],
                    timeout=spec["timeout"], sandbox=spec["sandbox"])
    print(json.dumps({"seconds": time.monotonic() - start, "results": [r.to_dict() for r in results],
                      "uids": sandbox.USED_UIDS, "folders": sorted(set(sandbox.USED_FOLDERS))}))
""")


def drive(paths, units, *, timeout=10.0, sandbox=True) -> dict:
    spec = json.dumps({"paths": [str(p) for p in paths], "units": list(units), "timeout": timeout, "sandbox": sandbox})
    proc = subprocess.run([sys.executable, "-c", DRIVER, spec], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def leftovers(run: dict, grace: float = 5.0) -> list[str]:
    """Processes or folders that outlived a grading run.

    A process killed at close may take a moment to be reaped on a loaded
    machine, so what is still there after ``grace`` seconds counts; a real
    leak (the sleepers sleep for 28 years or more) is still reported, with its
    uid and parent.
    """
    deadline = time.monotonic() + grace
    while True:
        left = [f"uid {uid}: pids {pids}" for uid in run["uids"] if (pids := processes_of(uid))]
        left += [f"folder {f}" for f in run["folders"] if os.path.exists(f)]
        for entry in os.listdir("/proc"):
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                status = dict(line.split(":", 1) for line in Path(f"/proc/{entry}/status").read_text().splitlines())
            except (OSError, ValueError):
                continue
            if MARK.encode() in cmdline and b"pytest" not in cmdline:
                facts = {key: status.get(key, "?").split()[0] for key in ("Uid", "PPid", "State")}
                left.append(f"pid {entry}: {cmdline[:80]!r} {facts}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


# -- the hostile corpus ----------------------------------------------------------------

FOLDER_CASES = sorted(p.name for p in HOSTILE.iterdir() if (p / "attention.py").is_file())
LOOPS = ["endless_loop", "endless_loop_uncatchable"]
# Case -> what the unit's result must show besides a zero (a word of the reason).
EXPECT = {
    "read_solutions": "", "sys_modules": "", "patch_comparisons": "", "tensor_subclass": "tensor subclass",
    "sys_exit": "SystemExit", "os_exit": "exited with status 0", "endless_loop": "timed out",
    "endless_loop_uncatchable": "timed out", "out_of_memory": "ran out of memory", "print_flood": "printed more than",
    "session_children": "", "forged_results": "", "syntax_error": "does not compile",
    "evil_exception": "exited with status 0", "garbage_reply": "malformed", "symlink_file": "symbolic link",
    "symlink_dir": "", **{name: "softmax" for name in generated.FORBIDDEN},
}


# Session scope: interleaved tests of other modules would otherwise make these runs start again.
@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("hostile")
    paths = {}
    for name in FOLDER_CASES:
        paths[name] = base / name
        shutil.copytree(HOSTILE / name, paths[name])
    children = paths["session_children"] / "attention.py"
    children.write_text(children.read_text().replace(CORPUS_MARK, MARK))
    for name in generated.FORBIDDEN:
        paths[name] = generated.make_forbidden(ROOT, base / name, name)
    paths["symlink_file"] = generated.make_symlink_file(ROOT, base / "symlink_file")
    paths["symlink_dir"] = generated.make_symlink_dir(ROOT, base / "symlink_dir")
    return paths


@pytest.fixture(scope="session")
def hostile_run(corpus) -> dict:
    """Every case but the endless loops, in one sandboxed grading run."""
    names = [n for n in corpus if n not in LOOPS]
    run = drive([corpus[n] for n in names], ["attention"], timeout=TIMEOUT)
    run["by_case"] = dict(zip(names, (r["units"]["attention"] for r in run["results"])))
    run["leftovers"] = leftovers(run)
    return run


@pytest.fixture(scope="session")
def loop_run(corpus) -> dict:
    run = drive([corpus[n] for n in LOOPS], ["attention"], timeout=TIMEOUT)
    run["by_case"] = dict(zip(LOOPS, (r["units"]["attention"] for r in run["results"])))
    run["leftovers"] = leftovers(run)
    return run


def test_corpus_is_complete(corpus):
    assert set(corpus) == set(EXPECT), set(corpus) ^ set(EXPECT)


@pytest.mark.parametrize("case", [n for n in EXPECT if n not in LOOPS])
def test_hostile_case_scores_zero(hostile_run, case):
    unit = hostile_run["by_case"][case]
    assert unit["score"] == 0, [(t["id"], t["output"]) for t in unit["tests"] if t["score"]]
    text = unit["message"] + " ".join(t["output"] for t in unit["tests"])
    assert EXPECT[case] in text, (EXPECT[case], unit["message"], text[:500])


@pytest.mark.parametrize("case", LOOPS)
def test_endless_loop_costs_at_most_one_timeout_per_test(loop_run, case):
    unit = loop_run["by_case"][case]
    assert unit["score"] == 0
    assert all("timed out" in t["output"] for t in unit["tests"] if t["status"] == "failed")


def test_endless_loops_finish_within_their_limits(loop_run):
    tests = len(loop_run["by_case"][LOOPS[0]]["tests"])
    # Each test waits once: the time limit, the kill grace (0.5 s here) and a restart.
    budget = len(LOOPS) * tests * (TIMEOUT + 0.5 + 0.5) + 60
    assert loop_run["seconds"] <= budget, (loop_run["seconds"], budget)


def test_forbidden_uses_name_the_function(hostile_run):
    for name, (_, how) in generated.FORBIDDEN.items():
        unit = hostile_run["by_case"][name]
        assert unit["status"] == "forbidden", (name, unit["status"], unit["message"])
        assert "torch.softmax" in unit["message"] or "softmax" in unit["message"], unit["message"]
        if how == "runtime":
            assert "seen at run time" in unit["message"], unit["message"]


def test_nothing_outlives_grading(hostile_run, loop_run):
    assert not hostile_run["leftovers"], hostile_run["leftovers"]
    assert not loop_run["leftovers"], loop_run["leftovers"]


def test_forged_files_are_ignored(hostile_run, corpus):
    assert hostile_run["by_case"]["forged_results"]["score"] == 0
    for place in (corpus["forged_results"], corpus["forged_results"].parent, ROOT, ROOT / "results"):
        assert not (place / "results.json").exists(), place


def test_attacks_work_without_the_sandbox(corpus):
    """The corpus is real: in-process, the disk, sys.modules and link attacks get points."""
    cases = ["read_solutions", "sys_modules", "symlink_file"]
    run = drive([COURSE.solutions, *[corpus[c] for c in cases]], ["attention"], sandbox=False)
    scores = {c: r["units"]["attention"]["score"] for c, r in zip(cases, run["results"][1:])}
    assert all(score > 0 for score in scores.values()), scores


# -- isolation, seen from inside ---------------------------------------------------------

PROBE = '''
import json, os, socket, sys
import torch

ROOT = {root!r}
CHECKS = {checks!r}


def softmax(x, dim=-1):
    facts = {{}}
    facts["not_root"] = os.getuid() != 0
    for rel in ("solutions/attention.py", "tests/hidden/test_attention_properties.py", "autograder/plugin.py",
                "course/course.toml"):
        try:
            open(os.path.join(ROOT, rel)).read(1)
            facts["hides " + rel] = False
        except OSError:
            facts["hides " + rel] = True
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=1).close()
        facts["no_network"] = False
    except OSError:
        facts["no_network"] = True
    facts["no_reference_module"] = not any(m.split(".")[0] in ("solutions", "tests", "oracles", "pytest", "hypothesis")
                                           for m in sys.modules)
    try:
        import solutions  # noqa: F401
        facts["cannot_import_solutions"] = False
    except ImportError:
        facts["cannot_import_solutions"] = True
    facts["clean_env"] = not any(k.startswith(("PYTHONPATH", "PYTHONSTARTUP", "PYTEST")) for k in os.environ)
    facts["isolated_flag"] = bool(sys.flags.isolated)
    facts["private_tmp"] = sum(n.startswith("attn-sandbox-") for n in os.listdir("/tmp")) <= 1
    facts["own_pid_namespace"] = os.getpid() < 10
    return torch.tensor([facts[c] for c in CHECKS])
'''
CHECKS = ["not_root", "hides solutions/attention.py", "hides tests/hidden/test_attention_properties.py",
          "hides autograder/plugin.py", "hides course/course.toml", "no_network", "no_reference_module",
          "cannot_import_solutions", "clean_env", "isolated_flag", "private_tmp", "own_pid_namespace"]
NEEDS_ROOT = {"not_root"}
NEEDS_NAMESPACES = {c for c in CHECKS if c.startswith("hides") or c in ("no_network", "private_tmp", "own_pid_namespace")}


def test_worker_sees_no_answers(tmp_path, monkeypatch):
    mode = isolation_mode()
    if mode == "plain":
        pytest.skip("no namespaces here: the sandbox is a separate process with limits only")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # must not reach the worker
    (tmp_path / "attention.py").write_text(PROBE.format(root=str(ROOT), checks=CHECKS), encoding="utf-8")
    with SandboxSubject(COURSE, tmp_path) as subject:
        assert subject.status("attention") is None
        facts = subject.run(Call("attention", "softmax", (torch.zeros(1),))).output.tolist()
    expected = [c for c in CHECKS if mode == "root" or c not in NEEDS_ROOT]
    failed = [c for c, ok in zip(CHECKS, facts) if not ok and c in expected]
    assert not failed, failed


def test_closing_leaves_nothing(tmp_path):
    (tmp_path / "attention.py").write_text(
        "import subprocess, torch\n"
        f"def softmax(x, dim=-1):\n    subprocess.Popen(['sleep', '{MARK}'], start_new_session=True)\n    return x\n",
        encoding="utf-8")
    subject = SandboxSubject(COURSE, tmp_path)
    subject.run(Call("attention", "softmax", (torch.zeros(2),)))
    uid, folder = subject.uid, subject._pool.priv
    subject.close()
    assert not leftovers({"uids": [] if uid is None else [uid], "folders": [str(folder)]})


def test_output_is_captured_and_capped(tmp_path):
    (tmp_path / "attention.py").write_text(
        "def softmax(x, dim=-1):\n    print('x' * 200_000)\n    return x\n", encoding="utf-8")
    with SandboxSubject(COURSE, tmp_path) as subject:
        subject.begin("t1")
        subject.run(Call("attention", "softmax", (torch.zeros(2),)))
        assert 0 < len(subject.captured["t1"]) <= 64 << 10


# -- the wire format ---------------------------------------------------------------------------

def _roundtrip(values: dict) -> dict:
    frame = transport.pack({"op": "x"}, values)
    reader = transport.FrameReader()
    reader.feed(frame)
    return transport.unpack(*reader.frame())[1]


def test_transport_roundtrip():
    values = {
        "tensors": [torch.randn(2, 3), torch.randn(3, dtype=torch.float64).t(), torch.ones(2, dtype=torch.bfloat16),
                    torch.tensor([True, False]), torch.arange(5), torch.zeros(0, 4), torch.tensor(2.5),
                    torch.randn(4, 4)[:, 1]],
        "meta": torch.empty(3, 2, device="meta", dtype=torch.float16),
        "plain": (1, 2.5, float("inf"), None, True, "s", torch.float64, torch.device("meta")),
        "dict": {"a": [1, (2,)], 3: None},
        "size": torch.Size([2, 0, 3]),
        "new": New("MultiHeadAttention", (8, 2), {"bias": False}, {"w": torch.ones(2)}),
    }
    back = _roundtrip(values)
    for got, want in zip(back["tensors"], values["tensors"]):
        assert type(got) is torch.Tensor and got.dtype == want.dtype and torch.equal(got, want)
    assert back["meta"].device.type == "meta" and back["meta"].shape == (3, 2) and back["meta"].dtype == torch.float16
    assert back["plain"] == values["plain"] and back["dict"] == values["dict"]
    assert type(back["size"]) is torch.Size and back["size"] == values["size"]
    assert back["new"].target == "MultiHeadAttention" and back["new"].kwargs == {"bias": False}
    assert torch.equal(back["new"].state["w"], torch.ones(2))
    call = Call("attention", "softmax", (torch.ones(2),), {"dim": 0}, grad_outputs=(torch.ones(2), None), dtype=torch.float64)
    again = transport.call_from(_roundtrip({"c": transport.call_values(call)})["c"])
    assert again.dtype == torch.float64 and again.kwargs == {"dim": 0} and again.grad_outputs[1] is None
    result = transport.result_from(_roundtrip(transport.result_values(Result(output=(torch.ones(1), None)))))
    assert isinstance(result, Result) and result.output[1] is None


@pytest.mark.parametrize("header", [
    {"values": {"x": {"$": "tensor", "dtype": "float32", "shape": [4], "at": [0, 16], "device": "cpu"}}},  # no data
    {"values": {"x": {"$": "tensor", "dtype": "float32", "shape": [2], "at": [0, 4], "device": "cpu"}}},  # wrong size
    {"values": {"x": {"$": "tensor", "dtype": "pickle", "shape": [1]}}},
    {"values": {"x": {"$": "object", "v": "os.system"}}},
    {"values": {"x": {"untagged": 1}}},
    {"values": {"x": {"$": "tensor", "dtype": "float32", "shape": [1], "at": [0, 4], "device": "cuda:0"}}},
])
def test_transport_rejects_malformed(header):
    with pytest.raises(transport.ProtocolError):
        transport.unpack(json.dumps(header).encode(), b"\0" * 8, devices=False)


def test_transport_refuses_tensor_subclasses():
    class Sub(torch.Tensor):
        pass

    with pytest.raises(TypeError):
        transport.pack({}, {"x": torch.zeros(1).as_subclass(Sub)})


def test_results_from_the_worker_are_checked():
    with pytest.raises(transport.ProtocolError):
        transport.result_from({"output": 1})
    error = transport.error_from({"kind": "ValueError", "message": "m" * 5000, "where": ""})
    assert isinstance(error, StudentError) and len(error.message) <= 2000


def test_cli_grades_sandboxed_by_default():
    from autograder.cli import _parser

    assert _parser().parse_args(["grade", "x"]).sandbox is True
    assert _parser().parse_args(["grade", "x", "--no-sandbox"]).sandbox is False
