"""The zygote, in the box: it imports torch once and forks one worker per (submission, unit).

Started by :class:`autograder.sandbox.pool.Pool` as ``python -I -S zygote.py CONFIG`` from a
private copy of the grader's package (no solutions, no tests, no course data), or forked from a
hosted platform's grader in a mode without namespaces (:mod:`autograder.sandbox.forked`); what each mode
hides is :mod:`autograder.sandbox.inside.worker`'s docstring. The zygote runs trusted code only
(it never imports student code nor reads a stand-in) and serves the grader over a Unix socket
(:mod:`autograder.sandbox.inside.zygote_channel`), which also carries each worker's pipes and its
cgroups' ``tasks`` files. The grader may attach more connections (one per grading process it
starts, :meth:`~autograder.sandbox.pool.Pool.attach`): each connection's workers are its own
(ids, kills, exit events), and they are killed when it closes; the zygote ends when the first
connection closes.
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn, cast

# Modules of the package, imported by main() once sys.path holds it (this file starts as a script).
if TYPE_CHECKING:
    from autograder.sandbox.inside import procs, syscalls, worker
    from autograder.sandbox.inside import zygote_channel as channel
else:
    channel = procs = syscalls = worker = None

# PID 1 of each worker's PID namespace: a shell waiting for a child, whose ``wait`` reaps any
# child, adopted ones too. Spawned, it costs an exec (``posix_spawn`` copies no page tables); a
# fork of the zygote (225 MB) cost 10 ms a process on the 2-core machine, copying page tables
# and unmapping them at its exit.
INIT = ["sh", "-c", "sleep 2147483647 & wait"]


@dataclass
class Worker:
    """One worker as the zygote tracks it until its exit is sent."""

    conn: socket.socket  # the grader connection that spawned it
    id: int  # its id on that connection
    pid: int  # the worker's own pid
    unreaped: list[int]  # its pids not reaped yet: its own, and (with namespaces) its namespace's init
    status: int | None = None  # its wait status, once reaped


@dataclass
class Connection:
    """A grader connection: what it sent that is not a whole line yet, and the descriptors it
    passed, oldest first, for the lines that carry some (spawn, attach). They arrive with the
    first byte of their line, but one read may also hold lines before it ("kill" then "spawn"):
    they are taken in order by the lines that need them."""

    buffer: bytes = b""
    passed: list[list[int]] = field(default_factory=list)


class Zygote:
    def __init__(self, config: dict, sock: socket.socket):
        self.config, self.sock = config, sock
        self.namespaces = config["namespaces"]
        self.own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY) if self.namespaces else -1
        self.devnull = os.open(os.devnull, os.O_RDWR)
        self.connections: dict[socket.socket, Connection] = {sock: Connection()}
        self.workers: dict[int, Worker] = {}  # each pid not reaped yet of a worker -> the worker

    def send(self, conn: socket.socket, message) -> None:
        try:
            conn.sendall(channel.encode(message))
        except OSError:  # an attached grader that went away
            pass

    def serve(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.send(self.sock, channel.Ready(os.getpid()))
        while True:
            ready, _, _ = select.select(cast("list[socket.socket | int]", [*self.connections, wake_r]), [], [])
            if wake_r in ready:
                os.read(wake_r, 4096)
                self.reap()
            if not all(self.serve_one(conn) for conn in ready if conn in self.connections):
                break
        if not self.namespaces:
            _descendants_kill(os.getpid())

    def reap(self) -> None:
        """Reap what ended. A worker's exit is sent once its init is reaped too: by then the
        kernel has killed every process of its namespace."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            entry = self.workers.pop(pid, None)
            if entry is None:
                continue
            if pid == entry.pid:
                entry.status = status
            entry.unreaped.remove(pid)
            for each in entry.unreaped:  # one of the two ended: end the other (a pid not reaped is still ours)
                try:
                    os.kill(each, signal.SIGKILL)
                except OSError:
                    pass
            if not entry.unreaped:  # its own pid among them: its status is set
                self.send(entry.conn, channel.Exit(entry.id, cast(int, entry.status)))

    def kill(self, conn: socket.socket, wid: int | None) -> None:
        """Kill ``conn``'s worker ``wid`` (None: all of its workers)."""
        for pid, entry in list(self.workers.items()):
            if entry.conn is conn and wid in (None, entry.id):
                try:
                    if self.namespaces:
                        os.kill(pid, signal.SIGKILL)  # the worker, or its init: either ends it
                    else:
                        os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.reap()

    def serve_one(self, conn: socket.socket) -> bool:
        """Read and act on what ``conn`` sent; False once the grader's own connection closed."""
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 8)
        except InterruptedError:
            return True
        except OSError:
            data, fds = b"", []
        state = self.connections[conn]
        if fds:
            for fd in fds:
                os.set_inheritable(fd, False)  # the worker gets them by fork; no init or exec'd program does
            state.passed.append(fds)
        if not data:
            if conn is self.sock:
                return False  # the grader went away
            self.kill(conn, None)  # an attached grading process went away: so do its workers
            for each in state.passed:
                for fd in each:
                    os.close(fd)
            del self.connections[conn]
            conn.close()
            return True
        state.buffer += data
        while b"\n" in state.buffer:
            line, state.buffer = state.buffer.split(b"\n", 1)
            request = channel.decode_request(line)
            if isinstance(request, (channel.Attach, channel.Spawn)):
                self.serve_passing(conn, request, state.passed.pop(0) if state.passed else [])
            elif isinstance(request, channel.Kill):
                self.kill(conn, request.id)
        return True

    def serve_passing(self, conn: socket.socket, request, fds: list[int]) -> None:
        """An attach or spawn, with the descriptors sent along with it (closed here once used)."""
        if isinstance(request, channel.Attach) and conn is self.sock and len(fds) == 1:
            attached = socket.socket(fileno=fds.pop())
            self.connections[attached] = Connection()
            self.send(attached, channel.Ready(os.getpid()))
        elif isinstance(request, channel.Spawn):
            uid = request.spec.get("uid")
            if len(fds) < 3 or uid is not None and not (self.config["uid_min"] <= uid < self.config["uid_max"]):
                self.send(conn, channel.Exit(request.id, 70 << 8))
            else:
                try:
                    pids = self.spawn_worker(request.spec, fds)
                except OSError:  # (no fork: the machine is out of processes or memory)
                    self.send(conn, channel.Exit(request.id, 70 << 8))
                else:
                    entry = Worker(conn, request.id, pids[0], pids)
                    self.workers.update(dict.fromkeys(pids, entry))
        for fd in fds:
            os.close(fd)

    def spawn_worker(self, spawn: dict, fds: list[int]) -> list[int]:
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
        if self.namespaces:
            syscalls.unshare(syscalls.CLONE_NEWPID)
        try:
            if self.namespaces:
                pids.append(os.posix_spawn("/bin/sh", INIT, {"PATH": "/usr/bin:/bin"}, setsid=True,
                                           file_actions=[(os.POSIX_SPAWN_DUP2, self.devnull, fd) for fd in (0, 1, 2)]))
            pid = os.fork()
            if not pid:
                worker.run(spawn, fds, self.config, list(self.connections))
        except OSError:
            for each in pids:
                os.kill(each, signal.SIGKILL)
            raise
        finally:
            if self.namespaces:
                syscalls.setns(self.own_pid_ns, syscalls.CLONE_NEWPID)
        return [pid, *pids]


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


def preload() -> None:
    """Import what every worker needs, once, before the first fork: torch, its meta kernels, and
    the worker with what it imports. A zygote started as a fresh interpreter calls it itself; one
    forked from the grader (:mod:`autograder.sandbox.forked`) finds it done there, pages shared."""
    global channel, procs, syscalls, worker
    import torch  # no torch op computes here

    # The first meta-device ops import torch's meta kernels and, for some, torch._dynamo (0.5 s).
    # Done here, before the first fork and the freeze below, every worker inherits them, shared
    # and frozen; warmed after the first fork, the first worker imported them a second time and
    # no collection skipped them. Without namespaces it is needed besides: a worker's uid may be
    # unable to read the Python install (under /root, say). It computes nothing and starts no
    # thread, so forking stays safe.
    meta = torch.empty(1, device="meta")
    meta.amax(-1), torch.isfinite(meta)
    del meta

    # What every worker needs (after the fork, its uid may not reach the files): the worker with
    # what it imports (the subject, the protocol, transport, rlimit and Landlock helpers), and
    # this file's channel and /proc reader.
    from autograder.trust import enforce, subject  # noqa: F401
    from autograder.sandbox.inside import procs, syscalls, worker
    from autograder.sandbox.inside import zygote_channel as channel


def serve(config: dict, sock: socket.socket) -> NoReturn:
    """Be the zygote (after :func:`preload`, in the zygote's own process) until the grader goes."""
    from autograder.trust import enforce

    if not config["namespaces"]:
        syscalls.prctl(syscalls.PR_SET_CHILD_SUBREAPER, 1)
    os.chdir(config["lib"])
    # The checking kernels, registered once here: every worker inherits them.
    enforce.install({k: tuple(v) for k, v in config["kernels"].items()})
    gc.freeze()
    gc.enable()
    Zygote(config, sock).serve()
    os._exit(0)


def main(config_path: str) -> None:
    """The zygote as a fresh interpreter (``python -I -S zygote.py CONFIG``, under bwrap in full mode)."""
    # No collection while torch and its meta kernels import: each import adds objects that live
    # as long as the zygote, and the collections they set off cost 0.4 s of a 1.8 s start-up.
    # They are frozen in serve() instead, garbage and all (a few MB, shared by every worker).
    gc.disable()
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    sys.path[:] = [config["lib"], *sys.path[1:], *config["site_dirs"]]
    sock = socket.socket(fileno=int(config["socket_fd"]))
    sock.set_inheritable(False)  # (passed from the host): no namespace's init holds it
    preload()
    serve(config, sock)


if __name__ == "__main__":
    main(sys.argv[1])
