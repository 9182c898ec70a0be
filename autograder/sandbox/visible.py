"""What a worker without namespaces may open: its Landlock rules (``sandbox/inside/landlock.py``).

The same as full mode's binds: the system folders, the Python install, each
package torch needs (never a whole site-packages) and the worker runtime; the
worker adds its own box (read and write) and its unit's stand-ins. A Landlock
rule allows everything beneath a folder and nothing can be taken back below
it, so a folder that holds what must stay hidden (a site-packages, the course)
is allowed child by child around it.
"""
from __future__ import annotations

import os
from pathlib import Path

DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")  # read and written
KERNEL = ("/proc", "/sys")  # read: torch and Python ask them about the CPU and the process


def around(roots: list[str], hidden: list[str]) -> list[str]:
    """Folders and files that together hold everything in ``roots`` except what is in ``hidden``.

    Paths are resolved first (``/lib`` may be a link to ``/usr/lib``): a rule
    applies to what a path leads to. A root that lies inside a hidden folder
    is kept whole (the Python install under the course folder, say).
    """
    hide = {Path(os.path.realpath(h)) for h in hidden}
    found: list[str] = []
    seen: set[Path] = set()

    def walk(path: Path, hide_here: set[Path]) -> None:
        if path in seen or not path.exists():
            return
        seen.add(path)
        if path in hide_here:
            return
        below = {h for h in hide_here if h.is_relative_to(path)}
        if not below or not path.is_dir():
            found.append(str(path))
            return
        try:
            children = sorted(path.iterdir())
        except OSError:  # a folder the grader cannot list: nothing in it is allowed
            return
        for child in children:
            walk(Path(os.path.realpath(child)), hide_here)

    for root in roots:
        real = Path(os.path.realpath(root))
        walk(real, {h for h in hide if not real.is_relative_to(h)})
    return found


def rules(roots: list[str], sites: list[str], packages: dict[str, list[str]], runtime: str,
          hidden: list[str]) -> dict[str, list[str]]:
    """The zygote's Landlock lists: ``read``, ``list`` (names only) and ``devices``.

    ``sites`` are the site-packages folders: a worker reads only the entries
    ``packages`` names in them, and may list them, as Python's import system
    does for every folder on ``sys.path`` (so names below them show, never
    contents). ``hidden`` is what else must stay out of reach.
    """
    read = around([*roots, *KERNEL], [*sites, *hidden])
    read += [os.path.join(site, name) for site in sorted(packages) for name in packages[site]]
    return {"read": [*read, runtime], "list": sorted(sites), "devices": list(DEVICES)}
