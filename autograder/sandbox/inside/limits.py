"""A worker's resource limits: chosen on the host (:func:`rlimits`), set inside the box (:func:`apply`).

The values are the course's (``course.limits``, :mod:`autograder.core.settings`), chosen on the
host and carried to the box in the worker's spawn; only the CPU grace is the box's own, and so
always the default (the spawn does not carry it).
"""
from __future__ import annotations

import resource

from autograder.core.settings import DEFAULTS, Limits


def rlimits(cpu_seconds: int, own_uid: bool, limits: Limits = DEFAULTS) -> dict[str, int]:
    """``RLIMIT_*`` name -> value for one worker."""
    chosen = {
        "RLIMIT_CPU": cpu_seconds,
        "RLIMIT_FSIZE": limits.worker_file_size,
        "RLIMIT_NOFILE": limits.worker_open_files,
        "RLIMIT_CORE": 0,
    }
    if own_uid:
        chosen["RLIMIT_NPROC"] = limits.worker_processes  # counted per uid, threads included: only meaningful for a dedicated one
    # CUDA reserves a huge virtual address space: an address-space cap would break it.
    import torch

    if not torch.cuda.is_available():
        chosen["RLIMIT_AS"] = limits.worker_address_space
    return chosen


def apply(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        # Between SIGXCPU (the soft limit) and SIGKILL (the hard one): the box's default.
        hard = value + DEFAULTS.cpu_grace if name == "RLIMIT_CPU" else value
        resource.setrlimit(getattr(resource, name), (value, hard))
