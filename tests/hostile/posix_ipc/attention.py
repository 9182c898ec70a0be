"""Hostile: leave POSIX IPC objects behind: a message queue (kept by the kernel, not a file), a
shared memory object and a named semaphore (files in /dev/shm), and a folder tree in /dev/shm.
They outlive the process that made them unless its IPC namespace and its /dev/shm die with it."""
import ctypes
import os
import resource

import torch

MARK = "987654321"  # tests rewrite it per run and look for its names after grading
NAMES = {"queue": f"/attn-mq-{MARK}", "shm": f"/attn-shm-{MARK}", "semaphore": f"/attn-sem-{MARK}"}
# librt.so.1 holds them before glibc 2.34 and still resolves them after (from libc)
_rt = ctypes.CDLL("librt.so.1", use_errno=True)
_rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
_rt.shm_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint]
_rt.sem_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
_rt.sem_open.restype = ctypes.c_void_p


def leave_behind():
    try:  # a process with privileges lifts the cap on its queues' memory first
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
    _rt.mq_open(NAMES["queue"].encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
    fd = _rt.shm_open(NAMES["shm"].encode(), os.O_CREAT | os.O_RDWR, 0o600)
    if fd >= 0:
        os.ftruncate(fd, 1 << 20)
        os.close(fd)
    _rt.sem_open(NAMES["semaphore"].encode(), os.O_CREAT, 0o600, 1)
    try:  # deep enough that a recursive removal would fail
        folder = f"/dev/shm/attn-dir-{MARK}"
        os.makedirs(folder, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(1500):
            os.mkdir("d", 0o700, dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("kept", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd), "w") as handle:
            handle.write("x" * 4096)
        os.close(fd)
        os.chmod(folder, 0)  # and its owner's removal must make its way in
    except OSError:
        pass


leave_behind()


def softmax(x, dim=-1):
    leave_behind()
    return torch.zeros_like(x)
