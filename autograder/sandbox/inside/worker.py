"""The sandboxed side of grading: a zygote that forks one worker per (submission, unit).

This file runs only inside the sandbox, from a private copy of the grader's
package (no solutions, no tests, no course data). It is started by
:mod:`autograder.sandbox.zygote` as ``python -I -S worker.py CONFIG``:

* **full** mode: under bubblewrap, in new mount, PID, network, IPC and UTS
  namespaces over an empty root holding read-only binds of the system
  folders, the Python install, the packages torch needs (not the rest of
  site-packages) and the private folder's parts (``/sandbox/lib``,
  ``/sandbox/subs`` with the submissions' copies, ``/sandbox/units`` with
  each worker's stand-ins).

  Decision: as real root, bwrap's user namespace would map uid 0 alone, so no
  dedicated worker uid could be used; the zygote therefore keeps the host's
  user namespace and only the capabilities it needs (setuid, setgid,
  sys_admin for each worker's namespaces and mounts, kill); each worker gives
  them all up by switching to its dedicated uid (which clears every
  capability set) with no-new-privileges, before student code runs. Without
  root, bwrap adds a user namespace (``--disable-userns`` inside it) and each
  worker clears its capabilities with ``capset``: there is no separate uid.
* **container** and **plain** modes: no namespaces; the zygote runs as the
  grader does, workers switch uid where root allows (container) and, where
  the kernel has Landlock, restrict themselves to what full mode would show
  (``landlock.py``). What a worker's uid leaves in the host's IPC namespace
  and /dev/shm is removed by the grader once the worker has ended
  (``autograder/sandbox/ipc.py``, outside the box).

The zygote (trusted code only; it never imports student code nor reads a
stand-in) imports torch once, then serves spawn requests from the trusted
grader over a Unix socket, which also carries the worker's pipes and its
cgroups' ``tasks`` files. The grader may attach more connections (one per
grading process it starts, :meth:`~autograder.sandbox.zygote.Pool.attach`):
each connection's workers are its own (ids, kills, exit events), and they are
killed when it closes; the zygote ends when the first connection closes.

Each worker is forked from the zygote. In full mode it gets its own PID,
mount and IPC namespaces (once it ends, the zygote ends the namespace's
init, and with it every process the worker started; its System V objects
and POSIX message queues end with its IPC namespace), a size-capped tmpfs
for its box (a copy of its submission), /tmp and /dev/shm (where POSIX
shared memory and named semaphores live: they end with it), and sees only
its own unit's folder of stand-ins (the units that unit depends on, never
the unit's own) and none of the other submissions.
It joins its cgroups, drops to its uid, sets resource limits, and serves
Calls for its one unit with an :class:`~autograder.core.subject.InProcessSubject`.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import shutil
import signal
import socket
import sys

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWIPC = 0x00020000, 0x20000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
BOX_BYTES, SHM_BYTES = 64 << 20, 16 << 20

_libc = ctypes.CDLL(None, use_errno=True)
# Modules of the package, imported by zygote() once sys.path holds it (not in each call: a
# function's import of a package's module costs microseconds every time).
limits = procs = landlock = protocol = transport = None


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                       flags, data.encode() if data else None), f"mount {target}")


def _prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, value, 0, 0, 0), "prctl")


def _drop_capabilities() -> None:
    """Clear every capability set (``capset`` with version 3 and zero data)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(header, data), "capset")


# -- a worker's view of the file system (full mode) ----------------------------------

def _tmpfs(path: str, size: int, mode: int) -> None:
    _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode:o}")


def _copy_tree(source: str, dest: str) -> None:
    """Copy the (already capped) submission copy into the box, without recursion."""
    todo = [""]
    while todo:
        rel = todo.pop()
        for entry in os.scandir(os.path.join(source, rel)):
            target = os.path.join(dest, rel, entry.name)
            if entry.is_dir(follow_symlinks=False):
                os.mkdir(target, 0o700)
                todo.append(os.path.join(rel, entry.name))
            elif entry.is_file(follow_symlinks=False):
                shutil.copyfile(entry.path, target)


def _chown_tree(root: str, uid: int) -> None:
    # Bottom up: without CAP_DAC_OVERRIDE, a folder once given away can no longer be entered.
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):  # the box is at most 32 levels deep
        for name in [*(os.path.join(dirpath, n) for n in dirnames + filenames), dirpath]:
            os.lchown(name, uid, uid)


def private_view(spawn: dict, config: dict) -> None:
    """In the worker's new mount namespace: its own box, /tmp and /dev/shm, and only its own stand-ins."""
    inside = config["inside"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    unit_fd = os.open(spawn["unit_dir"], os.O_PATH | os.O_DIRECTORY)
    _tmpfs(inside + "/box", BOX_BYTES, 0o700)
    _copy_tree(spawn["source"], inside + "/box")
    for folder in ("/subs", "/units"):  # the other submissions and the other workers' stand-ins
        _tmpfs(inside + folder, 4096, 0o755)
    _mount(f"/proc/self/fd/{unit_fd}", inside + "/unit", None, MS_BIND | MS_REC)
    _mount(None, inside + "/unit", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.close(unit_fd)
    # A /tmp of its own; what the zygote imports from below /tmp (a venv there) is bound back.
    held = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in config["under_tmp"]}
    _tmpfs("/tmp", config["tmp_bytes"], 0o1777)
    for path, fd in sorted(held.items()):
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)
    if os.path.isdir("/dev/shm"):
        _tmpfs("/dev/shm", SHM_BYTES, 0o1777)
    if spawn.get("uid") is not None:
        _chown_tree(inside + "/box", spawn["uid"])


# -- one worker --------------------------------------------------------------------

def become_worker(spawn: dict, fds: list[int], config: dict) -> None:
    """In the forked child: isolate, join the cgroups, drop privileges, then serve until told to stop."""
    req_fd, rep_fd, out_fd, *cgroup_fds = fds
    if spawn.get("cpu") is not None:
        try:
            os.sched_setaffinity(0, {spawn["cpu"]})  # the CPU of the grader's thread: see zygote.CpuLease
        except OSError:  # only slower elsewhere
            pass
    if config["namespaces"]:
        private_view(spawn, config)
    for fd in cgroup_fds:
        os.write(fd, b"0")  # "0": this thread, the process's only one; what it starts is born inside
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.closerange(3, min(req_fd, rep_fd))
    os.closerange(min(req_fd, rep_fd) + 1, max(req_fd, rep_fd))
    os.closerange(max(req_fd, rep_fd) + 1, 65536)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.setsid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    box = spawn["box"]
    uid = spawn.get("uid")
    if config.get("landlock"):
        # Before the uid switch: as root, every listed path can still be opened to make its rule.
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        rules = config["landlock"]
        landlock.restrict([*rules["read"], spawn["unit_dir"]], [box, *rules["devices"]], rules["list"])
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root: every capability set is cleared
    elif config["namespaces"]:
        _drop_capabilities()
    os.chdir(box)  # (its own uid's, 0700)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    limits.apply(spawn["limits"])
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    os.environ.update({"HOME": box, "TMPDIR": box})
    serve(req_fd, rep_fd, box, spawn, config)


def _course(config: dict, spawn: dict):
    from pathlib import Path

    from autograder.core.manifest import Course, Rules, Unit

    lib = Path(spawn["unit_dir"] if not config["namespaces"] else config["inside"] + "/unit")
    units = {u["name"]: Unit(u["name"], u["title"], u["file"], tuple(u["forbidden"]), dict(u["stand_ins"]),
                             tuple(u["kernels"]), {k: tuple(v) for k, v in u["stand_ins_for"].items()})
             for u in config["units"]}
    missing = lib / "absent"
    rules = Rules(**{k: tuple(v) for k, v in spawn["rules"].items()}) if spawn["rules"] else None
    return Course(root=lib, name=config["course_name"], units=units, solutions=missing, assignments=missing,
                  hidden_tests=missing, public_tests=missing, rules=rules,
                  kernels={k: tuple(v) for k, v in config["kernels"].items()})


OUT_OF_MEMORY = ("can't allocate memory", "CUDA out of memory", "out of memory")


def _mapped(error, limits: dict):
    """Name running out of memory for what it is."""
    if error.kind == "MemoryError" or (error.kind in ("RuntimeError", "OutOfMemoryError")
                                       and any(s in error.message for s in OUT_OF_MEMORY)):
        limit = limits.get("RLIMIT_AS")
        cap = f" (its limit is {limit / 2**30:g} GiB)" if limit else ""
        return protocol.StudentError(protocol.Failure.CRASHED, f"the worker ran out of memory{cap}", error.where)
    return error


def serve(req_fd: int, rep_fd: int, box: str, spawn: dict, config: dict) -> None:
    from pathlib import Path

    from autograder.core.subject import CallTimeout, InProcessSubject

    inner = InProcessSubject(_course(config, spawn), Path(box), isolate=spawn["isolate"], timeout=spawn["timeout"])
    limits = spawn["limits"]
    test = None

    def send(frame: bytes) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - the submission may have replaced the streams
                pass
        transport.write_all(rep_fd, frame)

    def reply(header: dict) -> None:
        send(transport.pack(header))

    def seen(unit: str) -> list[str]:
        return sorted(inner.runtime_uses(unit))

    reply({"op": "ready", "pid": os.getpid()})
    requests = transport.FrameReader()
    while True:
        try:
            header, values = transport.read_frame(req_fd, requests, devices=True)
        except EOFError:
            os._exit(0)
        if header.get("test") != test:
            test = header.get("test")
            inner.begin(test)
        op = header.get("op")
        if op == "status":
            unit = header["unit"]
            if unit != spawn["unit"]:
                os._exit(70)  # a worker serves one unit only: its view holds that unit's stand-ins
            try:
                problem = inner.status(unit)
            except CallTimeout as error:
                problem = f"importing {inner.course.units[unit].file} {error}"
                inner._errors[unit] = problem
            gc.collect()
            gc.freeze()  # what the unit's import left is permanent: later collections stay cheap
            reply({"op": "status", "problem": problem, "seen": seen(unit)})
        elif op == "run":
            call = transport.call_from(values)
            if call.unit != spawn["unit"]:
                os._exit(70)
            send(_answer(inner, call, limits, seen))
        elif op == "stop":
            os._exit(0)


def _answer(inner, call, limits: dict, seen) -> bytes:
    """The reply frame to one call, packed (packing is where an unsendable output shows)."""
    try:
        result = inner.run(call)
    except protocol.StudentError as caught:
        caught.__context__ = caught.__cause__ = caught.__traceback__ = None
        error = _mapped(caught, limits)
        del caught
        # Finalizers of what the code raised run now, during its own call
        # (the young generations hold it; a full collection would cost ms).
        gc.collect(1)
    else:
        try:
            return transport.pack({"op": "result", "ok": True, "seen": seen(call.unit)}, transport.result_values(result))
        except TypeError as why:
            error = protocol.StudentError(protocol.Failure.BAD_OUTPUT, f"the output cannot be sent back: {why}")
    return transport.pack({"op": "result", "ok": False, **transport.error_header(error), "seen": seen(call.unit)})


# -- the zygote ---------------------------------------------------------------------

def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


# PID 1 of each worker's PID namespace: a shell waiting for a child, whose ``wait`` reaps any
# child, adopted ones too. Spawned, it costs an exec (``posix_spawn`` copies no page tables); a
# fork of the zygote (225 MB) cost 10 ms a process on the 2-core machine, copying page tables
# and unmapping them at its exit.
INIT = ["sh", "-c", "sleep 2147483647 & wait"]


def spawn_worker(spawn: dict, fds: list[int], config: dict, conns, own_pid_ns: int, devnull: int) -> list[int]:
    """Start a worker; return the pids the zygote reaps: the worker's first, then (with namespaces) its
    namespace's init.

    With namespaces, the zygote moves its next children into a new PID namespace, spawns
    :data:`INIT` there (PID 1), forks the worker there, and moves back (``own_pid_ns``). When the
    init ends, the kernel kills every process of the namespace, in whatever session: the zygote
    kills it once it has reaped the worker, and kills it to kill the worker. The worker's wait
    status reaches the zygote as is, since the worker is its child. One fork of the zygote a worker,
    not three (a child to make the namespaces, a forked init, the worker): 15 ms less a worker.
    """
    pids = []
    if config["namespaces"]:
        _unshare(CLONE_NEWPID)
    try:
        if config["namespaces"]:
            pids.append(os.posix_spawn("/bin/sh", INIT, {"PATH": "/usr/bin:/bin"}, setsid=True,
                                       file_actions=[(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)]))
        pid = os.fork()
        if not pid:
            _become_worker_safely(spawn, fds, config, conns)
    except OSError:
        for each in pids:
            os.kill(each, signal.SIGKILL)
        raise
    finally:
        if config["namespaces"]:
            _check(_libc.setns(own_pid_ns, CLONE_NEWPID), "setns")
    return [pid, *pids]


def _become_worker_safely(spawn: dict, fds: list[int], config: dict, conns) -> None:
    """In the forked child: become the worker; never return into the zygote's code."""
    try:
        for conn in conns:  # no worker ever holds a grader's connection
            conn.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if config["namespaces"]:
            _unshare(CLONE_NEWNS | CLONE_NEWIPC)
            # This process is in the new PID namespace: the /proc it mounts shows that namespace.
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        become_worker(spawn, fds, config)
    except BaseException as error:  # noqa: BLE001
        try:
            import traceback
            os.write(2, f"worker setup failed: {error!r} {traceback.format_exc()[-600:]}\n".encode())
        finally:
            os._exit(70)
    os._exit(0)


def _descendants_kill(root_pid: int) -> None:
    """Fallback without namespaces: kill every process below ``root_pid`` (a subreaper)."""
    for _ in range(50):
        children = [p.pid for p in procs.live_processes() if p.ppid == root_pid]
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


def zygote(config_path: str) -> None:
    # No collection while torch and its meta kernels import: each import adds objects that live
    # as long as the zygote, and the collections they set off cost 0.4 s of a 1.8 s start-up.
    # They are frozen below instead, garbage and all (a few MB, shared by every worker).
    gc.disable()
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    sys.path[:] = [config["lib"], *sys.path[1:], *config["site_dirs"]]
    sock = socket.socket(fileno=int(config["socket_fd"]))
    sock.set_inheritable(False)  # (passed from the host): no namespace's init holds it
    if not config["namespaces"]:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    os.chdir(config["lib"])
    import torch  # imported once, before any fork; no torch op computes here

    # The first meta-device ops import torch's meta kernels and, for some, torch._dynamo (0.5 s).
    # Done here, before the first fork and the freeze below, every worker inherits them, shared
    # and frozen; warmed after the first fork, the first worker imported them a second time and
    # no collection skipped them. Without namespaces it is needed besides: a worker's uid may be
    # unable to read the Python install (under /root, say). It computes nothing and starts no
    # thread, so forking stays safe.
    meta = torch.empty(1, device="meta")
    meta.amax(-1), torch.isfinite(meta)
    del meta

    # What every worker needs, imported once here (after the fork, its uid may not reach the
    # files): the subject, and as this module's globals the protocol, transport, rlimit,
    # Landlock and /proc helpers.
    global limits, procs, landlock, protocol, transport
    from autograder.core import enforce, protocol, subject  # noqa: F401
    from autograder.sandbox.inside import landlock, limits, procs, transport

    # The checking kernels, registered once here: every worker inherits them.
    enforce.install({k: tuple(v) for k, v in config["kernels"].items()})

    gc.freeze()
    gc.enable()

    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY) if config["namespaces"] else -1
    devnull = os.open(os.devnull, os.O_RDWR)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    buffers = {sock: b""}  # each grader connection -> what it sent that is not a whole line yet
    # Each connection's received descriptors, oldest first, for the lines that carry some (spawn,
    # attach). They arrive with the first byte of their line, but one read may also hold lines
    # before it ("kill" then "spawn"): they are taken in order by the lines that need them.
    passed: dict[socket.socket, list[list[int]]] = {sock: []}
    # Each pid not reaped yet of a worker (its own, its namespace's init's) -> the worker's entry:
    # [its connection, its worker id, its pid, its pids not reaped yet, its wait status once reaped].
    workers: dict[int, list] = {}

    def send(conn: socket.socket, message: dict) -> None:
        try:
            conn.sendall(json.dumps(message).encode() + b"\n")
        except OSError:  # an attached grader that went away
            pass

    def reap() -> None:
        """Reap what ended. A worker's exit is sent once its init is reaped too: by then the
        kernel has killed every process of its namespace."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            entry = workers.pop(pid, None)
            if entry is None:
                continue
            conn, wid, worker, pids, _ = entry
            if pid == worker:
                entry[4] = status
            pids.remove(pid)
            for each in pids:  # one of the two ended: end the other (a pid not reaped is still ours)
                try:
                    os.kill(each, signal.SIGKILL)
                except OSError:
                    pass
            if not pids:
                send(conn, {"event": "exit", "id": wid, "status": entry[4]})

    def kill(conn: socket.socket, wid: int | None) -> None:
        """Kill ``conn``'s worker ``wid`` (None: all of its workers)."""
        for pid, (owner, each, *_) in list(workers.items()):
            if owner is conn and wid in (None, each):
                try:
                    if config["namespaces"]:
                        os.kill(pid, signal.SIGKILL)  # the worker, or its init: either ends it
                    else:
                        os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        reap()

    def serve_one(conn: socket.socket) -> bool:
        """Read and act on what ``conn`` sent; False once the grader's own connection closed."""
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 8)
        except InterruptedError:
            return True
        except OSError:
            data, fds = b"", []
        if fds:
            for fd in fds:
                os.set_inheritable(fd, False)  # the worker gets them by fork; no init or exec'd program does
            passed[conn].append(fds)
        if not data:
            if conn is sock:
                return False  # the grader went away
            kill(conn, None)  # an attached grading process went away: so do its workers
            for each in passed.pop(conn):
                for fd in each:
                    os.close(fd)
            del buffers[conn]
            conn.close()
            return True
        buffers[conn] += data
        while b"\n" in buffers[conn]:
            line, buffers[conn] = buffers[conn].split(b"\n", 1)
            message = json.loads(line)
            if message["op"] in ("attach", "spawn"):
                serve_passing(conn, message, passed[conn].pop(0) if passed[conn] else [])
            elif message["op"] == "kill":
                kill(conn, message["id"])
        return True

    def serve_passing(conn: socket.socket, message: dict, fds: list[int]) -> None:
        """An attach or spawn, with the descriptors sent along with it (closed here once used)."""
        if message["op"] == "attach" and conn is sock and len(fds) == 1:
            attached = socket.socket(fileno=fds.pop())
            buffers[attached], passed[attached] = b"", []
            send(attached, {"event": "ready", "pid": os.getpid()})
        elif message["op"] == "spawn":
            spawn = message["spawn"]
            uid = spawn.get("uid")
            if len(fds) < 3 or uid is not None and not (config["uid_min"] <= uid < config["uid_max"]):
                send(conn, {"event": "exit", "id": spawn["id"], "status": 70 << 8})
            else:
                try:
                    pids = spawn_worker(spawn, fds, config, list(buffers), own_pid_ns, devnull)
                except OSError:  # (no fork: the machine is out of processes or memory)
                    send(conn, {"event": "exit", "id": spawn["id"], "status": 70 << 8})
                else:
                    entry = [conn, spawn["id"], pids[0], pids, None]
                    workers.update(dict.fromkeys(pids, entry))
        for fd in fds:
            os.close(fd)

    send(sock, {"event": "ready", "pid": os.getpid()})
    import select

    while True:
        ready, _, _ = select.select([*buffers, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            reap()
        if not all(serve_one(conn) for conn in ready if conn in buffers):
            break
    if not config["namespaces"]:
        _descendants_kill(os.getpid())
    os._exit(0)


if __name__ == "__main__":
    zygote(sys.argv[1])
