"""Host side: what a grader holds on this machine while it grades, and their clean-up.

Each worker's cgroups (:class:`Cgroups`, named with :data:`CGROUP_PREFIX`), a worker uid no other
grader uses (:class:`UidLease`), the CPU a worker and its thread share (:class:`CpuLease`), and
the removal of what killed graders left: their private folders and their cgroups
(:func:`remove_stale`). Runs in the trusted grader, never in the box.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

from autograder.core.errors import AutograderError
from autograder.core.i18n import N_
from autograder.sandbox import ipc
from autograder.sandbox.inside.procs import live_processes

UID_MIN, UID_MAX = 3_100_000, 3_200_000  # dedicated worker uids (root only); no passwd entry needed
UID_LOCKS = Path(tempfile.gettempdir()) / "autograder-sandbox-uids"
CPU_LOCKS = Path(tempfile.gettempdir()) / "autograder-sandbox-cpus"
PRIV_PREFIX = "autograder-sandbox-"  # a grader's private folder in /tmp (pool.Pool), removed when stale
CGROUP_PREFIX = "attn-"  # a worker's cgroups: CGROUP_PREFIX + the grader's pid + "-" + the rest (cgroup_name)


# What this process's subjects used, for checks that nothing outlives grading.
USED_UIDS: list[int] = []
USED_FOLDERS: list[str] = []


class SandboxError(AutograderError):
    """The sandbox itself failed (never the submission's fault)."""


# -- cgroups -----------------------------------------------------------------------------

CGROUP_V1 = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")


class Cgroups:
    """One worker's cgroups (v1 memory, pids and cpu where mounted and writable).

    The trusted side creates them below its own and hands the worker an open
    ``tasks`` file of each, so the worker joins before it runs student code.
    """

    def __init__(self, name: str, *, memory: int, pids: int = 256, cpu: float = 1.0):
        """``name``: :func:`cgroup_name`'s (the stale clean-up reads the grader's pid from it)."""
        self.paths: list[Path] = []
        own = _own_cgroups()
        settings = {"memory": {"memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory},
                    "pids": {"pids.max": pids},
                    "cpu": {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": int(100_000 * cpu)}}
        for controller in CONTROLLERS:
            base = CGROUP_V1 / controller
            if controller not in own or not (base / "cgroup.procs").exists():
                continue
            path = base / own[controller].lstrip("/") / name
            try:
                path.mkdir()
            except OSError:
                continue
            self.paths.append(path)
            for key, value in settings[controller].items():
                try:
                    (path / key).write_text(str(value))
                except OSError:
                    pass  # (memsw exists only with swap accounting)

    def out_of_memory(self) -> bool:
        """Whether the memory cgroup killed a process for going over its limit."""
        for path in self.paths:
            try:
                fields = dict(line.split() for line in (path / "memory.oom_control").read_text().splitlines())
                if int(fields.get("oom_kill", 0)):
                    return True
            except (OSError, ValueError):
                pass
        return False

    def join_fds(self) -> list[int]:
        """Each cgroup's ``tasks``, open for writing: the worker writes "0" to join.

        ``tasks`` moves one thread and ``cgroup.procs`` a whole process: the same here,
        since a worker has one thread when it joins (a fork copies only the calling
        thread), and the threads and processes it starts later are born inside. Moving a
        process takes a lock that waits for an RCU grace period, 8 to 20 ms a worker on
        this project's machine; moving a thread does not (0.06 ms).
        """
        return [os.open(path / "tasks", os.O_WRONLY) for path in self.paths]

    def kill(self) -> None:
        """SIGKILL every process in them now (they end while the caller does the rest)."""
        for path in self.paths:
            try:
                _kill_members(path)
            except OSError:  # gone already; remove() says what is left
                pass

    def remove(self, wait: float = 5.0) -> bool:
        """Kill what is left in them and remove them; False if some could not be removed."""
        return _remove_cgroups(self.paths, wait)


def _kill_members(path: Path) -> None:
    """SIGKILL the processes of cgroup ``path`` (OSError if it cannot be read)."""
    for pid in (path / "cgroup.procs").read_text().split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def _remove_cgroups(paths: list[Path], wait: float) -> bool:
    """Kill the processes of ``paths`` and remove them (emptying the list); False if some remain."""
    deadline = time.monotonic() + wait
    while paths:
        for path in list(paths):
            try:
                _kill_members(path)
                path.rmdir()
                paths.remove(path)
            except FileNotFoundError:
                paths.remove(path)
            except OSError:
                pass
        if paths and time.monotonic() > deadline:
            return False
        if paths:
            time.sleep(0.001)  # a killed process takes a few ms to end
    return True


def cgroup_name(tag: str) -> str:
    """A worker cgroup's name: :data:`CGROUP_PREFIX`, this grader's pid, then ``tag``."""
    return f"{CGROUP_PREFIX}{os.getpid()}-{tag}"


def _grader_pid(name: str) -> str:
    """The grader's pid in a :func:`cgroup_name` (not digits: not one of ours)."""
    return name.removeprefix(CGROUP_PREFIX).split("-")[0]


def _remove_stale_cgroups() -> None:
    """Remove the worker cgroups of graders that were killed (a grader's pid is in their names)."""
    for controller, path in _own_cgroups().items():
        if controller in CONTROLLERS and (CGROUP_V1 / controller / "cgroup.procs").exists():
            stale = [p for p in (CGROUP_V1 / controller / path.lstrip("/")).glob(CGROUP_PREFIX + "*")
                     if _grader_pid(p.name).isdigit() and not os.path.exists(f"/proc/{_grader_pid(p.name)}")]
            _remove_cgroups(stale, 0.5)


def _own_cgroups() -> dict[str, str]:
    """controller -> this process's v1 cgroup path."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            if controller:
                found[controller] = path
    return found


def processes_of(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``."""
    return [p.pid for p in live_processes() if p.uid == uid]


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


def _try_lock(path: Path) -> int | None:
    """An open descriptor holding ``path``'s exclusive ``flock`` (freed when this process
    dies), or None while another holder has it. A file that cannot be opened (a link
    included) raises OSError."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _own_folder(path: Path) -> bool:
    """Whether ``path`` is a folder (not a link) of this user's that no one else may write to:
    the lock folders live in /tmp, where anyone could plant one first."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


class UidLease:
    """A worker uid no other grader on this machine uses while we hold its lock.

    Refused, with a message, where the lock folder is not this user's alone: whoever could
    write there could replace a held lock file and hand one uid to two graders at once."""

    _fd: int | None  # the uid's lock file, held (None: released)

    def __init__(self):
        if not _own_folder(UID_LOCKS):
            raise SandboxError(f"{UID_LOCKS} is not a folder of this user's alone (a link, another user's, "
                               "or writable by others); remove it and grade again")
        start = UID_MIN + (os.getpid() * 97) % (UID_MAX - UID_MIN)
        for i in range(UID_MAX - UID_MIN):
            uid = UID_MIN + (start - UID_MIN + i) % (UID_MAX - UID_MIN)
            fd = _try_lock(UID_LOCKS / str(uid))
            if fd is None:
                continue
            self.uid, self._fd = uid, fd
            kill_uid(uid)  # left over from a grader that died, with its IPC objects
            ipc.remove(uid)
            return
        raise SandboxError("no free worker uid")

    def release(self) -> None:
        if self._fd is not None:
            kill_uid(self.uid)
            os.close(self._fd)
            self._fd = None


class CpuLease:
    """One CPU for a worker and the thread that talks to it: of the CPUs this thread may use,
    one that the fewest graders on this machine hold.

    The two take turns, one call at a time, so one CPU serves both. Across two CPUs every
    call and every reply woke the other, sleeping one: about 1 ms a round trip on this
    project's 2-core virtual machine, 4,600 round trips a full grade. Each holder locks a
    slot file (``flock``, freed when its process dies); slot 0 of every CPU is tried before
    any slot 1, so concurrent graders spread over the CPUs. :meth:`release` gives the thread
    its own CPUs back. A thread held to one CPU already (by ``taskset``, or by another lease)
    keeps it, and its worker gets the same one.
    """

    SLOTS = 64  # holders per CPU; past that, the scheduler places the pair

    def __init__(self):
        self._fd: int | None = None
        self._thread, self._allowed = threading.get_native_id(), os.sched_getaffinity(0)
        cpus = sorted(self._allowed)
        self.cpu: int | None = cpus[0] if len(cpus) == 1 else None
        if self.cpu is not None:
            return
        if not _own_folder(CPU_LOCKS):
            return  # another user's (or a planted link): no lease, the scheduler places the pair
        start = os.getpid() % len(cpus)
        for slot in range(self.SLOTS):
            for i in range(len(cpus)):
                cpu = cpus[(start + i) % len(cpus)]
                try:
                    fd = _try_lock(CPU_LOCKS / f"{cpu}-{slot}")
                except OSError:
                    continue
                if fd is None:
                    continue
                try:
                    os.sched_setaffinity(0, {cpu})
                except OSError:  # the CPU went away (a cpuset changed): leave it to the scheduler
                    os.close(fd)
                    return
                self.cpu, self._fd = cpu, fd
                return

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.sched_setaffinity(self._thread, self._allowed)
        except OSError:  # the thread has ended
            pass
        os.close(self._fd)
        self._fd = self.cpu = None




def remove_stale() -> None:
    """Remove what graders that were killed left: their private folders and their worker cgroups."""
    _remove_stale_folders()
    _remove_stale_cgroups()


def _remove_stale_folders() -> None:
    """Remove private folders left by graders that were killed (their owner lock is free)."""
    for folder in Path(tempfile.gettempdir()).glob(PRIV_PREFIX + "*"):
        lock = folder / "owner.lock"
        try:
            if folder in (UID_LOCKS, CPU_LOCKS) or not folder.is_dir() or time.time() - folder.stat().st_ctime < 60:
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


def describe_exit(status: int, cpu: int) -> str:
    """How a worker ended, from its wait status (``cpu``: its CPU-time limit, in seconds)."""
    if os.WIFEXITED(status):
        return N_("the worker exited with status {status}").format(status=os.WEXITSTATUS(status))
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGKILL:
            return N_("the worker was killed (SIGKILL); it may have run out of memory")
        if sig == signal.SIGXCPU:
            return N_("the worker used up its CPU-time limit ({cpu} s)").format(cpu=cpu)
        return N_("the worker was killed by {signal}").format(signal=signal.Signals(sig).name)
    return N_("the worker ended (wait status {status})").format(status=status)
