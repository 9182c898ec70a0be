"""The sandbox's three isolation modes, made on one machine for the tests that must hold in each.

``full`` is what this machine gives (bwrap with namespaces, as root); ``container`` is a process
under Docker's default seccomp profile (:data:`NO_NAMESPACES`: no namespace can be made, so the
probe of bwrap fails and root gives each worker a uid of its own); ``plain`` is container with the
mode forced, as where the grader is not root. The filter and the forced mode are a prelude run
before the code under test, in a fresh interpreter: what that interpreter starts inherits them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from autograder.sandbox.isolation import isolation_mode

MODES = ("full", "container", "plain")

# Docker's default seccomp profile, as far as the sandbox can tell: unshare and setns fail, clone
# fails with any namespace flag, clone3 is "not implemented" (so libc falls back to clone).
NO_NAMESPACES = textwrap.dedent("""
    import ctypes, struct
    def _no_namespaces():
        LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
        ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
        NEW_NAMESPACES = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
        program = [
            (LD, 0, 0, 4), (JEQ, 0, 7, 0xC000003E),  # not x86_64: allow
            (LD, 0, 0, 0), (JEQ, 6, 0, 272), (JEQ, 5, 0, 308), (JEQ, 5, 0, 435), (JEQ, 0, 2, 56),  # unshare setns clone3 clone
            (LD, 0, 0, 16), (JSET, 1, 0, NEW_NAMESPACES),
            (RET, 0, 0, ALLOW), (RET, 0, 0, EPERM), (RET, 0, 0, ENOSYS),
        ]
        code = b"".join(struct.pack("HBBI", *op) for op in program)
        buffer = ctypes.create_string_buffer(code)
        fprog = struct.pack("HxxxxxxQ", len(program), ctypes.addressof(buffer))
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
        assert libc.prctl(22, 2, ctypes.create_string_buffer(fprog), 0, 0) == 0, ctypes.get_errno()  # SECCOMP_MODE_FILTER
    _no_namespaces()
""")
FORCE_PLAIN = "from autograder.sandbox import isolation as _isolation\n_isolation._MODE = 'plain'\n"
RUN_CLI = textwrap.dedent("""
    import runpy, sys
    sys.argv = ["attn-course", *sys.argv[1:]]
    runpy.run_module("autograder.cli", run_name="__main__", alter_sys=True)
""")


def in_container(argv: list[str]) -> list[str]:
    """``argv`` as a command that runs it under :data:`NO_NAMESPACES` (a filter survives exec),
    as Gradescope's Docker runs its scripts."""
    return [sys.executable, "-c", NO_NAMESPACES + "import os, sys; os.execvp(sys.argv[1], sys.argv[1:])", *argv]


def skip_reason(mode: str) -> str | None:
    """Why ``mode`` cannot be made here (None: it can)."""
    if mode == "full" and isolation_mode() != "full":
        return f"full mode is not available here ({isolation_mode()} mode: no namespaces)"
    if mode == "container" and os.geteuid() != 0:
        return "container mode needs root (a worker uid to switch to)"
    return None


def prelude(mode: str) -> str:
    """Code that makes ``mode`` for what runs after it in the same interpreter."""
    return {"full": "", "container": NO_NAMESPACES, "plain": NO_NAMESPACES + FORCE_PLAIN}[mode]


def params(group: str) -> list:
    """The modes as pytest params, each run in an xdist group of its own (one worker makes it)."""
    return [pytest.param(m, marks=pytest.mark.xdist_group(f"{group}-{m}"), id=m) for m in MODES]


def require(mode: str) -> None:
    if why := skip_reason(mode):
        pytest.skip(why)


def run_python(mode: str, code: str, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter in ``mode``, in the project's folder, with ``args``."""
    return subprocess.run([sys.executable, "-c", prelude(mode) + code, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def attn_course(mode: str, *args: str, check: bool = True, timeout: float = 1200) -> subprocess.CompletedProcess:
    """``attn-course ARGS`` as a user runs it, in ``mode``; with ``check``, it exits 0 and its
    warning (none in full mode: every entry point prints the mode's) shows the mode asked for."""
    proc = run_python(mode, RUN_CLI, *args, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"attn-course {' '.join(args)} ({mode} mode) exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        warned = [m for m in MODES if f"WARNING: {m} mode" in proc.stderr]
        assert warned == ([] if mode == "full" else [mode]), (mode, proc.stderr[-2000:])
    return proc
