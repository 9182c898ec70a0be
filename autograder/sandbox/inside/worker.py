"""One worker, in the box: forked by the zygote (:mod:`autograder.sandbox.inside.zygote`) for one
(submission, unit), it isolates itself and serves that unit's calls (:func:`run`).

This file runs only inside the sandbox, from a private copy of the grader's
package (no solutions, no tests, no course data). What each mode hides:

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
  grader does (on a hosted platform, forked from it: :mod:`.from_grader`),
  workers switch uid where root allows (container) and, where
  the kernel has Landlock, restrict themselves to what full mode would show
  (``landlock.py``). What a worker's uid leaves in the host's IPC namespace
  and /dev/shm is removed by the grader once the worker has ended
  (``autograder/sandbox/ipc.py``, outside the box).

Each worker is forked from the zygote. In full mode it gets its own PID,
mount and IPC namespaces (once it ends, the zygote ends the namespace's
init, and with it every process the worker started; its System V objects
and POSIX message queues end with its IPC namespace), a size-capped tmpfs
for its box (a copy of its submission), /tmp and /dev/shm (where POSIX
shared memory and named semaphores live: they end with it), and sees only
its own unit's folder of stand-ins (the units that unit depends on, never
the unit's own) and none of the other submissions.
It joins its cgroups, drops to its uid, sets resource limits, and serves
Calls for its one unit with an :class:`~autograder.trust.subject.InProcessSubject`.
"""
from __future__ import annotations

import gc
import os
import shutil
import signal
import sys
from typing import cast

from autograder.core import protocol
from autograder.core.i18n import N_
from autograder.sandbox.inside import landlock, limits, syscalls, transport
from autograder.sandbox.inside import worker_channel as channel
from autograder.sandbox.inside.syscalls import MS_BIND, MS_NODEV, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC, MS_REMOUNT

BOX_BYTES, SHM_BYTES = 64 << 20, 16 << 20


# -- a worker's view of the file system (full mode) ----------------------------------

def _tmpfs(path: str, size: int, mode: int) -> None:
    syscalls.mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode:o}")


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
    syscalls.mount(None, "/", None, MS_REC | MS_PRIVATE)
    unit_fd = os.open(spawn["unit_dir"], os.O_PATH | os.O_DIRECTORY)
    _tmpfs(inside + "/box", BOX_BYTES, 0o700)
    _copy_tree(spawn["source"], inside + "/box")
    for folder in ("/subs", "/units"):  # the other submissions and the other workers' stand-ins
        _tmpfs(inside + folder, 4096, 0o755)
    syscalls.mount(f"/proc/self/fd/{unit_fd}", inside + "/unit", None, MS_BIND | MS_REC)
    syscalls.mount(None, inside + "/unit", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.close(unit_fd)
    # A /tmp of its own; what the zygote imports from below /tmp (a venv there) is bound back.
    held = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in config["under_tmp"]}
    _tmpfs("/tmp", config["tmp_bytes"], 0o1777)
    for path, fd in sorted(held.items()):
        os.makedirs(path, mode=0o755, exist_ok=True)
        syscalls.mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        syscalls.mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
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
            os.sched_setaffinity(0, {spawn["cpu"]})  # the CPU of the grader's thread: see resources.CpuLease
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
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)
    box = spawn["box"]
    uid = spawn.get("uid")
    if config.get("landlock"):
        # Before the uid switch: as root, every listed path can still be opened to make its rule.
        syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
        rules = config["landlock"]
        landlock.restrict([*rules["read"], spawn["unit_dir"]], [box, *rules["devices"]], rules["list"])
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root: every capability set is cleared
    elif config["namespaces"]:
        syscalls.drop_capabilities()
    os.chdir(box)  # (its own uid's, 0700)
    syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
    limits.apply(spawn["limits"])
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    os.environ.update({"HOME": box, "TMPDIR": box})
    serve(req_fd, rep_fd, box, spawn, config)


def _course(config: dict, spawn: dict):
    from pathlib import Path

    from autograder.core.manifest import CourseUnits, Rules, Unit

    lib = Path(spawn["unit_dir"] if not config["namespaces"] else config["inside"] + "/unit")
    units = {u["name"]: Unit(u["name"], u["title"], u["file"], tuple(u["forbidden"]), dict(u["stand_ins"]),
                             tuple(u["kernels"]), {k: tuple(v) for k, v in u["stand_ins_for"].items()},
                             handed=u["handed"])
             for u in config["units"]}
    missing = lib / "absent"
    rules = Rules(**{k: tuple(v) for k, v in spawn["rules"].items()}) if spawn["rules"] else None
    return CourseUnits(root=lib, name=config["course_name"], units=units, solutions=missing, assignments=missing,
                  hidden_tests=missing, public_tests=missing, rules=rules,
                  kernels={k: tuple(v) for k, v in config["kernels"].items()})


OUT_OF_MEMORY = ("can't allocate memory", "CUDA out of memory", "out of memory")


def _mapped(error, limits: dict):
    """Name running out of memory for what it is."""
    if error.kind == "MemoryError" or (error.kind in ("RuntimeError", "OutOfMemoryError")
                                       and any(s in error.message for s in OUT_OF_MEMORY)):
        limit = limits.get("RLIMIT_AS")
        text = (N_("the worker ran out of memory (its limit is {gib:g} GiB)").format(gib=limit / 2**30) if limit
                else N_("the worker ran out of memory"))
        return protocol.StudentError(protocol.Failure.CRASHED, text, error.where)
    return error


def serve(req_fd: int, rep_fd: int, box: str, spawn: dict, config: dict) -> None:
    from pathlib import Path

    from autograder.trust.subject import CallTimeout, InProcessSubject

    from autograder.trust import enforce

    course = _course(config, spawn)
    unit = course.units[spawn["unit"]]
    # Before any of the unit's code runs, for this process's whole life: its kernel families raise for
    # everyone, and torch's Python implementations of what it may not call do not exist.
    enforce.remove(unit.kernels)
    enforce.erase(unit.forbidden, course.rules.erase if course.rules else ())
    inner = InProcessSubject(course, Path(box), isolate=spawn["isolate"], timeout=spawn["timeout"])
    limits = spawn["limits"]
    test = None

    def send(frame: bytes) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - the submission may have replaced the streams
                pass
        transport.write_all(rep_fd, frame)

    def reply(message) -> None:
        send(transport.pack(message.header()))

    def seen(unit: str) -> list[str]:
        return sorted(inner.runtime_uses(unit))

    reply(channel.Ready(os.getpid()))
    requests = transport.FrameReader()
    while True:
        try:
            header, values = transport.read_frame(req_fd, requests, devices=True)
        except EOFError:
            os._exit(0)
        request = channel.Request.decode(header)
        if request.test != test:
            test = request.test
            inner.begin(cast(str, test))  # (the grader names a test once one has begun)
        if request.op == channel.Op.STATUS:
            unit = cast(str, request.unit)  # a status request's: the spawn's unit, checked below
            if unit != spawn["unit"]:
                os._exit(70)  # a worker serves one unit only: its view holds that unit's stand-ins
            try:
                problem = inner.status(unit)
            except CallTimeout as error:
                problem = f"importing {inner.course.units[unit].file} {error}"
                inner._errors[unit] = problem
            gc.collect()
            gc.freeze()  # what the unit's import left is permanent: later collections stay cheap
            reply(channel.Status(problem, seen(unit)))
        elif request.op == channel.Op.RUN:
            call = transport.call_from(values)
            if call.unit != spawn["unit"]:
                os._exit(70)
            send(_answer(inner, call, limits, seen))
        elif request.op == channel.Op.STOP:
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
            return transport.pack(channel.Answer(True, seen(call.unit)).header(), transport.result_values(result))
        except TypeError as why:
            error = protocol.StudentError(protocol.Failure.BAD_OUTPUT,
                                          N_("the output cannot be sent back: {problem}").format(problem=why))
    return transport.pack(channel.Answer(False, seen(call.unit), transport.error_header(error)).header())


# -- starting -------------------------------------------------------------------

def run(spawn: dict, fds: list[int], config: dict, conns) -> None:
    """In the forked child: become the worker; never return into the zygote's code."""
    try:
        for conn in conns:  # no worker ever holds a grader's connection
            conn.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)
        if config["namespaces"]:
            syscalls.unshare(syscalls.CLONE_NEWNS | syscalls.CLONE_NEWIPC)
            # This process is in the new PID namespace: the /proc it mounts shows that namespace.
            syscalls.mount("proc", "/proc", "proc", syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC)
        become_worker(spawn, fds, config)
    except BaseException as error:  # noqa: BLE001
        try:
            import traceback
            os.write(2, f"worker setup failed: {error!r} {traceback.format_exc()[-600:]}\n".encode())
        finally:
            os._exit(70)
    os._exit(0)
