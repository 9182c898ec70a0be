"""nbgrader's kernels in a sandbox: :class:`SandboxedKernelManager`.

Set as ``c.Execute.kernel_manager_class`` in the course's ``nbgrader_config.py``,
so every notebook nbgrader executes (a plain ``nbgrader autograde``; the course's
own pipeline executes none) runs its student code in an ipykernel started under bubblewrap:

* new user, mount, PID, network, IPC and UTS namespaces, a session of its own,
  and, when nbgrader runs as root, a dedicated uid (``setpriv``) with no
  capabilities; every process a cell starts dies with the kernel (it is in
  the kernel's PID namespace), so nothing outlives its notebook;
* a file tree of read-only binds only: the system, the Python install and
  virtual environment, the grader's package, the manifest, the public tests
  and the stand-ins of the notebook's own unit's dependencies. The course folder
  (``gradebook.db``, ``source/``, the other students' ``submitted/`` and
  ``autograded/`` notebooks), ``solutions/`` and the hidden tests are not there;
  the working folder and ``/tmp`` are small private tmpfs;
* resource limits (``prlimit``): address space, processes, files, CPU time.

Why a kernel manager and not "run each notebook in a worker and bring back its
JSON": nbgrader stays the one executing notebooks (its timeouts, interrupts,
LimitOutput and error reporting are unchanged); only the kernel process moves.
The kernel talks to nbgrader over ZeroMQ ``ipc`` sockets in a private folder
bound into the sandbox, since the sandbox has no network. Its verdict is
nbgrader's, so a kernel can still patch its own test cells: grades that count
come from :mod:`autograder.nbgrader.pipeline`, which grades outside any kernel.

Where bubblewrap cannot start (no user namespaces, e.g. in a container), the
kernel runs as a dedicated uid if nbgrader is root, and plainly otherwise,
with a warning on stderr; the README's threat model says what each mode hides.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import default

from autograder.core.manifest import MANIFEST, load_course
from autograder.core.settings import Limits
from autograder.sandbox.isolation import bwrap, isolation_mode, system_binds

KERNEL_UID = 3_300_000  # + pid % 100_000: a uid no account has, distinct from the grader's workers
SMALL_TMPFS = str(64 << 20)


def prlimit(limits: Limits) -> list[str]:
    """The kernel's resource limits, as a ``prlimit`` prefix: the course's ``kernel_*`` limits
    (course.toml ``[limits]``, :mod:`autograder.core.settings`), and no core dumps."""
    return ["prlimit", f"--as={limits.kernel_address_space}", f"--nproc={limits.kernel_processes}",
            f"--nofile={limits.kernel_open_files}", f"--fsize={limits.kernel_file_size}", f"--cpu={limits.kernel_cpu}",
            "--core=0", "--"]


def _above(paths) -> list[str]:
    """bwrap arguments making the folders above ``paths`` 0755 (bwrap's own are 0700),
    so the kernel's uid can walk to what is mounted there."""
    above = sorted({str(a) for p in paths for a in Path(p).parents if str(a) != "/"}, key=len)
    return [arg for folder in above for arg in ("--perms", "0755", "--dir", folder)]


def _binds(paths) -> list[str]:
    """Read-only binds at the same paths."""
    real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)})
    return _above(real) + [arg for path in real for arg in ("--ro-bind", path, path)]


class SandboxedKernelManager(AsyncKernelManager):
    """An (async, as nbclient uses) KernelManager whose kernel runs inside bubblewrap (see the module docstring)."""

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"  # the sandbox has no network; the sockets live in a folder bound into it

    async def _async_pre_start_kernel(self, **kw):
        self._private = Path(tempfile.mkdtemp(prefix="kernel-"))
        self.connection_file = str(self._private / "connection.json")
        self.ip = str(self._private / "ipc")
        if os.geteuid() == 0:
            os.chown(self._private, self._uid(), self._uid())
        assert self.kernel_spec is not None  # the kernel this manager was named for
        self.kernel_spec.interrupt_mode = "message"  # signals cannot cross into the kernel's own session
        return await super()._async_pre_start_kernel(**kw)

    @staticmethod
    def _uid() -> int:
        return KERNEL_UID + os.getpid() % 100_000

    def write_connection_file(self, **kwargs) -> None:
        super().write_connection_file(**kwargs)
        if os.geteuid() == 0:  # jupyter writes it 0600: the kernel's own uid must read it
            os.chown(self.connection_file, self._uid(), self._uid())

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        kernel = super().format_kernel_cmd(extra_arguments)
        limits = prlimit(load_course().limits)
        path = bwrap() if isolation_mode() == "full" else None  # the grader's own probe of what bwrap can do here
        if path is None:
            print("WARNING: bubblewrap cannot start here; the notebook kernel runs without a "
                  "sandbox and can read the course folder", file=sys.stderr)
            return limits + self._own_uid() + kernel
        if os.geteuid() == 0:
            # No user namespace as root: it would map only uid 0. bwrap mounts as root, then
            # keeps just the right to change uid, which setpriv uses and drops for good.
            namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                          "--cap-add", "CAP_SETUID,CAP_SETGID"]
        else:
            namespaces = ["--unshare-all"]
        return [*limits, path, *namespaces, *self._sandbox(), "--", *self._own_uid(), *kernel]

    def _own_uid(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        uid = str(self._uid())
        return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]

    def _sandbox(self) -> list[str]:
        course = load_course()
        assert self._launch_args is not None  # set by pre_start_kernel, before the launch
        cwd = str(self._launch_args.get("cwd") or os.getcwd())
        unit = course.units.get(Path(cwd).name)  # nbgrader runs a notebook in .../<assignment>, one per unit
        stand_ins = [course.root / rel for rel in (unit.stand_ins.values() if unit else ())]
        grader = Path(__file__).resolve().parent
        return [
            "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev", *system_binds(),
            "--size", SMALL_TMPFS, "--perms", "1777", "--tmpfs", "/tmp",  # first: binds may lie below it
            *_binds([sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
                     str(grader), str(course.root / MANIFEST), str(course.public_tests), *stand_ins]),
            *_above([self._private, cwd]),
            "--bind", str(self._private), str(self._private),  # the kernel's connection file and sockets
            "--size", SMALL_TMPFS, "--perms", "1777", "--tmpfs", cwd,
            "--chdir", cwd,
            "--setenv", "HOME", cwd, "--setenv", "AUTOGRADER_COURSE_ROOT", str(course.root),
            "--setenv", "MPLCONFIGDIR", "/tmp",
            # ipykernel exits when its parent's pid changes; in its own PID namespace the host's
            # pid means nothing (bwrap's --die-with-parent ties its life to nbgrader's instead).
            "--unsetenv", "JPY_PARENT_PID",
        ]

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart and getattr(self, "_private", None):
            shutil.rmtree(self._private, ignore_errors=True)
