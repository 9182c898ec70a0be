"""The zygote forked from this grading process, for a hosted platform in a mode without namespaces.

Gradescope's memory limit counts the whole process tree, and a zygote started as a fresh
interpreter imports torch a second time: six units peaked at 568 MiB in container mode so, and
at 408 with the zygote forked (``benchmarks/bench_gradescope_memory.py``). In container and plain modes the zygote
is no bwrap program, so nothing needs the fresh interpreter: :func:`fork_zygote` imports what
the zygote would (:func:`autograder.sandbox.inside.zygote.preload`) and forks it from here, and
the child undoes the grader (:mod:`autograder.sandbox.inside.from_grader`).

Decision: only a process that has read nothing a student may not see forks its zygote, since
the child's memory is a copy of this one's: :func:`unsafe_to_fork` refuses one that has
imported a hidden test, a solution or the grader's heavy imports, or runs threads (a fork keeps
only the calling thread). A hosted platform grading one upload is such a process when its
session starts (:class:`~autograder.grading.session.GradingSession` ``fork_zygote``), and its
script starts it with an environment it chose (the child's copy of the environment block is
the grader's). Everywhere else (the CLI, the batch, nbgrader, full mode) the zygote stays a
fresh interpreter.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

GRADER_IMPORTS = ("pytest", "hypothesis", "_pytest")  # the grader imports them after its zygote starts


class ForkedZygote:
    """The forked zygote, as the pool asks about a started one (a ``subprocess.Popen``'s few calls)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: ended all the same
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout or 0)
            time.sleep(0.01)
        return code


def unsafe_to_fork(secret_folders: list[Path]) -> str | None:
    """Why this process may not fork its zygote (None: it may)."""
    if threading.active_count() > 1:
        return "the grader runs threads"
    if sys.flags.hash_randomization:  # a fresh zygote's are fixed (PYTHONHASHSEED=0), so a grade repeats
        return "string hashes are randomized here (PYTHONHASHSEED is not 0)"
    if loaded := [name for name in GRADER_IMPORTS if name in sys.modules]:
        return f"the grader has imported {loaded[0]}"
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and any(Path(path).resolve().is_relative_to(folder) for folder in secret_folders):
            return f"the grader has imported {name}"
    return None


def fork_zygote(config: dict, sock_fd: int, log_fd: int) -> ForkedZygote:
    """Fork the zygote from this process; the child serves on ``sock_fd``, logs to ``log_fd``."""
    from autograder.sandbox.inside import from_grader, zygote

    zygote.preload()
    # Frozen here, the objects the zygote and its workers share are never visited by this
    # process's collections: a visit writes their headers, and each page written is copied.
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    grader = os.getpid()
    pid = os.fork()
    if not pid:
        from_grader.become_zygote(config, sock_fd, log_fd, grader)
    return ForkedZygote(pid)
