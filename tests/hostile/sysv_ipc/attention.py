"""Hostile: leave System V shared memory, a message queue and a semaphore set behind
(they outlive the process that made them unless its IPC namespace dies)."""
import ctypes

import torch

KEY = 987654321  # tests rewrite it per run and look for it after grading
IPC_CREAT = 0o1000
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
_libc.shmget(KEY, 1 << 20, IPC_CREAT | 0o666)
_libc.msgget(KEY, IPC_CREAT | 0o666)
_libc.semget(KEY, 4, IPC_CREAT | 0o666)


def softmax(x, dim=-1):
    return torch.zeros_like(x)
