"""Hostile: hoard memory in memfds, which an address-space limit does not count."""
import os

import torch

HOARD = 1 << 30  # bytes; more than the test's memory cgroup allows
_kept = []


def softmax(x, dim=-1):
    chunk = b"\1" * (16 << 20)
    for i in range(HOARD // len(chunk)):
        fd = os.memfd_create(f"hoard{i}")
        os.write(fd, chunk)
        _kept.append(fd)
    return torch.zeros_like(x)
