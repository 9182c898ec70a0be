"""The trusted side of sandboxed grading: :class:`SandboxSubject`.

It has the interface of :class:`~autograder.subject.InProcessSubject` and
gives the same results on honest code, but the submission runs in a worker
process (see :mod:`autograder.worker`): a private copy of the submission, a
private copy of the grader's own code, no solutions, no tests, and, where
the platform allows, no view of the host's files, no network and a dedicated
unprivileged uid. Calls and results cross a pipe as JSON plus safetensors
(:mod:`autograder.transport`); everything that comes back is validated here
before a test sees it, and every way a worker can fail (hang, crash, exit,
run out of memory, flood its output, send garbage) becomes a
:class:`~autograder.subject.StudentError` for that call, after which a fresh
worker serves the next one.

One zygote process per grading run imports torch once and forks a worker per
submission in milliseconds, so sandboxing costs little more than the pipes.
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import time
from pathlib import Path

from . import transport
from .manifest import Course
from .subject import Call, Result, StudentError
from .zygote import (  # noqa: F401 - re-exported for callers and tests
    STARTUP, USED_FOLDERS, USED_UIDS, SandboxError, _Pool, _UidLease, _wait_readable, isolation_mode, kill_uid,
    processes_of,
)

CRASHES_PER_TEST = 2  # worker losses in one test before its further calls fail at once
KEEP_OUTPUT = 64 << 10  # bytes of a test's stdout/stderr kept
FLOOD = 4 << 20  # bytes a test may print before its worker is stopped
MAX_FILE, MAX_COPY = 16 << 20, 64 << 20  # what is copied from a submission
SKIPPED = {"__pycache__", ".git", ".ipynb_checkpoints", ".venv", "node_modules"}


# -- copying a submission -----------------------------------------------------------------

def copy_submission(folder: Path, box: Path, uid: int | None) -> list[str]:
    """Copy ``folder``'s files into ``box``; returns the paths refused (links that leave the folder)."""
    refused, total = [], 0
    box.mkdir(mode=0o700)
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(folder)
        dirnames[:] = [d for d in sorted(dirnames) if d not in SKIPPED and not (here / d).is_symlink()]
        for d in dirnames:
            (box / rel_dir / d).mkdir(mode=0o700)
        for name in sorted(filenames):
            source = here / name
            rel = rel_dir / name
            if source.is_symlink():
                target = Path(os.path.realpath(source))
                if not target.is_relative_to(folder):
                    refused.append(str(rel))
                    continue
                source = target
            try:
                if not source.is_file() or source.stat().st_size > MAX_FILE or total > MAX_COPY:
                    continue
                total += source.stat().st_size
                shutil.copyfile(source, box / rel)
            except OSError:
                continue
    if uid is not None:
        for path in [box, *box.rglob("*")]:
            os.lchown(path, uid, uid)
    return refused


def _describe_exit(status: int, cpu: int) -> str:
    if os.WIFEXITED(status):
        return f"the worker exited with status {os.WEXITSTATUS(status)}"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGKILL:
            return "the worker was killed (SIGKILL); it may have run out of memory"
        if sig == signal.SIGXCPU:
            return f"the worker used up its CPU-time limit ({cpu} s)"
        return f"the worker was killed by {signal.Signals(sig).name}"
    return f"the worker ended (wait status {status})"


class _Lost(Exception):
    """The worker is gone or unusable; ``reason`` says why, ``timed_out`` if by the clock."""

    def __init__(self, reason: str, *, timed_out: bool = False, flood: bool = False):
        super().__init__(reason)
        self.reason, self.timed_out, self.flood = reason, timed_out, flood


class SandboxSubject:
    """Serve a submission folder from a sandboxed worker process."""

    def __init__(self, course: Course, folder: Path, *, isolate: bool = True, timeout: float = 10.0):
        self.course, self.folder, self.isolate, self.timeout = course, Path(folder).resolve(), isolate, timeout
        self.cpu_limit = int(max(300, 30 * timeout))
        # The worker interrupts a call itself at ``timeout``; past this grace it is killed.
        self.grace = min(2.0, max(0.5, timeout / 4))
        self.captured: dict[str | None, bytes] = {}  # test id -> the first 64 KiB it printed (never graded)
        self.restarts = 0
        self.failure: str | None = None  # set when the sandbox itself broke (a grader failure)
        self._statuses: dict[str, str | None] = {}
        self._seen: dict[str, set[str]] = {name: set() for name in course.units}
        self._test: str | None = None
        self._printed = 0
        self._doomed: str | None = None  # why every further call in this test fails at once
        self._crashes = 0
        self._worker = None  # (id, req_w, rep_r, out_r)
        self._reader = transport.FrameReader()
        self._pool = _Pool.acquire(course)
        self._lease = _UidLease() if self._pool.mode == "root" else None
        self.uid = self._lease.uid if self._lease else None
        self._box = self._pool.priv / f"box-{id(self):x}"
        USED_FOLDERS.append(str(self._pool.priv))
        if self.uid is not None:
            USED_UIDS.append(self.uid)
        self._refused = copy_submission(self.folder, self._box, self.uid)
        self.closed = False

    # -- the interface ---------------------------------------------------------
    def begin(self, test_id: str) -> None:
        self._test, self._printed, self._doomed, self._crashes = test_id, 0, None, 0

    def status(self, unit: str) -> str | None:
        if unit not in self._statuses:
            spec = self.course.units[unit]
            if spec.file in self._refused:
                self._statuses[unit] = f"{spec.file} is a symbolic link to a file outside the submission; submit the file itself"
            else:
                try:
                    self._statuses[unit] = self._load(unit)
                except SandboxError as error:
                    self.failure = self.failure or str(error)
                    raise
        return self._statuses[unit]

    def runtime_uses(self, unit: str) -> set[str]:
        return set(self._seen[unit])

    def run(self, call: Call) -> Result:
        out = self.run_many([call])[0]
        if isinstance(out, StudentError):
            raise out
        return out

    def run_many(self, calls: list[Call]) -> list[Result | StudentError]:
        try:
            return self._run_many(calls)
        except SandboxError as error:
            self.failure = self.failure or str(error)
            raise

    def _run_many(self, calls: list[Call]) -> list[Result | StudentError]:
        out: list = [None] * len(calls)
        pending = []
        for i, call in enumerate(calls):
            problem = self.status(call.unit)
            if problem:
                out[i] = StudentError("Unavailable", problem)
            else:
                pending.append(i)
        while pending:
            if self._doomed:
                for i in pending:
                    out[i] = StudentError("Timeout" if "timed out" in self._doomed else "Crashed", f"{self._doomed} earlier in this test")
                break
            batch = [calls[i] for i in pending]
            done = self._exchange(batch, out, pending)
            pending = pending[done:]
        return out

    # -- the worker ----------------------------------------------------------------
    def _ensure_worker(self):
        try:
            return self._start_worker()
        except SandboxError as error:
            self.failure = self.failure or str(error)
            raise

    def _start_worker(self):
        if self.closed:
            raise SandboxError("this subject was closed")
        if self._worker is None:
            self._worker = self._pool.spawn(box=self._box, uid=self.uid, isolate=self.isolate,
                                            timeout=self.timeout, cpu=self.cpu_limit)
            self._reader = transport.FrameReader()
            try:
                header, _ = self._receive(STARTUP)
            except _Lost as lost:
                self._stop()
                raise SandboxError(f"a worker could not start: {lost.reason}: {self._pool._log_tail()}") from None
            if header.get("op") != "ready":
                self._stop()
                raise SandboxError("a worker did not start properly")
        return self._worker

    def _stop(self) -> None:
        """Kill the worker and every process it started."""
        if self._worker is None:
            return
        wid, req_w, rep_r, out_r = self._worker
        self._worker = None
        self._pool.kill(wid)
        if self.uid is not None:
            kill_uid(self.uid)
        for fd in (req_w, rep_r, out_r):
            try:
                os.close(fd)
            except OSError:
                pass

    def _send(self, header: dict, values: dict | None = None) -> None:
        wid, req_w, _, _ = self._ensure_worker()
        frame = transport.pack({**header, "test": self._test}, values)
        try:
            transport.write_all(req_w, frame)
        except OSError as error:
            if error.errno not in (errno.EPIPE, errno.EBADF):
                raise
            # Dead already; the read reports how it ended.

    def _drain_output(self, out_r: int) -> None:
        while True:
            try:
                data = os.read(out_r, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                return
            if not data:
                return
            kept = self.captured.get(self._test, b"")
            if len(kept) < KEEP_OUTPUT:
                self.captured[self._test] = kept + data[: KEEP_OUTPUT - len(kept)]
            self._printed += len(data)
            if self._printed > FLOOD:
                raise _Lost(f"the code printed more than {FLOOD >> 20} MiB to stdout/stderr (output is capped)", flood=True)

    def _receive(self, limit: float) -> tuple[dict, dict]:
        """The worker's next frame, within ``limit`` seconds."""
        wid, _, rep_r, out_r = self._worker
        deadline = time.monotonic() + limit
        eof_at = None
        while True:
            frame = self._reader.frame()
            if frame is not None:
                try:
                    return transport.unpack(*frame, devices=True)
                except transport.ProtocolError as error:
                    raise _Lost(f"the worker sent a malformed reply ({error})") from None
            if wid in self._pool.exits:
                self._read_available(rep_r)
                if self._reader.frame_ready():
                    continue
                raise _Lost(_describe_exit(self._pool.exits[wid], self.cpu_limit))
            now = time.monotonic()
            if now > deadline:
                raise _Lost(f"timed out after {self.timeout:g} s", timed_out=True)
            if eof_at is not None and now - eof_at > 3.0:
                raise _Lost("the worker closed its reply pipe")
            ready = _wait_readable([rep_r, out_r, self._pool.sock], min(deadline - now, 0.25 if eof_at else deadline - now))
            if out_r in ready:
                self._drain_output(out_r)
            if self._pool.sock in ready:
                self._pool.pump()
            if rep_r in ready and not self._read_available(rep_r) and eof_at is None:
                eof_at = time.monotonic()

    def _read_available(self, rep_r: int) -> bool:
        """Read what the reply pipe holds; False at end of file."""
        while True:
            try:
                data = os.read(rep_r, 1 << 20)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            try:
                self._reader.feed(data)
            except transport.ProtocolError:
                raise _Lost("the worker sent a malformed reply") from None

    def _note_seen(self, unit: str, header: dict) -> None:
        names = header.get("seen")
        if type(names) is list:
            allowed = set(self.course.units[unit].forbidden)
            self._seen[unit] |= {n for n in names if type(n) is str and n in allowed}

    def _load(self, unit: str) -> str | None:
        filename = self.course.units[unit].file
        try:
            self._send({"op": "status", "unit": unit})
            header, _ = self._receive(self.timeout + self.grace)
        except _Lost as lost:
            self._stop()
            self.restarts += 1
            if lost.timed_out:
                return f"importing {filename} timed out after {self.timeout:g} s"
            return f"importing {filename} stopped the worker: {lost.reason}"
        problem = header.get("problem")
        if header.get("op") != "status" or not (problem is None or type(problem) is str):
            self._stop()
            return f"importing {filename} made the worker send a malformed reply"
        self._note_seen(unit, header)
        return problem[:2000] if problem else None

    def _exchange(self, batch: list[Call], out: list, where: list[int]) -> int:
        """Run ``batch`` in one round trip; fills ``out`` and returns how many calls got an answer."""
        self._send({"op": "run"}, {"calls": [transport.call_values(c) for c in batch]})
        for n, call in enumerate(batch):
            try:
                header, values = self._receive(self.timeout + self.grace)
                if header.get("op") != "result":
                    raise _Lost("the worker sent a malformed reply")
                self._note_seen(call.unit, header)
                if header.get("ok") is True:
                    out[where[n]] = transport.result_from(values)
                else:
                    out[where[n]] = transport.error_from(header)
            except transport.ProtocolError as error:
                self._stop()
                self.restarts += 1
                self._crashes += 1
                if self._crashes >= CRASHES_PER_TEST:
                    self._doomed = "the worker sent a malformed reply"
                out[where[n]] = StudentError("BadOutput", f"the worker sent a malformed reply ({error})")
                return n + 1
            except _Lost as lost:
                self._stop()
                self.restarts += 1
                self._crashes += 1
                if lost.timed_out or lost.flood or self._crashes >= CRASHES_PER_TEST:
                    self._doomed = lost.reason
                kind = "Timeout" if lost.timed_out else "Crashed"
                reason = lost.reason if lost.timed_out or lost.flood else f"{lost.reason} during the call"
                out[where[n]] = StudentError(kind, reason)
                return n + 1
        return len(batch)

    # -- the end ----------------------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop()
        if self._lease:
            self._lease.release()
        shutil.rmtree(self._box, ignore_errors=True)
        self._pool.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
