"""Hostile: leave System V shared memory, a message queue and a semaphore set behind
(they outlive the process that made them unless its IPC namespace dies), each given away
to another owner with IPC_SET: only the creator's uid, which cannot be changed, names them."""
import ctypes

import torch

KEY = 987654321  # tests rewrite it per run and look for it after grading
IPC_CREAT, IPC_SET, IPC_STAT = 0o1000, 1, 2
NOBODY = 65534
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]


def give_away(ident, control):
    buffer = ctypes.create_string_buffer(512)  # a shmid_ds, msqid_ds or semid_ds: each starts with its ipc_perm
    if ident >= 0 and control(ident, IPC_STAT, buffer) == 0:
        ctypes.c_uint32.from_buffer(buffer, 4).value = NOBODY  # ipc_perm.uid, after the key
        control(ident, IPC_SET, buffer)


give_away(_libc.shmget(KEY, 1 << 20, IPC_CREAT | 0o666), _libc.shmctl)
give_away(_libc.msgget(KEY, IPC_CREAT | 0o666), _libc.msgctl)
give_away(_libc.semget(KEY, 4, IPC_CREAT | 0o666), lambda ident, command, buffer: _libc.semctl(ident, 0, command, buffer))


def softmax(x, dim=-1):
    return torch.zeros_like(x)
