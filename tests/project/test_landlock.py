"""Landlock for workers without namespaces: the rules' lists (sandbox/visible.py) and what a
restricted process can still open (sandbox/inside/landlock.py). The modes' end-to-end claims
are test_sandbox.py's (test_each_mode_grades_honest_code_in_full_and_attacks_at_zero)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from autograder.sandbox import visible
from autograder.sandbox.inside import landlock


def test_around_leaves_out_what_is_hidden_and_follows_links(tmp_path):
    for rel in ("a/site/torch/x.py", "a/site/solutions/attention.py", "a/keep/y.py", "b/z.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "c").symlink_to(tmp_path / "a")  # a second road to the hidden folder
    (tmp_path / "d").symlink_to(tmp_path / "b")
    found = visible.around([str(tmp_path)], [str(tmp_path / "a" / "site")])
    assert found == [str(tmp_path / "a" / "keep"), str(tmp_path / "b")]
    # A root inside a hidden folder is kept whole.
    assert visible.around([str(tmp_path / "a" / "keep")], [str(tmp_path / "a")]) == [str(tmp_path / "a" / "keep")]


def test_rules_read_only_the_named_packages_of_a_site(tmp_path):
    site = tmp_path / "site"
    for name in ("torch", "solutions"):
        (site / name).mkdir(parents=True)
    rules = visible.rules([], [str(site)], {str(site): ["torch"]}, str(tmp_path / "lib"), [])
    assert str(site / "torch") in rules["read"] and not any(p.startswith(str(site / "solutions")) for p in rules["read"])
    assert rules["list"] == [str(site)]


PROBE = textwrap.dedent("""
    import ctypes, json, os, socket, sys
    read, box, secret, port = sys.argv[1:5]
    ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # no-new-privileges
    from autograder.sandbox.inside import landlock
    version = landlock.restrict([read], [box], [])

    def attempt(action):
        try:
            action()
            return "allowed"
        except PermissionError:
            return "refused"

    found = {
        "read the allowed file": attempt(lambda: open(os.path.join(read, "given.txt")).read()),
        "read the secret": attempt(lambda: open(secret).read()),
        "write in the box": attempt(lambda: open(os.path.join(box, "new.txt"), "w").write("x")),
        "write beside the allowed file": attempt(lambda: open(os.path.join(read, "new.txt"), "w").write("x")),
    }
    if version >= 4:
        found["connect over TCP"] = attempt(lambda: socket.create_connection(("127.0.0.1", int(port)), timeout=5))
    print(json.dumps(found))
""")


@pytest.mark.skipif(not landlock.abi(), reason="this kernel has no Landlock (or a seccomp profile refuses it)")
def test_a_restricted_process_opens_only_what_it_was_given(tmp_path):
    read, box = tmp_path / "read", tmp_path / "box"
    read.mkdir()
    box.mkdir()
    (read / "given.txt").write_text("ok")
    secret = tmp_path / "secret.txt"
    secret.write_text("the answers")
    server = socket.create_server(("127.0.0.1", 0))
    try:
        proc = subprocess.run([sys.executable, "-c", PROBE, str(read), str(box), str(secret), str(server.getsockname()[1])],
                              cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    expected = {"read the allowed file": "allowed", "read the secret": "refused", "write in the box": "allowed",
                "write beside the allowed file": "refused"}
    if landlock.abi() >= 4:
        expected["connect over TCP"] = "refused"
    assert found == expected
