"""IPC objects a worker leaves behind: found and removed by the trusted side once it has ended.

System V shared memory, message queues and semaphore sets, and POSIX message queues, belong
to an IPC namespace; POSIX shared memory objects and named semaphores (``sem.*``) are files in
/dev/shm. None of them ends with the process that made it.

Decision, per mode (:mod:`autograder.sandbox.inside.worker` says what each mode isolates):

* **full**: nothing to do. Each worker has its own IPC namespace, which takes its System V
  objects and its POSIX queues with it (the queues' file system belongs to the namespace,
  whatever is mounted at /dev/mqueue), and its own /dev/shm (a tmpfs of its own mount
  namespace). Measured: after grading, none is left in the host's namespace nor in its /dev/shm.
* **container** and **plain**: workers share the host's IPC namespace and /dev/shm, so the
  grader removes what the worker's uid made, in
  :meth:`~autograder.sandbox.host.SandboxSubject.stop_worker`, once the worker and what it
  started were killed (trusted code, after the fact: nothing the worker does can stop it):
  System V objects by their creator's uid (an owner can give an object away with ``IPC_SET``,
  never its creator's uid), queues and /dev/shm entries by their owner. Where a process of the
  worker's can outlive it (plain mode without cgroups: one in a session of its own lives until
  the zygote ends), what it makes later may stay. In container mode the uid is
  the worker's alone (leased), so all of it goes, and :class:`~autograder.sandbox.resources.UidLease`
  clears a uid when it takes it (what a killed grader left). In plain mode the worker has the
  grader's own uid: only what appeared during the worker's life goes (:func:`snapshot` when it
  starts), so another program of the same user that makes an object in that window loses it,
  the price of having no uid of its own.

System V objects are removed as their creator (in a child forked for it): root in a container
usually lacks CAP_SYS_ADMIN, which removing another's object needs. POSIX queues are no files:
they are listed through a mount of their file system, a detached one made for this process
(``fsopen``, where it may: never attached anywhere, so nothing is left to unmount), else the
one mounted at /dev/mqueue. Where neither exists (plain mode without /dev/mqueue), a worker
may not create any: its ``RLIMIT_MSGQUEUE`` is 0 (:func:`queues_visible`).
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
from typing import cast

SHM = "/dev/shm"
SYSV = {"shm": "shmid", "msg": "msqid", "sem": "semid"}  # /proc/sysvipc file -> its id column
IPC_RMID = 0
FSOPEN, FSCONFIG, FSMOUNT = 430, 431, 432  # the generic syscall table: the same on x86_64 and arm64
FSOPEN_CLOEXEC, FSCONFIG_CMD_CREATE, FSMOUNT_CLOEXEC = 1, 6, 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def snapshot(uid: int) -> frozenset[tuple]:
    """Every IPC object of ``uid``'s now: System V ones it created, queues and /dev/shm entries it owns."""
    found = set(_sysv(uid))
    for kind, folder in (("queue", _queues()), ("shm", _shm())):
        if folder is not None:
            found |= _owned(kind, folder, uid)
    return frozenset(found)


def remove(uid: int, before: frozenset[tuple] = frozenset()) -> None:
    """Remove ``uid``'s IPC objects (as :func:`snapshot` finds them) but those in ``before``.

    What cannot be removed stays (an object that went meanwhile, a refusal): never an error of
    grading.
    """
    left = snapshot(uid) - before
    if not left:
        return
    _remove_sysv(uid, sorted(o for o in left if o[0] == "sysv"))
    for kind, folder in (("queue", _queues()), ("shm", _shm())):
        for _, name, _ in sorted(o for o in left if o[0] == kind):
            try:
                try:
                    os.unlink(name, dir_fd=folder)
                except IsADirectoryError:
                    _remove_folder(cast(int, folder), name)  # (snapshot found it there: the folder is open)
            except OSError:
                pass


def queues_visible() -> bool:
    """Whether this process can list the POSIX queues of its IPC namespace (and so remove a worker's)."""
    return _queues() is not None


# -- finding them ------------------------------------------------------------------------------

def _sysv(uid: int) -> set[tuple]:
    """("sysv", kind, id) of each System V object ``uid`` created, in this IPC namespace."""
    found = set()
    for kind, column in SYSV.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as handle:
                header, *rows = [line.split() for line in handle]
        except (OSError, ValueError):  # a kernel without System V IPC
            continue
        ident, creator = header.index(column), header.index("cuid")
        found |= {("sysv", kind, int(row[ident])) for row in rows if row and int(row[creator]) == uid}
    return found


def _owned(kind: str, folder: int, uid: int) -> set[tuple]:
    """(kind, name, inode) of each entry of ``folder`` that ``uid`` owns (the inode tells a new one by the same name)."""
    found = set()
    for name in os.listdir(folder):
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except OSError:  # gone meanwhile
            continue
        if info.st_uid == uid:
            found.add((kind, name, info.st_ino))
    return found


@functools.cache
def _shm() -> int | None:
    """A descriptor of /dev/shm, kept for this process's life (None where there is none)."""
    try:
        return os.open(SHM, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


@functools.cache
def _queues() -> int | None:
    """A descriptor, kept for this process's life, of the folder of its IPC namespace's POSIX
    queues; None where there is none to be had."""
    fs = _libc.syscall(ctypes.c_long(FSOPEN), b"mqueue", ctypes.c_uint(FSOPEN_CLOEXEC))
    if fs >= 0:
        try:
            if _libc.syscall(ctypes.c_long(FSCONFIG), ctypes.c_int(fs), ctypes.c_uint(FSCONFIG_CMD_CREATE),
                             None, None, ctypes.c_int(0)) == 0:
                mount = _libc.syscall(ctypes.c_long(FSMOUNT), ctypes.c_int(fs), ctypes.c_uint(FSMOUNT_CLOEXEC),
                                      ctypes.c_uint(0))
                if mount >= 0:
                    try:  # the open folder keeps the detached mount alive
                        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=mount)
                    finally:
                        os.close(mount)
        finally:
            os.close(fs)
    for point in _mqueue_mounts():
        try:
            return os.open(point, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
    return None


def _mqueue_mounts() -> list[str]:
    """Where this mount namespace shows a queues' file system (/dev/mqueue, usually)."""
    try:
        with open("/proc/self/mountinfo") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields, _, after = line.partition(" - ")
        if after.split()[:1] == ["mqueue"]:
            found.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields.split()[4]))
    return found


# -- removing them -----------------------------------------------------------------------------

def _remove_sysv(uid: int, objects: list[tuple]) -> None:
    """``IPC_RMID`` each of ``objects`` as its creator ``uid``: from another uid, in a forked child."""
    if not objects:
        return
    if os.geteuid() == uid:
        _rmid(objects)
        return
    try:
        pid = os.fork()
    except OSError:
        return  # (no process to spare: the uid's next lease clears them)
    if not pid:
        try:
            os.setresuid(uid, uid, uid)
            _rmid(objects)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _rmid(objects: list[tuple]) -> None:
    for _, kind, ident in objects:
        if kind == "sem":
            _libc.semctl(ident, 0, IPC_RMID)
        else:
            (_libc.shmctl if kind == "shm" else _libc.msgctl)(ident, IPC_RMID, None)


def _remove_folder(parent: int, name: str) -> None:
    """Remove folder ``name`` of ``parent`` with all it holds, following no link and without
    recursion (the worker chose its depth): each sub-folder's entries move up into the folder
    itself, so no path ever grows."""
    top = _open_folder(parent, name)
    try:
        spare = 0
        while names := os.listdir(top):
            for entry in names:
                try:
                    os.unlink(entry, dir_fd=top)
                    continue
                except IsADirectoryError:
                    pass
                inner = _open_folder(top, entry)
                try:
                    for child in os.listdir(inner):
                        while _exists(top, str(spare)):
                            spare += 1
                        os.rename(child, str(spare), src_dir_fd=inner, dst_dir_fd=top)
                finally:
                    os.close(inner)
                os.rmdir(entry, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=parent)


def _open_folder(parent: int, name: str) -> int:
    """Folder ``name`` of ``parent`` (never a link), open for listing, made its owner's to list first."""
    path = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        os.chmod(f"/proc/self/fd/{path}", 0o700)  # (the worker may have taken its own rights away)
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=path)
    finally:
        os.close(path)


def _exists(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
