"""The grading processes a class batch keeps: each one a grader (:mod:`autograder.grading.serve`)
that grades chunk after chunk, its workers spawned from the batch's one zygote.

What may fail in starting one is :data:`START_ERRORS`, so a caller needs nothing of the sandbox's.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.core.manifest import Course
from autograder.grading import forking, serve
from autograder.grading import serve_channel as channel
from autograder.sandbox.pool import Pool
from autograder.sandbox.resources import SandboxError

# What starting a grading process (or the zygote it needs) may raise.
START_ERRORS = (OSError, SandboxError)


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[-limit:]


class GraderProcess:
    """One grader process (:mod:`autograder.grading.serve`) that grades its batch thread's chunks
    one after another, so its start-up (its imports, more CPU than a student's grade) is paid
    once per thread, not once per chunk. It spawns its workers from the batch's zygote.

    :meth:`forked` ones inherit this process's imports; a replacement is :meth:`started` as a
    fresh interpreter, since the batch's threads are running by then (no fork among threads).
    Either runs in a session of its own: a Ctrl-C meant for the batch reaches the batch, which
    stops it."""

    def __init__(self, proc, log):
        self.proc, self.log = proc, log  # log: a file, not a pipe: nothing to fill while we wait
        self._buffer = b""

    @classmethod
    def started(cls, course: Course, units: list[str] | None, zygote: Pool) -> "GraderProcess":
        log = tempfile.TemporaryFile()
        proc = zygote.popen_attached(
            [sys.executable, "-m", "autograder.grading.serve", *(units or [])],
            {**os.environ, "AUTOGRADER_COURSE_ROOT": str(course.root), "AUTOGRADER_SERVE_PARENT": str(os.getpid())},
            cwd=course.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        return cls(proc, log)

    @classmethod
    def forked(cls, course: Course, units: list[str] | None, zygote: Pool,
               others: list["GraderProcess"]) -> "GraderProcess":
        """``others``: the grader processes forked before, whose pipes the new one must not hold."""
        log = tempfile.TemporaryFile()
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        stdin, stdout = os.fdopen(request_w, "wb"), os.fdopen(reply_r, "rb", buffering=0)
        batch = os.getpid()
        try:
            pid = forking.fork(lambda: serve.main(units or [], course, parent=batch),
                               (request_r, reply_w, os.dup(log.fileno())), pool=zygote, session=True,
                               close=[stdin, stdout, *(f for o in others for f in (o.proc.stdin, o.proc.stdout))])
        except BaseException:
            for file in (stdin, stdout, log):
                file.close()
            raise
        return cls(forking.Forked(pid, stdin, stdout), log)

    def grade(self, paths: list[Path], report: Path, seconds: float) -> str | None:
        """None once ``report`` holds the results; else why not (the process is then useless)."""
        request = channel.encode(channel.GradeRequest(tuple(paths), report))
        try:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
        except OSError:
            return self._ended()
        deadline = time.monotonic() + seconds
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return f"grader failure (time budget exhausted): grading took longer than its budget ({seconds:g} s)"
            data = os.read(self.proc.stdout.fileno(), 1 << 16)  # (never through the buffered object)
            if not data:
                return self._ended()
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply = channel.decode_reply(line)
        return None if isinstance(reply, channel.Graded) else f"grader failure: {one_line(reply.error)}"

    def _ended(self) -> str:
        code = self.proc.wait()
        self.log.seek(0)
        return f"grader failure (exit {code}): {one_line(self.log.read().decode('utf-8', 'replace'))}"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the process and whatever it left in its session
        except OSError:
            pass
        if self.proc.returncode is None:  # (a forked one may not have made its session yet)
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        """End of input: the process stops its zygote and exits; killed if it takes long."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
