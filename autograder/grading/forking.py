"""A grading process forked from this one, which imported torch, pytest and hypothesis once.

A fresh interpreter pays those imports again (1.2 CPU-s), on cores that the sandbox
zygote's start-up and the other grading processes also want. So ``grade --jobs N``
(:mod:`.parallel`) forks its groups' processes, and a class batch
(:mod:`autograder.delivery.batch`) its jobs' grader processes (:mod:`.serve`).

Decision: fork, not a fresh interpreter, since the project grades on Linux only
(bubblewrap, cgroups). The callers fork before they start any thread: the only other
thread is torch's idle one (counted from ``/proc/self/task``), as in the zygote that
forks every worker.
"""
from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import traceback
from typing import Callable

from autograder.core.heavy_imports import collection_paused


def import_grader():
    """``grade``: torch, pytest and hypothesis imported with collection paused, so that they
    are never scanned again, here or in what forks from here afterwards."""
    with collection_paused():
        from autograder.grading.grade import grade
    return grade


def fork(run: Callable[[], int], streams: tuple[int, int, int], *, pool=None, close=(), session=False) -> int:
    """Fork a process that runs ``run()`` and exits with the code it returns (1, with the
    traceback on its stderr, when it raises); return its pid.

    ``streams``: the descriptors it takes as its stdin, stdout and stderr (closed here, forked
    or not). ``pool``: a sandbox :class:`~autograder.sandbox.pool.Pool` whose zygote it
    spawns its workers from, through a connection of its own. ``close``: files of this
    process that it must not hold (another process's pipe ends: its end of input would never
    come). ``session``: a session of its own, so a Ctrl-C meant for this process skips it.
    """
    conn, attach, pid = None, {}, -1
    try:
        if pool is not None:
            conn, attach = pool.attach()
        sys.stdout.flush()
        sys.stderr.flush()  # (else it would print what is buffered here a second time)
        pid = os.fork()
    finally:
        if pid:  # this process's copies go, whether it forked or failed to
            for fd in streams:
                os.close(fd)
            if conn is not None:
                conn.close()
    if pid:
        return pid
    code = 1
    try:
        if session:
            os.setsid()
        # A fresh interpreter's dispositions, not whatever this process set for itself.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if conn is not None:
            conn.detach()  # its descriptor is the attached pool's below, not this object's to close
        # Above 2 first, so that no dup2 below overwrites a descriptor still to be taken.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 3) for fd in streams]
        for fd in set(streams) - {0, 1, 2}:
            os.close(fd)
        for target, fd in enumerate(high):
            os.dup2(fd, target)
            os.close(fd)
        for file in close:
            file.close()
        # The streams too: whoever set them (a test's capture, say) set them in the parent.
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
        if pool is not None:
            type(pool).after_fork(attach)
        code = run()
    except BaseException:  # noqa: BLE001 - whoever reads its stderr reports it
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


class Forked:
    """A forked process, with what a caller of ``subprocess.Popen`` uses of one: its pid, its
    ``stdin`` and ``stdout`` (this process's ends of its pipes) and :meth:`wait`."""

    def __init__(self, pid: int, stdin, stdout):
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code (as ``Popen.wait``: -N when signal N ended it), once it has ended."""
        if self.returncode is None:
            if timeout is not None:
                ended = os.pidfd_open(self.pid)
                try:
                    if not select.select([ended], [], [], timeout)[0]:
                        raise subprocess.TimeoutExpired(f"process {self.pid}", timeout)
                finally:
                    os.close(ended)
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode
