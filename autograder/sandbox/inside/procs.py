"""The one reader of ``/proc``: who is alive, as whom, below whom."""
from __future__ import annotations

import os
from typing import NamedTuple


class Process(NamedTuple):
    pid: int
    uid: int  # real uid
    ppid: int


def live_processes() -> list[Process]:
    """Every process this PID namespace shows, zombies left out."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                text = handle.read()
        except OSError:
            continue  # gone meanwhile
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        try:
            if fields["State"].strip().startswith("Z"):
                continue
            found.append(Process(int(entry), int(fields["Uid"].split()[0]), int(fields["PPid"])))
        except (KeyError, ValueError, IndexError):
            continue
    return found
