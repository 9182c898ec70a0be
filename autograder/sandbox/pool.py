"""The grader's handle on the zygote: the :class:`Pool` that starts it and talks to it, and
the :class:`AttachedPool` of a grading process that shares its parent's.

The mode the zygote runs in and its bwrap command line are :mod:`autograder.sandbox.isolation`;
what a grader holds meanwhile (cgroups, uid and CPU leases) is :mod:`autograder.sandbox.resources`;
the zygote itself is :mod:`autograder.sandbox.inside.zygote`, and what they say to each other is
:mod:`autograder.sandbox.inside.zygote_channel`.

Kept free of torch imports at module level, so the CLI can start the zygote
(whose torch import takes a second) before it imports anything heavy itself;
see :func:`prestart`. :mod:`autograder.sandbox.host` builds the subject on top.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import cast

from autograder.core.manifest import Course
from autograder.sandbox import forked, visible
from autograder.sandbox.forked import ForkedZygote
from autograder.sandbox.contents import INSIDE, SYSTEM_DIRS, base_sites, engine_files, package_entries
from autograder.sandbox.inside import zygote_channel as channel
from autograder.sandbox.isolation import bwrap, bwrap_command, isolation_mode, landlock_abi, mode_warning
from autograder.sandbox.resources import PRIV_PREFIX, UID_MAX, UID_MIN, SandboxError, remove_stale

ATTACH = "AUTOGRADER_SANDBOX_ATTACH"  # a grading process's connection to its parent's zygote (Pool.attach)


class ZygoteConnection:
    """One grader connection to a zygote: spawning and killing its workers, reading its events.
    :class:`Pool` starts the zygote it connects to; :class:`AttachedPool` connects to the zygote
    of the process that started this one."""

    _lock = threading.Lock()  # (one for every connection: Pool.acquire's and release's)
    _finalizer: weakref.finalize  # each kind's own (Pool, AttachedPool): what closing it does
    _ended: Callable[[], bool]  # each kind's own: whether the zygote has ended

    def __init__(self, course: Course, mode: str, priv: Path, sock: socket.socket):
        self.course, self.users, self.closed = course, 0, False
        self.mode = mode
        self.warning = mode_warning(self.mode)
        self.holder = None  # the subject whose worker is alive
        self.priv = priv
        self.proc: subprocess.Popen | ForkedZygote | None = None
        self.sock = sock
        self.sock.setblocking(False)
        self._buffer = b""
        self.exits: dict[int, int] = {}  # worker id -> wait status
        self.ready = self._eof = False
        self._ids = 0

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users <= 0:
                self.close()

    def attach(self) -> tuple[socket.socket, dict[str, str]]:
        raise SandboxError("only the process that started the zygote attaches others to it")

    def inside(self, path: Path) -> str:
        """``path`` (in the private folder) as the zygote sees it."""
        return str(INSIDE / path.relative_to(self.priv)) if self.mode == "full" else str(path)

    # -- zygote messages ---------------------------------------------------------
    def pump(self) -> None:
        """Read whatever the zygote has said (exits, spawn confirmations)."""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                self._eof = True
                if self._ended():
                    raise SandboxError(f"the sandbox's zygote stopped: {self._log_tail()}")
                break
            self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = channel.decode_message(line)
            if isinstance(message, channel.Ready):
                self.ready = True
            elif isinstance(message, channel.Exit):
                self.exits[message.id] = message.status

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.course.limits.sandbox_startup
        while not self.ready:
            if self._ended():
                self.pump()
                if not self.ready:
                    raise SandboxError(f"the sandbox could not start: {self._log_tail()}")
            if time.monotonic() > deadline:
                raise SandboxError(f"the sandbox did not start within {self.course.limits.sandbox_startup:g} s")
            wait_readable([self.sock], 0.5)
            self.pump()

    def _log_tail(self) -> str:
        try:
            with open(self.priv / "zygote.log", "rb") as log:
                log.seek(max(0, os.fstat(log.fileno()).st_size - 2000))
                tail = log.read().decode("utf-8", "replace").strip()
        except OSError:
            tail = ""
        return tail or ("the zygote ended" if self.proc is None else f"exit status {self.proc.poll()}")

    def spawn(self, holder, spawn: dict, extra_fds: list[int]) -> tuple[int, int, int, int]:
        """A new worker's (id, request fd, reply fd, output fd); the previous holder's worker is stopped first."""
        self.wait_ready()
        if self.holder is not None and self.holder is not holder:
            self.holder.stop_worker()
        self.holder = holder
        self._ids += 1
        wid = self._ids
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        line = channel.encode(channel.Spawn(wid, spawn))
        self.sock.setblocking(True)
        try:
            socket.send_fds(self.sock, [line], [req_r, rep_w, out_w, *extra_fds])
        finally:
            self.sock.setblocking(False)
            for fd in (req_r, rep_w, out_w):
                os.close(fd)
        for fd in (req_w, rep_r, out_r):
            os.set_blocking(fd, False)
        return wid, req_w, rep_r, out_r

    def kill(self, wid: int, wait: float = 3.0) -> None:
        """Kill worker ``wid`` and wait (up to ``wait`` s) for the zygote to confirm its end."""
        if self.closed or self._ended():
            return
        line = channel.encode(channel.Kill(wid))
        self.sock.setblocking(True)
        try:
            self.sock.sendall(line)
        except OSError:
            return
        finally:
            self.sock.setblocking(False)
        deadline = time.monotonic() + wait
        while wid not in self.exits and time.monotonic() < deadline:
            wait_readable([self.sock], deadline - time.monotonic())
            self.pump()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._finalizer()


class Pool(ZygoteConnection):
    """One zygote, shared by every SandboxSubject of a grading run.

    It keeps at most one worker alive: before a worker starts for another
    submission (or unit), the previous one is stopped with every process it
    started, so nothing of one submission runs while the next is graded.
    A grading process this one starts may share the zygote (:meth:`attach`):
    its own connection, its own workers, one zygote's start-up (about 1.3 CPU-s:
    torch and its meta kernels) instead of one each.
    """

    _shared: dict[str, ZygoteConnection] = {}
    proc: subprocess.Popen | ForkedZygote  # the zygote's, started by __init__

    @classmethod
    def acquire(cls, course: Course, *, fork: bool = False) -> ZygoteConnection:
        with cls._lock:
            key = str(course.root)
            pool = cls._shared.get(key)
            if pool is None or pool.closed:
                attached = os.environ.pop(ATTACH, None)  # once: a later pool of this process is its own
                pool = cls._shared[key] = AttachedPool(course, json.loads(attached)) if attached else Pool(course, fork=fork)
            pool.users += 1
            return pool

    @classmethod
    def after_fork(cls, attach: dict[str, str]) -> None:
        """In a grading process just forked from the one holding the pools: forget them (their
        connections and zygotes stay that process's: nothing is closed or killed from here),
        and let the next :meth:`acquire` attach through ``attach`` (what :meth:`attach` gave)."""
        for pool in cls._shared.values():
            pool._finalizer.detach()
        cls._shared.clear()
        os.environ.update(attach)

    def __init__(self, course: Course, *, fork: bool = False):
        """``fork``: fork the zygote from this process where the mode allows it (:mod:`.forked`)."""
        remove_stale()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        super().__init__(course, isolation_mode(), Path(tempfile.mkdtemp(prefix=PRIV_PREFIX)), parent)
        self._owner = os.open(self.priv / "owner.lock", os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._owner, fcntl.LOCK_EX)  # held while this grader lives
        # Full mode binds what it needs; otherwise workers (each its own uid) enter only their own folders.
        os.chmod(self.priv, 0o700 if self.mode == "full" else 0o711)
        lib = self.priv / "lib"
        for folder in ("subs", "units"):
            (self.priv / folder).mkdir(mode=0o711)
        engine = Path(__file__).resolve().parents[1]
        for name in engine_files(engine):
            (lib / "autograder" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(engine / name, lib / "autograder" / name)
        for path in [lib, *lib.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        self.lib = lib
        if self.mode == "container" and os.geteuid() == 0:
            self._lock_course_tree()
        full = self.mode == "full"
        inner_lib = INSIDE / "lib" if full else lib
        site_dirs = sorted(package_entries())
        executable = os.path.realpath(sys.executable)  # the base interpreter: -S, and torch's folder on sys.path
        config = {
            "lib": str(inner_lib),
            "site_dirs": site_dirs,
            "namespaces": full,
            "socket_fd": child.fileno(),
            "course_name": course.name,
            "units": [{"name": u.name, "title": u.title, "file": u.file, "forbidden": list(u.forbidden),
                       "stand_ins": u.stand_ins, "kernels": list(u.kernels), "stand_ins_for": u.stand_ins_for,
                       "handed": u.handed}
                      for u in course.units.values()],
            "kernels": course.kernels,
            "uid_min": UID_MIN,
            "uid_max": UID_MAX,
            "inside": str(INSIDE),
            "tmp_bytes": course.limits.box_tmp,
            "under_tmp": [p for p in (*site_dirs, sys.base_prefix) if Path(p).is_relative_to("/tmp")],
            "landlock": None if full or not landlock_abi() else self._landlock_rules(lib),
        }
        self.log = open(self.priv / "zygote.log", "wb")
        fork = fork and not full  # (bwrap starts a program: full mode's zygote is always a fresh interpreter)
        why_not = forked.unsafe_to_fork(self._hidden()) if fork else None
        if why_not:
            print(f"the sandbox's zygote starts as a fresh interpreter: {why_not}", file=sys.stderr)
        if fork and not why_not:
            self.proc = forked.fork_zygote({**config, "environment": _scrubbed_env()}, child.fileno(), self.log.fileno())
        else:
            config_path = lib / "zygote.json"
            config_path.write_text(json.dumps(config), encoding="utf-8")
            argv = ["-I", "-S", str(inner_lib / "autograder" / "sandbox" / "inside" / "zygote.py"), str(inner_lib / config_path.name)]
            command = bwrap_command(cast(str, bwrap()), self.priv, executable, argv, self.course.limits.box_tmp) if full else [executable, *argv]
            self.proc = subprocess.Popen(
                command, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                env=_scrubbed_env(), cwd=str(lib), start_new_session=True, preexec_fn=_die_with_parent,
            )
        child.close()
        self._finalizer = weakref.finalize(self, Pool._shutdown, self.proc, self.sock, self.log, self.priv, self._owner)

    def attach(self) -> tuple[socket.socket, dict[str, str]]:
        """A connection of its own to this zygote, and the environment, for a grading process this
        one starts: pass it the socket's descriptor (``pass_fds``) and the environment, then close
        the socket here. That process's :meth:`acquire` then attaches instead of starting a zygote."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.setblocking(True)
        try:
            socket.send_fds(self.sock, [channel.encode(channel.Attach())], [ours.fileno()])
        finally:
            self.sock.setblocking(False)
            ours.close()
        return theirs, {ATTACH: json.dumps({"fd": theirs.fileno(), "priv": str(self.priv), "mode": self.mode})}

    def popen_attached(self, command: list[str], env: dict[str, str], **popen) -> subprocess.Popen:
        """Start ``command`` (``subprocess.Popen`` with ``env`` and ``popen``) as a grading
        process attached to this zygote (:meth:`attach`)."""
        conn, attach = self.attach()
        try:
            return subprocess.Popen(command, pass_fds=[conn.fileno()], env={**env, **attach}, **popen)
        finally:
            conn.close()  # the process holds its own copy

    def _ended(self) -> bool:
        return self.proc.poll() is not None

    def _lock_course_tree(self) -> None:
        """Without namespaces, the answers are hidden by mode alone: 0700, root's."""
        tests = self.course.hidden_tests.parent if self.course.hidden_tests.parent != self.course.root else self.course.hidden_tests
        stand_ins = {(self.course.root / rel).parent for unit in self.course.units.values() for rel in unit.files()}
        # The nbgrader course folder holds the source notebooks, answers included.
        for folder in (self.course.solutions, tests, self.course.nbgrader_course, *sorted(stand_ins)):
            try:
                if folder.is_dir() and folder.stat().st_uid == 0:
                    os.chmod(folder, 0o700)
            except OSError:
                pass

    def _hidden(self) -> list[Path]:
        """What a worker may not read: the answers, and the hidden suite."""
        course = self.course
        return [course.solutions, course.hidden_tests, course.nbgrader_course]

    def _landlock_rules(self, lib: Path) -> dict[str, list[str]]:
        roots = [f"/{name}" for name in SYSTEM_DIRS] + [sys.base_prefix]
        hidden = [self.course.root, *self._hidden(), self.priv]
        return visible.rules(roots, sorted({*package_entries(), *base_sites()}), package_entries(), str(lib),
                             [str(p) for p in hidden])

    @staticmethod
    def _shutdown(proc, sock, log, priv, owner) -> None:
        for kill in (os.killpg, os.kill):  # (the pid alone: a forked zygote may not have made its session yet)
            try:
                kill(proc.pid, signal.SIGKILL)  # bwrap's --die-with-parent then ends the zygote's namespace
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        sock.close()
        log.close()
        shutil.rmtree(priv, ignore_errors=True)
        os.close(owner)


class AttachedPool(ZygoteConnection):
    """A grading process's connection to the zygote of the process that started it
    (:meth:`Pool.attach`). It spawns and kills its own workers there; the zygote, its
    private folder and their removal stay the starting process's."""

    def __init__(self, course: Course, spec: dict):
        super().__init__(course, spec["mode"], Path(spec["priv"]), socket.socket(fileno=int(spec["fd"])))
        self._finalizer = weakref.finalize(self, self.sock.close)  # the zygote then kills our workers

    def _ended(self) -> bool:
        return self._eof  # the zygote closes our connection only when it ends


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _scrubbed_env() -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/nonexistent",
        "MALLOC_ARENA_MAX": "2",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def wait_readable(fds, timeout: float) -> list:
    import select

    try:
        return select.select(fds, [], [], max(0.0, timeout))[0]
    except InterruptedError:
        return []


def prestart(course: Course, *, fork: bool = False) -> ZygoteConnection:
    """Start the zygote now (it imports torch while the caller does its own imports; forked,
    ``fork``, it is this process's import). The caller holds the pool until it calls
    ``release()`` on what this returns."""
    return Pool.acquire(course, fork=fork)
