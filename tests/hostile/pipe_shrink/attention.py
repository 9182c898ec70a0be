"""Hostile: shrink the pipe the grader writes requests into to one page, keep it open,
and never read it again: a grader without write deadlines blocks forever on the
first request longer than a page."""
import fcntl
import os
import stat

import torch

F_SETPIPE_SZ = 1031


def _jam():
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd < 3 or not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
                continue
            fcntl.fcntl(fd, F_SETPIPE_SZ, 4096)
            os.dup(fd)  # the old end stays open, unread
            stuck_r, _stuck_w = os.pipe()
            os.dup2(stuck_r, fd)  # the worker now waits on a pipe nobody writes
        except OSError:
            pass


_jam()


def softmax(x, dim=-1):
    return torch.zeros_like(x)
