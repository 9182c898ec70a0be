"""The zygote forked from the grader (issue 46: one torch in Gradescope's memory, not two).

On a hosted platform in container mode (Gradescope's Docker) the zygote is a child of the
grader (autograder/sandbox/forked.py), so a worker's memory starts as a copy of the grader's.
tests/hostile/inherited/attention.py looks there for what the grader knew (a secret of the
platform's environment, hidden tests' and solutions' objects, paths and open files) and answers
right only where it finds something. Graded by ``run_autograder`` under Docker's seccomp profile
(``modes.in_container``), with the course's allow-list off (hostile code that got past it):

* a secret in the platform's environment: 0 points (the script starts the grader with an
  environment of its choosing; the grader forks before it reads a hidden test or a solution);
* the same secret in a variable the script keeps (``AUTOGRADER_*``): points, so the environment
  channel works and the zygote was forked (a fresh zygote's environment is the pool's own);
* unsandboxed (student code in the grader itself): points, so the other channels work.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from modes import skip_reason
from test_delivery_platforms import _gradescope, _unzip_autograder

ATTACK = ROOT / "tests" / "hostile" / "inherited" / "attention.py"
SECRET = "attn-secret-4f1c9e"  # the attack's prefix, then a value it cannot guess


@pytest.fixture(scope="module")
def autograder_source(tmp_path_factory):
    """The exported Gradescope zip's source folder, with the course's [rules] table removed."""
    source = _unzip_autograder(tmp_path_factory.mktemp("gradescope")) / "source"
    manifest = source / "course" / "course.toml"
    text = manifest.read_text(encoding="utf-8")
    start = text.index("\n[rules]\n")
    manifest.write_text(text[:start] + text[text.index("\n[", start + 1):], encoding="utf-8")
    return source


def run_autograder(source, root, env: dict[str, str], *, sandbox: bool = True) -> tuple[dict, str]:
    """Grade the attack as Gradescope would, sandboxed in its container (root: a fresh fake
    /autograder), or unsandboxed; results.json and what the grader printed."""
    root.mkdir(parents=True)
    (root / "source").symlink_to(source)
    results, stdout, stderr = _gradescope(root, {"attention.py": ATTACK.read_text(encoding="utf-8")}, env=env,
                                          sandbox=sandbox, container=sandbox)
    return results, stdout + stderr


def attention_points(results: dict) -> float:
    return sum(t["score"] for t in results["tests"] if t["tags"] == ["attention"])


def test_what_the_grader_knew_is_out_of_reach_of_a_forked_worker(autograder_source, tmp_path):
    if why := skip_reason("container"):
        pytest.skip(why)
    results, log = run_autograder(autograder_source, tmp_path / "secret", {"PLATFORM_TOKEN": SECRET + "x"})
    assert "container mode" in results["output"], results["output"][:300]
    assert "fresh interpreter" not in log, log[-1000:]  # the zygote was forked, not started afresh
    assert attention_points(results) == 0, [(t["name"], t["score"]) for t in results["tests"] if t["score"]]


def test_the_attack_finds_what_it_is_given(autograder_source, tmp_path):
    """The attack's channels work where they are open: a variable the script keeps reaches the
    forked worker's environment block; unsandboxed, the grader's own objects are the student's."""
    if why := skip_reason("container"):
        pytest.skip(why)
    kept, _ = run_autograder(autograder_source, tmp_path / "kept", {"AUTOGRADER_LEAK_CHECK": SECRET + "x"})
    assert attention_points(kept) > 0, kept["output"][:300]
    unsandboxed, _ = run_autograder(autograder_source, tmp_path / "in_process", {}, sandbox=False)
    assert attention_points(unsandboxed) > 0, unsandboxed["output"][:300]


UNSAFE = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from autograder.sandbox.forked import unsafe_to_fork
    secret = Path(sys.argv[1])
    print(unsafe_to_fork([secret]))
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    print(unsafe_to_fork([secret]))
    stop.set(); thread.join()
    sys.path.insert(0, str(secret))
    import oracle_of_the_test
    print(unsafe_to_fork([secret]))
    del sys.modules["oracle_of_the_test"]
    import pytest
    print(unsafe_to_fork([secret]))
""")


def test_a_grader_forks_only_before_it_knows_anything(tmp_path):
    """Each thing that makes a grader's memory unfit to copy into the box is refused by name."""
    (tmp_path / "oracle_of_the_test.py").write_text("ANSWER = 42\n")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, "-c", UNSAFE, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["None", "the grader runs threads", "the grader has imported oracle_of_the_test",
                                        "the grader has imported pytest"], proc.stdout
    env.pop("PYTHONHASHSEED")
    proc = subprocess.run([sys.executable, "-c", UNSAFE, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.splitlines()[0] == "string hashes are randomized here (PYTHONHASHSEED is not 0)", proc.stdout
