"""The sandbox's process machinery: one zygote per grading run.

Kept free of torch imports at module level, so the CLI can start the zygote
(whose torch import takes a second) before it imports anything heavy itself;
see :func:`prestart`. :mod:`autograder.sandbox` builds the subject on top.
"""
from __future__ import annotations

import fcntl
import importlib.util
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
from pathlib import Path

from .manifest import Course

ENGINE_FILES = ("__init__.py", "subject.py", "loader.py", "forbidden.py", "manifest.py", "transport.py", "worker.py")
UID_MIN, UID_MAX = 3_100_000, 3_200_000  # dedicated worker uids (root only); no passwd entry needed
UID_LOCKS = Path(tempfile.gettempdir()) / "attn-sandbox-uids"
STARTUP = 120.0  # seconds for the zygote to import torch (slow on a loaded machine)


# What this process's subjects used, for checks that nothing outlives grading.
USED_UIDS: list[int] = []
USED_FOLDERS: list[str] = []


class SandboxError(Exception):
    """The sandbox itself failed (never the submission's fault)."""


def _limits(cpu_seconds: int, own_uid: bool) -> dict[str, int]:
    limits = {
        "RLIMIT_CPU": cpu_seconds,
        "RLIMIT_FSIZE": 64 << 20,
        "RLIMIT_NOFILE": 256,
        "RLIMIT_CORE": 0,
    }
    if own_uid:
        limits["RLIMIT_NPROC"] = 128  # counted per uid, threads included: only meaningful for a dedicated one
    # CUDA reserves a huge virtual address space: an address-space cap would break it.
    import torch

    if not torch.cuda.is_available():
        limits["RLIMIT_AS"] = 4 << 30
    return limits


# -- platform ------------------------------------------------------------------------

_MODE: str | None = None


def isolation_mode() -> str:
    """"root" (namespaces + dedicated uid), "userns" (namespaces as a mapped root),
    or "plain" (a separate process with limits only)."""
    global _MODE
    if _MODE is None:
        unshare = shutil.which("unshare")
        flags = ["--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
        _MODE = "plain"
        if unshare:
            for mode, extra in (("root", []), ("userns", ["--user", "--map-root-user"])):
                if mode == "root" and os.geteuid() != 0:
                    continue
                try:
                    ok = subprocess.run([unshare, *extra, *flags, "--", "true"], capture_output=True, timeout=20).returncode == 0
                except (OSError, subprocess.TimeoutExpired):
                    ok = False
                if ok:
                    _MODE = mode
                    break
    return _MODE


def processes_of(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                text = handle.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1 0").split()[0]) == uid and not fields.get("State", "").strip().startswith("Z"):
            found.append(int(entry))
    return found


def kill_uid(uid: int, wait: float = 3.0) -> bool:
    """SIGKILL every process of ``uid`` until none is left; False if some survive ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        pids = processes_of(uid)
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)


class _UidLease:
    """A worker uid no other grader on this machine uses while we hold its lock."""

    def __init__(self):
        UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
        start = UID_MIN + (os.getpid() * 97) % (UID_MAX - UID_MIN)
        for i in range(UID_MAX - UID_MIN):
            uid = UID_MIN + (start - UID_MIN + i) % (UID_MAX - UID_MIN)
            fd = os.open(UID_LOCKS / str(uid), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            kill_uid(uid)  # left over from a grader that died
            return
        raise SandboxError("no free worker uid")

    def release(self) -> None:
        if self._fd is not None:
            kill_uid(self.uid)
            os.close(self._fd)
            self._fd = None


# -- the zygote ------------------------------------------------------------------------

def _site_dir(name: str) -> str:
    """The sys.path folder a package is found in, without importing it."""
    return str(Path(importlib.util.find_spec(name).origin).resolve().parents[1])


class _Pool:
    """One zygote, shared by every SandboxSubject of a grading run."""

    _shared: dict[str, "_Pool"] = {}
    _lock = threading.Lock()

    @classmethod
    def acquire(cls, course: Course) -> "_Pool":
        with cls._lock:
            key = str(course.root)
            pool = cls._shared.get(key)
            if pool is None or pool.closed:
                pool = cls._shared[key] = _Pool(course)
            pool.users += 1
            return pool

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users <= 0:
                self.close()

    def __init__(self, course: Course):
        self.course, self.users, self.closed = course, 0, False
        self.mode = isolation_mode()
        _remove_stale()
        self.priv = Path(tempfile.mkdtemp(prefix=PREFIX))
        self._owner = os.open(self.priv / "owner.lock", os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._owner, fcntl.LOCK_EX)  # held while this grader lives
        os.chmod(self.priv, 0o711)  # workers may enter their own box, not list the others
        lib = self.priv / "lib"
        (lib / "autograder").mkdir(parents=True)
        engine = Path(__file__).resolve().parent
        for name in ENGINE_FILES:
            shutil.copyfile(engine / name, lib / "autograder" / name)
        for unit in course.units.values():
            for rel in unit.stand_ins.values():
                source = (course.root / rel).resolve()
                if not source.is_relative_to(course.root) or ".." in Path(rel).parts:
                    raise SandboxError(f"stand-in {rel} is outside the course")
                if source.is_file():
                    (lib / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, lib / rel)
        for path in [lib, *lib.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        self.lib = lib
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        site_dirs = sorted({_site_dir("torch")})
        executable = os.path.realpath(sys.executable)  # the base interpreter: -S, and torch's folder on sys.path
        keep = sorted({os.path.realpath(p) for p in (self.priv, sys.base_prefix, os.path.dirname(executable), *site_dirs)})
        config = {
            "lib": str(lib),
            "site_dirs": site_dirs,
            "keep": keep,
            "writable": [str(self.priv)],
            "namespaces": self.mode != "plain",
            "socket_fd": child.fileno(),
            "course": course.name,
            "units": [{"name": u.name, "title": u.title, "file": u.file, "forbidden": list(u.forbidden),
                       "stand_ins": u.stand_ins} for u in course.units.values()],
            "uid_min": UID_MIN,
            "uid_max": UID_MAX,
        }
        config_path = self.priv / "zygote.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        os.chmod(config_path, 0o600)
        command = [executable, "-I", "-S", str(lib / "autograder" / "worker.py"), str(config_path)]
        if self.mode != "plain":
            extra = ["--user", "--map-root-user"] if self.mode == "userns" else []
            command = [shutil.which("unshare"), *extra, "--mount", "--net", "--pid", "--fork", "--kill-child",
                       "--mount-proc", "--", *command]
        self.log = open(self.priv / "zygote.log", "w+b")
        self.proc = subprocess.Popen(
            command, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            env=_scrubbed_env(), cwd=str(lib), start_new_session=True, preexec_fn=_die_with_parent,
        )
        child.close()
        self.sock = parent
        self.sock.setblocking(False)
        self._buffer = b""
        self.exits: dict[int, int] = {}  # worker id -> wait status
        self.spawned: set[int] = set()
        self.ready = False
        self.hidden: list[str] = []
        self._ids = 0
        self._finalizer = weakref.finalize(self, _Pool._shutdown, self.proc, self.sock, self.log, self.priv, self._owner)

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
                if self.proc.poll() is not None:
                    raise SandboxError(f"the sandbox's zygote stopped: {self._log_tail()}")
                break
            self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            event = message.get("event")
            if event == "ready":
                self.ready, self.hidden = True, message.get("hidden", [])
            elif event == "exit":
                self.exits[message["id"]] = message["status"]
            elif event == "spawned":
                self.spawned.add(message["id"])

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP
        while not self.ready:
            if self.proc.poll() is not None:
                self.pump()
                if not self.ready:
                    raise SandboxError(f"the sandbox could not start: {self._log_tail()}")
            if time.monotonic() > deadline:
                raise SandboxError(f"the sandbox did not start within {STARTUP:g} s")
            _wait_readable([self.sock], 0.5)
            self.pump()

    def _log_tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-2000:].decode("utf-8", "replace").strip() or f"exit status {self.proc.poll()}"

    def spawn(self, *, box: Path, uid: int | None, isolate: bool, timeout: float, cpu: int) -> tuple[int, int, int, int]:
        """A new worker's (id, request fd, reply fd, output fd)."""
        self.wait_ready()
        self._ids += 1
        wid = self._ids
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        spawn = {"id": wid, "box": str(box), "uid": uid, "isolate": isolate, "timeout": timeout, "limits": _limits(cpu, uid is not None)}
        line = json.dumps({"op": "spawn", "spawn": spawn}).encode() + b"\n"
        self.sock.setblocking(True)
        try:
            socket.send_fds(self.sock, [line], [req_r, rep_w, out_w])
        finally:
            self.sock.setblocking(False)
            for fd in (req_r, rep_w, out_w):
                os.close(fd)
        for fd in (rep_r, out_r):
            os.set_blocking(fd, False)
        return wid, req_w, rep_r, out_r

    def kill(self, wid: int) -> None:
        if self.closed or self.proc.poll() is not None:
            return
        line = json.dumps({"op": "kill", "id": wid}).encode() + b"\n"
        self.sock.setblocking(True)
        try:
            self.sock.sendall(line)
        except OSError:
            pass
        finally:
            self.sock.setblocking(False)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._finalizer()

    @staticmethod
    def _shutdown(proc, sock, log, priv, owner) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # unshare's --kill-child then ends the zygote's namespace
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


PREFIX = "attn-sandbox-"


def _remove_stale() -> None:
    """Remove private folders left by graders that were killed (their owner lock is free)."""
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        lock = folder / "owner.lock"
        try:
            if folder == UID_LOCKS or not folder.is_dir() or time.time() - folder.stat().st_ctime < 60:
                continue  # (a young one may be between its creation and its lock)
            fd = os.open(lock, os.O_RDWR)  # no lock file: not ours to judge
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live grader's
        finally:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)


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


def _wait_readable(fds, timeout: float) -> list:
    import select

    try:
        return select.select(fds, [], [], max(0.0, timeout))[0]
    except InterruptedError:
        return []




def prestart(course: Course) -> _Pool:
    """Start the zygote now (it imports torch while the caller does its own imports).
    The caller holds the pool until it calls ``release()`` on what this returns."""
    return _Pool.acquire(course)
