"""The zygote forked from the grader: what the child undoes of the grader before it serves.

In container and plain modes on a hosted platform, the zygote is a child of the grading process
(:mod:`autograder.sandbox.forked`) instead of a fresh ``python -I -S zygote.py``: torch, its meta
kernels and the worker's modules are then in memory once, their pages shared by the grader, the
zygote and each worker (Gradescope's memory limit counts them all). The grader forks before it
has read anything a student may not see, so the child's memory holds nothing of that; what it
still holds of the grader is undone here, to what a fresh zygote has: the process (its own
session, killed with the grader, no descriptor but its socket), the environment, the signals,
the import path (the box's copy of the engine, never the grader's tree), the exit handlers, the
builtins ``site`` adds, and torch's threads (one, as ``OMP_NUM_THREADS=1`` gives a fresh one).
"""
from __future__ import annotations

import atexit
import builtins
import fcntl
import os
import signal
import sys
import traceback
from typing import NoReturn

from autograder.sandbox.inside import syscalls, zygote

SITE_BUILTINS = ("exit", "quit", "help", "copyright", "credits", "license")  # what -S leaves out


def become_zygote(config: dict, sock_fd: int, log_fd: int, grader: int) -> NoReturn:
    """In the child just forked from ``grader`` (its pid): reset, then serve as the zygote."""
    try:
        sock_fd = _own_process(sock_fd, log_fd, grader)
        _fresh_interpreter(config)
        import socket

        sock = socket.socket(fileno=sock_fd)
        sock.set_inheritable(False)
        zygote.serve(config, sock)
    except BaseException:
        traceback.print_exc()  # into the zygote's log, which the pool reports
    finally:
        os._exit(70)  # never back into the grader's frames


def _own_process(sock_fd: int, log_fd: int, grader: int) -> int:
    """Its own session, killed with the grader, with /dev/null, the log and the socket its only
    descriptors (a fresh zygote's, as the pool starts one); returns the socket's."""
    os.setsid()
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != grader:  # it ended before the line above: nothing would kill us with it
        os._exit(0)
    # Above 2 first, so that setting 0, 1 and 2 can overwrite neither (a grader started without them).
    sock_fd, log_fd = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) for fd in (sock_fd, log_fd))
    devnull = os.open(os.devnull, os.O_RDWR)
    for target, fd in ((0, devnull), (1, log_fd), (2, log_fd)):
        os.dup2(fd, target)
    os.closerange(3, sock_fd)  # the grader's files, sockets and locks: only the zygote's socket stays
    os.closerange(sock_fd + 1, os.sysconf("SC_OPEN_MAX"))
    # The grader's own handlers go; what it inherited (an ignored signal) stays, as across an exec.
    for number in signal.valid_signals():
        if callable(signal.getsignal(number)):
            signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # what Python gives a fresh interpreter
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.set_wakeup_fd(-1)
    return sock_fd


def _fresh_interpreter(config: dict) -> None:
    atexit._clear()  # the grader's exit handlers (its temporary folders' removal) are not the zygote's
    os.environ.clear()
    os.environ.update(config["environment"])
    # The import path of ``python -I -S`` (the standard library alone), the box's copy of the
    # engine before it, the packages torch needs after it; the engine's packages, imported from
    # the grader's tree, find what they import later in the box's copy.
    stdlib = [p for p in sys.path if p.startswith(sys.base_prefix) and "-packages" not in p]
    sys.path[:] = [config["lib"], *stdlib, *config["site_dirs"]]
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "autograder" and hasattr(module, "__path__"):
            module.__path__ = [os.path.join(config["lib"], *name.split("."))]
    sys.path_importer_cache.clear()
    sys.argv = [os.path.join(config["lib"], "autograder", "sandbox", "inside", "zygote.py")]
    sys.dont_write_bytecode = True  # (PYTHONDONTWRITEBYTECODE=1 in a fresh zygote's environment)
    for name in SITE_BUILTINS:
        builtins.__dict__.pop(name, None)
    import torch

    torch.set_num_threads(1)
    syscalls.mallopt(syscalls.M_ARENA_MAX, 2)  # (MALLOC_ARENA_MAX=2 in a fresh zygote's environment)
