"""The trusted side of sandboxed grading: :class:`SandboxSubject`.

It has the interface of :class:`~autograder.trust.subject.InProcessSubject` and
gives the same results on honest code, but the submission runs in worker
processes (see :mod:`autograder.sandbox.inside.worker` for what each mode hides), one per
unit: a worker sees the stand-ins of its unit's dependencies only, never its
own unit's. Calls and results cross a pipe as JSON plus raw tensor bytes
(:mod:`autograder.sandbox.inside.transport`); everything that comes back is validated and
redacted here before a test sees it, and every way a worker can fail (hang,
crash, exit, run out of memory, flood its output, stop reading, send
garbage) becomes a :class:`~autograder.trust.subject.StudentError` for that call,
after which a fresh worker serves the next one.

Time is bounded per call (``timeout``, 10 s by default), per test
(``test_budget``), per unit of a submission (``unit_budget``) and by
a unit's calls that hit the call limit: past a budget, or after
``timeouts_per_unit`` (two) such calls in one unit,
that test's or unit's remaining calls fail at once with "time budget
exhausted" ("... an endless loop?", naming the first call that timed out, in
the second case). Requests reach a worker within ``write_limit`` seconds
or it is stopped. Every limit here is the course's (``course.limits``,
:mod:`autograder.core.settings`: course.toml ``[limits]`` over the defaults).

The two-time-outs rule is what makes an endless loop, the commonest student
bug, cheap: it costs a unit two call limits, each with the kill grace when the
loop swallows the interruption (2 x 12 s by default), where it used to cost one
per test until the unit's budget ran out (over 300 s). One time-out is not
enough to stop a unit: a single call can be slow on a loaded machine or on one
large input. The rule is :class:`~autograder.trust.subject.Timeouts`, shared
with the in-process subject so both modes fail the same calls; here the host
keeps the count (a worker killed over its limit forgets its own), and a call
counts when it failed with a time-out after at least ``timeout`` seconds (an
instant "earlier in this test" does not). Slow code that never hits the call
limit is bounded by the budgets alone, 60 s per unit: the honest units use at
most 2.7 s of it (solutions/ and tests/alternatives/: 1.2 to 1.5 s to start the
worker and import the unit, at most 1.1 s in calls), and a correct unit 2 made
30 ms slower in each of its 684 softmax calls (25 s to grade, 10 times the
reference) keeps full marks (tests/project/test_budgets.py).

One zygote process per grading run imports torch once and forks each worker
in milliseconds (about 30 ms to start one, 12 ms to stop it here), so
sandboxing costs little more than the pipes. It keeps one worker alive at a
time: every process of a submission is gone before the next one is graded.
While a worker lives, it and the thread that talks to it share one CPU
(:class:`~autograder.sandbox.resources.CpuLease`): they take turns, and handing
each call across CPUs cost more than the call itself.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import select
import time
from pathlib import Path
from typing import cast

from autograder.core import redact
from autograder.trust.forbidden import ERASED_NAME, HANDED, STAND_INS
from autograder.core.i18n import N_
from autograder.core.manifest import Course
from autograder.core.protocol import Call, Failure, Result, StudentError
from autograder.trust import loader
from autograder.trust.subject import Timeouts
from autograder.trust.uploads import walk
from autograder.sandbox import ipc
from autograder.sandbox.inside import transport
from autograder.sandbox.inside.limits import rlimits
from autograder.sandbox.contents import INSIDE
from autograder.sandbox.inside import worker_channel as channel
from autograder.sandbox.resources import (
    USED_FOLDERS, USED_UIDS, Cgroups, CpuLease, SandboxError, UidLease, cgroup_name, describe_exit, kill_uid,
)
from autograder.sandbox.pool import Pool, wait_readable
from autograder.sandbox.submission_copy import copy_submission

class _Lost(Exception):
    """The worker is gone or unusable; ``reason`` says why, ``timed_out`` if by the clock."""

    def __init__(self, reason: str, *, timed_out: bool = False, flood: bool = False):
        super().__init__(reason)
        self.reason, self.timed_out, self.flood = reason, timed_out, flood


class SandboxSubject:
    """Serve a submission folder from sandboxed worker processes, one per unit."""

    def __init__(self, course: Course, folder: Path, *, isolate: bool = True, timeout: float | None = None):
        self.limits = limits = course.limits
        timeout = limits.call_timeout if timeout is None else timeout
        self.course, self.folder, self.isolate, self.timeout = course, Path(folder).resolve(), isolate, timeout
        # Time budgets, beyond the per-call timeout: what one test, and one unit of one submission, may
        # take (its calls and its import; an honest unit takes at most 2.7 s of the default 60).
        self.test_budget, self.unit_budget = limits.test_budget, limits.unit_budget
        self.memory = limits.worker_memory
        self.cpu_limit = int(max(300, 30 * timeout))
        # The worker interrupts a call itself at ``timeout``; past this grace it is killed.
        self.grace = min(2.0, max(0.5, timeout / 4))
        self.captured: dict[str | None, bytes] = {}  # test id -> the first 64 KiB it printed (never graded)
        self.failure: str | None = None  # set when the sandbox itself broke (a grader failure)
        self._statuses: dict[str, str | None] = {}
        self._seen: dict[str, set[str]] = {name: set() for name in course.units}
        self._test: str | None = None
        self._printed = 0
        self._doomed: tuple[Failure, str] | None = None  # why every further call in this test fails at once
        self._crashes = 0
        self._used_test = 0.0
        self._used_unit: dict[str, float] = {name: 0.0 for name in course.units}
        self._timeouts = Timeouts(timeout, limits.timeouts_per_unit)
        self._worker: tuple[int, int, int, int] | None = None  # (id, req_w, rep_r, out_r)
        self._worker_unit: str | None = None
        self._cgroups: Cgroups | None = None
        self._cpu: CpuLease | None = None  # held while a worker lives
        self._unit_dir: Path | None = None
        self._reader = transport.FrameReader()
        self._redactor = redact.for_course(course)  # no stand-in text reaches a report
        self._pool = Pool.acquire(course)
        self.mode = self._pool.mode
        self.warning = self._pool.warning  # what a report should say when the mode hides less
        self._lease = UidLease() if os.geteuid() == 0 and self.mode != "plain" else None
        self.uid = self._lease.uid if self._lease else None
        # Named by process too: the grading processes of one `grade --jobs N` share the folder.
        self._box = self._pool.priv / "subs" / f"box-{os.getpid()}-{id(self):x}"
        USED_FOLDERS.append(str(self._pool.priv))
        if self.uid is not None:
            USED_UIDS.append(self.uid)
        # In full mode the worker copies its box into a tmpfs of its own, and chowns that.
        owner = None if self.mode == "full" else self.uid
        self._refused, self._problem = copy_submission(self.folder, self._box, owner, limits)
        self.closed = False

    # -- the interface ---------------------------------------------------------
    def begin(self, test_id: str) -> None:
        self._test, self._printed, self._doomed, self._crashes, self._used_test = test_id, 0, None, 0, 0.0

    def status(self, unit: str) -> str | None:
        if unit not in self._statuses:
            spec = self.course.units[unit]
            if self._problem:
                self._statuses[unit] = self._problem
            elif spec.file in self._refused:
                self._statuses[unit] = N_("{file} is a symbolic link to a file outside the submission; submit the file "
                                          "itself").format(file=spec.file)
            elif missing := loader.absent(spec, self._box):  # the worker would find the same box without it
                self._statuses[unit] = missing
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
        try:
            out = self._run(call)
        except SandboxError as error:
            self.failure = self.failure or str(error)
            raise
        if isinstance(out, StudentError):
            raise out
        return out

    def _run(self, call: Call) -> Result | StudentError:
        problem = self.status(call.unit)
        if problem:
            return StudentError(Failure.UNAVAILABLE, problem)
        exhausted = self._exhausted(call.unit)
        if exhausted:
            return StudentError(Failure.TIMEOUT, exhausted)
        if self._doomed:
            kind, reason = self._doomed
            return StudentError(kind, N_("{problem} earlier in this test").format(problem=reason))
        started = time.monotonic()
        try:
            out = self._exchange(call)
        finally:
            elapsed = time.monotonic() - started
            self._spend(call.unit, elapsed)
        # Interrupted by the worker or killed past the grace: either way the call used up its limit.
        if isinstance(out, StudentError) and out.kind == Failure.TIMEOUT and elapsed >= self.timeout:
            self._timeouts.record(call, out.where)
        return out

    # -- budgets -------------------------------------------------------------------
    def _left(self, unit: str) -> float:
        return min(self.test_budget - self._used_test, self.unit_budget - self._used_unit[unit])

    def _exhausted(self, unit: str) -> str | None:
        if endless := self._timeouts.exhausted(unit):
            return endless
        if self._used_unit[unit] >= self.unit_budget:
            return N_("time budget exhausted: {seconds:g} s for this unit").format(seconds=self.unit_budget)
        if self._used_test >= self.test_budget:
            return N_("time budget exhausted: {seconds:g} s for this test").format(seconds=self.test_budget)
        return None

    def _spend(self, unit: str, seconds: float) -> None:
        self._used_test += seconds
        self._used_unit[unit] += seconds

    def _wait_limit(self, unit: str, elapsed: float = 0.0) -> tuple[float, str | None]:
        """How long to wait for the next reply (``elapsed`` s into this round trip), and the
        reason to give if the budget, not the call, runs out."""
        per_call, left = self.timeout + self.grace, self._left(unit) - elapsed
        if left < per_call:
            unit_first = self.unit_budget - self._used_unit[unit] - elapsed <= left
            return max(0.0, left), (N_("time budget exhausted: {seconds:g} s for this unit").format(seconds=self.unit_budget)
                                    if unit_first else
                                    N_("time budget exhausted: {seconds:g} s for this test").format(seconds=self.test_budget))
        return per_call, None

    # -- the worker ----------------------------------------------------------------
    def _ensure_worker(self, unit: str):
        try:
            if self._worker is not None and self._worker_unit != unit:
                self.stop_worker()  # a worker sees its own unit's stand-ins only
            return self._start_worker(unit)
        except SandboxError as error:
            self.failure = self.failure or str(error)
            raise

    def _unit_folder(self, unit: str) -> Path:
        """A folder with the stand-ins ``unit`` depends on (never its own), for one worker."""
        folder = self._pool.priv / "units" / f"w-{os.getpid()}-{id(self):x}-{unit}"
        # Full mode: only this worker's mount namespace shows it. Otherwise: only its uid may enter.
        folder.mkdir(mode=0o755 if self.mode == "full" else 0o700)
        for rel in self.course.units[unit].files():
            source = (self.course.root / rel).resolve()
            if ".." in Path(rel).parts or not source.is_relative_to(self.course.root) or not source.is_file():
                raise SandboxError(f"stand-in {rel} is not a file inside the course")
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, folder / rel)
        if self.uid is not None and self.mode != "full":
            for path, _ in [(folder, None), *walk(folder, self.limits)]:
                os.lchown(path, self.uid, self.uid)
        return folder

    def _start_worker(self, unit: str):
        if self.closed:
            raise SandboxError("this subject was closed")
        if self._worker is None:
            pool = self._pool
            self._unit_dir = self._unit_folder(unit)
            self._cgroups = Cgroups(cgroup_name(f"{id(self):x}-{unit}"), memory=self.memory)
            self._cpu = CpuLease()
            cgroup_fds = self._cgroups.join_fds()
            box = pool.inside(self._box)
            limits = rlimits(self.cpu_limit, self.uid is not None, self.limits)
            # Without namespaces, what the worker's uid leaves in the host's IPC namespace and /dev/shm is
            # removed once it has ended (sandbox/ipc.py): all of a leased uid's, else only what is new.
            self._ipc = None
            if pool.mode != "full":
                uid = os.geteuid() if self.uid is None else self.uid
                self._ipc = (uid, ipc.snapshot(uid) if self.uid is None else frozenset())
                if not ipc.queues_visible():
                    limits["RLIMIT_MSGQUEUE"] = 0  # queues that could not be listed, to remove: none at all
            spawn = {"unit": unit, "box": str(INSIDE / "box") if pool.mode == "full" else box, "source": box,
                     "unit_dir": pool.inside(self._unit_dir), "uid": self.uid, "isolate": self.isolate,
                     "timeout": self.timeout, "limits": limits,
                     "cpu": self._cpu.cpu,
                     # This subject's course's (one zygote serves every course object of a root).
                     "rules": dataclasses.asdict(self.course.rules) if self.course.rules else None}
            try:
                self._worker = pool.spawn(self, spawn, cgroup_fds)
            finally:
                for fd in cgroup_fds:
                    os.close(fd)
            self._worker_unit = unit
            self._reader = transport.FrameReader()
            try:
                header, _ = self._receive(self.limits.sandbox_startup)
            except _Lost as lost:
                self.stop_worker()
                said = self.captured.get(self._test, b"")[-1000:].decode("utf-8", "replace")
                raise SandboxError(f"a worker could not start: {lost.reason}: {said or pool._log_tail()}") from None
            if channel.decode_ready(header) is None:
                self.stop_worker()
                raise SandboxError("a worker did not start properly")
        return self._worker

    def stop_worker(self) -> None:
        """Kill the worker and every process it started; remove its cgroups and stand-ins."""
        if self._cpu is not None:  # (also when the worker never started)
            self._cpu.release()
            self._cpu = None
        if self._worker is None:
            return
        wid, req_w, rep_r, out_r = self._worker
        self._worker = self._worker_unit = None
        if self._cgroups is not None:
            self._cgroups.kill()  # the worker's processes end alongside the zygote's kill, not after it
        self._pool.kill(wid)
        if self._cgroups is not None:
            self._cgroups.remove()
            self._cgroups = None
        if self.uid is not None:
            kill_uid(self.uid)
        if self._ipc is not None:  # once its processes are killed (above), what they made goes
            ipc.remove(*self._ipc)
        for fd in (req_w, rep_r, out_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._unit_dir is not None:
            shutil.rmtree(self._unit_dir, ignore_errors=True)
            self._unit_dir = None
        if self._pool.holder is self:
            self._pool.holder = None

    _stop = stop_worker

    def _send(self, unit: str, op: channel.Op, values: dict | None = None) -> None:
        """Send a request within ``write_limit`` s (draining the worker's output meanwhile)."""
        wid, req_w, rep_r, out_r = self._ensure_worker(unit)
        view = memoryview(transport.pack(channel.Request(op, self._test, unit).header(), values))
        deadline = time.monotonic() + self.limits.write_limit
        while view:
            try:
                view = view[os.write(req_w, view):]
                continue
            except BlockingIOError:
                pass
            except OSError as error:
                if error.errno not in (errno.EPIPE, errno.EBADF):
                    raise
                return  # dead already; the read reports how it ended
            if time.monotonic() > deadline:
                raise _Lost(N_("the worker stopped reading its requests (none arrived within {seconds:g} s)").format(
                    seconds=self.limits.write_limit))
            try:
                writable = select.select([rep_r, out_r], [req_w], [], min(0.25, deadline - time.monotonic()))
            except (InterruptedError, ValueError):
                continue
            if out_r in writable[0]:
                self._drain_output(out_r)
            if rep_r in writable[0]:
                self._read_available(rep_r)

    def _drain_output(self, out_r: int) -> None:
        while True:
            try:
                data = os.read(out_r, transport.READ_SIZE)
            except BlockingIOError:
                return
            except OSError:
                return
            if not data:
                return
            kept = self.captured.get(self._test, b"")
            if len(kept) < self.limits.kept_output:
                self.captured[self._test] = kept + data[: self.limits.kept_output - len(kept)]
            self._printed += len(data)
            if self._printed > self.limits.flood:
                raise _Lost(N_("the code printed more than {mib} MiB to stdout/stderr (output is capped)").format(
                    mib=self.limits.flood >> 20), flood=True)

    def _receive(self, limit: float, budget: str | None = None) -> tuple[dict, dict]:
        """The worker's next frame, within ``limit`` seconds (``budget``: the reason when that is a budget's end)."""
        wid, _, rep_r, out_r = cast("tuple[int, int, int, int]", self._worker)  # (called with a worker alive)
        deadline = time.monotonic() + limit
        eof_at = None
        while True:
            frame = self._reader.frame()
            if frame is not None:
                try:
                    return transport.unpack(*frame, devices=True)
                except transport.ProtocolError as error:
                    raise _Lost(N_("the worker sent a malformed reply ({problem})").format(problem=error)) from None
            if wid in self._pool.exits:
                self._read_available(rep_r)
                if self._reader.frame_ready():
                    continue
                if self._cgroups is not None and self._cgroups.out_of_memory():
                    raise _Lost(N_("the worker ran out of memory (its limit is {gib:g} GiB)").format(gib=self.memory / 2**30))
                raise _Lost(describe_exit(self._pool.exits[wid], self.cpu_limit))
            now = time.monotonic()
            if now > deadline:
                raise _Lost(budget or N_("timed out after {seconds:g} s").format(seconds=self.timeout), timed_out=True)
            if eof_at is not None and now - eof_at > 3.0:
                raise _Lost(N_("the worker closed its reply pipe"))
            ready = wait_readable([rep_r, out_r, self._pool.sock], min(deadline - now, 0.25 if eof_at else deadline - now))
            if out_r in ready:
                self._drain_output(out_r)
            if self._pool.sock in ready:
                self._pool.pump()
            if rep_r in ready and not self._read_available(rep_r, enough=True) and eof_at is None:
                eof_at = time.monotonic()

    def _read_available(self, rep_r: int, enough: bool = False) -> bool:
        """Read what the reply pipe holds (with ``enough``, only until a whole frame has come:
        a call's reply then costs one read, not two); False at end of file."""
        while not (enough and self._reader.frame_ready()):
            try:
                data = os.read(rep_r, transport.READ_SIZE)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            try:
                self._reader.feed(data)
            except transport.ProtocolError:
                raise _Lost(N_("the worker sent a malformed reply")) from None
        return True

    def _note_seen(self, unit: str, names) -> None:
        """The kernel families the worker says its code was refused: believed only because
        claiming one can only lower the sender's own grade (and only the unit's own names)."""
        if type(names) is list and names:
            allowed = {*self.course.units[unit].kernels, STAND_INS, HANDED}
            self._seen[unit] |= {n for n in names if type(n) is str and (n in allowed or ERASED_NAME.fullmatch(n))}

    def _load(self, unit: str) -> str | None:
        filename = self.course.units[unit].file
        started = time.monotonic()
        try:
            self._send(unit, channel.Op.STATUS)
            header, _ = self._receive(*self._wait_limit(unit))
        except _Lost as lost:
            self._stop()
            if lost.timed_out and lost.reason.startswith("time budget"):
                return N_("importing {file}: {problem}").format(file=filename, problem=lost.reason)
            if lost.timed_out:
                return N_("importing {file} timed out after {seconds:g} s").format(file=filename, seconds=self.timeout)
            return N_("importing {file} stopped the worker: {problem}").format(file=filename, problem=lost.reason)
        finally:
            self._spend(unit, time.monotonic() - started)
        status = channel.decode_status(header)
        if status is None:
            self._stop()
            return N_("importing {file} made the worker send a malformed reply").format(file=filename)
        self._note_seen(unit, status.seen)
        return self._redactor.clean(status.problem, 2000) if status.problem else None

    def _exchange(self, call: Call) -> Result | StudentError:
        """Run ``call`` in one round trip."""
        unit = call.unit
        try:
            self._send(unit, channel.Op.RUN, transport.call_values(call))
            header, values = self._receive(*self._wait_limit(unit))
            answer = channel.decode_answer(header)
            if answer is None:
                raise _Lost(N_("the worker sent a malformed reply"))
            self._note_seen(unit, answer.seen)
            if answer.ok:
                return transport.result_from(values)
            return transport.error_from(cast(dict, answer.error), self._redactor)  # (set when not ok)
        except transport.ProtocolError as error:
            self._lose(_Lost(N_("the worker sent a malformed reply")))
            return StudentError(Failure.BAD_OUTPUT, N_("the worker sent a malformed reply ({problem})").format(problem=error))
        except _Lost as lost:
            self._lose(lost)
            kind = Failure.TIMEOUT if lost.timed_out else Failure.CRASHED
            return StudentError(kind, lost.reason if lost.timed_out or lost.flood
                                else N_("{problem} during the call").format(problem=lost.reason))

    def _lose(self, lost: "_Lost") -> None:
        """The worker is gone: past ``crashes_per_test`` losses, or a time-out or a flood,
        every further call of this test fails at once, with the same kind."""
        self._stop()
        self._crashes += 1
        if lost.timed_out or lost.flood or self._crashes >= self.limits.crashes_per_test:
            self._doomed = (Failure.TIMEOUT if lost.timed_out else Failure.CRASHED, lost.reason)

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
