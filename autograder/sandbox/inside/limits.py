"""A worker's resource limits: chosen on the host (:func:`rlimits`), set inside the box (:func:`apply`)."""
from __future__ import annotations

import resource

CPU_GRACE = 5  # seconds between SIGXCPU (the soft limit) and SIGKILL (the hard one)


def rlimits(cpu_seconds: int, own_uid: bool) -> dict[str, int]:
    """``RLIMIT_*`` name -> value for one worker."""
    limits = {
        "RLIMIT_CPU": cpu_seconds,
        "RLIMIT_FSIZE": 64 << 20,
        "RLIMIT_NOFILE": 256,
        "RLIMIT_CORE": 0,
    }
    if own_uid:
        limits["RLIMIT_NPROC"] = 128  # counted per uid, threads included: only meaningful for a dedicated one
    # CUDA reserves a huge virtual address space: an address-space cap would break it.
    import torch

    if not torch.cuda.is_available():
        limits["RLIMIT_AS"] = 4 << 30
    return limits


def apply(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        hard = value + CPU_GRACE if name == "RLIMIT_CPU" else value
        resource.setrlimit(getattr(resource, name), (value, hard))
