"""The engine's limits, in one place: :class:`Limits`, its defaults, and course.toml's ``[limits]``.

Every limit the engine sets on a submission and on its own work (time budgets, memory caps,
output and upload sizes, time-outs) is one field of :class:`Limits`, with its type, its default
and what it bounds. A course overrides any of them in ``course.toml``'s ``[limits]`` table
(:meth:`Limits.from_table`, read by :func:`autograder.core.manifest.load_course`): the result is
``course.limits``, which every module that sets a limit reads, ``grade()`` included, so an
override reaches every grade. An unknown key, a value of the wrong type or one that is not
positive is refused, naming it.

Where a limit takes effect is the table's last column. "host": on the grading side, from the
course's value. "box": inside the sandbox (``autograder/sandbox/inside/``), which knows only
what its spawn and requests carry; a limit that they do not carry is the default there, whatever
the course says. ``docs/settings.md`` is this table (``python -m autograder.core.settings``
prints it; ``tests/project/test_settings.py`` fails when the two disagree).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, cast

from autograder.core.errors import UsageError

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def _limit(default: int | float, unit: str, doc: str, where: str = "host") -> Any:
    """A field of :class:`Limits`: its default, unit ("s", "bytes" or a count's noun), meaning and place."""
    return field(default=default, metadata={"unit": unit, "doc": doc, "where": where})


@dataclass(frozen=True)
class Limits:
    """The engine's limits; every field's default is the engine's own value (``docs/settings.md``)."""

    # -- time ---------------------------------------------------------------------------------
    call_timeout: float = _limit(10.0, "s", "one call into the submission, before it is interrupted "
                                            "(`grade --timeout` overrides it for one run)")
    timeouts_per_unit: int = _limit(2, "calls", "calls of one unit that may run into the call time-out before "
                                                "its further calls fail at once (an endless loop)",
                                    "host; box: the default (a worker counts its own calls too)")
    test_budget: float = _limit(30.0, "s", "one test's calls and imports, sandboxed, before its further calls fail")
    unit_budget: float = _limit(60.0, "s", "one unit of one submission, sandboxed, before its further calls fail")
    crashes_per_test: int = _limit(2, "workers", "worker losses in one test before its further calls fail at once")
    write_limit: float = _limit(10.0, "s", "a request's way to a worker, before the worker is stopped")
    sandbox_startup: float = _limit(120.0, "s", "the sandbox's zygote importing torch, and a new worker's "
                                                "first reply")
    cpu_grace: int = _limit(5, "s", "CPU time a worker keeps past its CPU-time limit (SIGXCPU) before SIGKILL",
                            "box")
    student_budget: float = _limit(1200.0, "s", "wall clock per student in a chunk of `grade-batch` before "
                                                "the chunk is killed (`--student-budget` overrides it)")
    prairielearn_timeout: int = _limit(300, "s", "PrairieLearn's grading job (its info.json; PrairieLearn's "
                                                 "ceiling is 600)")
    kernel_cpu: int = _limit(1800, "s", "CPU time of an nbgrader notebook's kernel")
    # -- memory and processes --------------------------------------------------------------------
    worker_memory: int = _limit(2 * GIB, "bytes", "a worker's memory cgroup (memfds and tmpfs files count too)")
    worker_address_space: int = _limit(4 * GIB, "bytes", "a worker's address space (RLIMIT_AS; none where "
                                                         "CUDA is available)")
    worker_file_size: int = _limit(64 * MIB, "bytes", "a file a worker writes (RLIMIT_FSIZE)")
    worker_open_files: int = _limit(256, "files", "a worker's open files (RLIMIT_NOFILE)")
    worker_processes: int = _limit(128, "processes", "processes and threads of a worker's own uid (RLIMIT_NPROC)")
    box_tmp: int = _limit(64 * MIB, "bytes", "the sandbox's /tmp, and each worker's own")
    kernel_address_space: int = _limit(6 * GIB, "bytes", "an nbgrader notebook kernel's address space")
    kernel_processes: int = _limit(512, "processes", "an nbgrader notebook kernel's processes")
    kernel_open_files: int = _limit(1024, "files", "an nbgrader notebook kernel's open files")
    kernel_file_size: int = _limit(64 * MIB, "bytes", "a file an nbgrader notebook kernel writes")
    # -- output ---------------------------------------------------------------------------------
    kept_output: int = _limit(64 * KIB, "bytes", "what a test's stdout and stderr keep (never graded)")
    flood: int = _limit(4 * MIB, "bytes", "what a test may print before its worker is stopped")
    # -- uploads --------------------------------------------------------------------------------
    upload_file_bytes: int = _limit(2 * MIB, "bytes", "one unit file of an upload")
    notebook_bytes: int = _limit(16 * MIB, "bytes", "one notebook handed in to nbgrader's `collect`")
    upload_zip_bytes: int = _limit(20 * MIB, "bytes", "what one zip's members add up to")
    upload_entries: int = _limit(10_000, "entries", "files and folders of one upload (a zip: members)")
    upload_depth: int = _limit(32, "folders", "folders below the top of an upload")
    copy_file_bytes: int = _limit(16 * MIB, "bytes", "one file copied into the sandbox from a submission folder")
    copy_bytes: int = _limit(48 * MIB, "bytes", "all files copied into the sandbox from a submission folder")

    @classmethod
    def from_table(cls, table: dict | None, where: str) -> "Limits":
        """The limits of a course.toml ``[limits]`` table (the defaults where it is absent); ``where``
        names the table in errors."""
        if table is None:
            return cls()
        if not isinstance(table, dict):
            raise UsageError(f"{where} must be a table of settings")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(table) - set(known))
        if unknown:
            raise UsageError(f"{where}: unknown setting(s) {', '.join(unknown)}; the settings are "
                             f"{', '.join(known)} (docs/settings.md)")
        values: dict[str, Any] = {}
        for name, value in table.items():
            kind = known[name].type
            if isinstance(value, bool) or not isinstance(value, int if kind == "int" else (int, float)):
                raise UsageError(f"{where}: {name} = {value!r} is not {'an integer' if kind == 'int' else 'a number'}")
            if not value > 0:
                raise UsageError(f"{where}: {name} = {value!r} must be positive")
            values[name] = value if kind == "int" else float(value)
        return cls(**values)


DEFAULTS = Limits()


def _shown(value: int | float, unit: str) -> str:
    if unit == "bytes":
        for size, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
            if value % size == 0:
                return f"{value} ({value // size} {name})"
    return f"{value:g}" if isinstance(value, float) else str(value)


def table() -> str:
    """The Markdown table of the settings (``docs/settings.md`` holds it)."""
    rows = ["| setting | type | default | unit | what it bounds | where |", "|---|---|---|---|---|---|"]
    for f in dataclasses.fields(Limits):
        meta, default = f.metadata, cast(int | float, f.default)  # every field of Limits has a default
        rows.append(f"| `{f.name}` | {f.type} | {_shown(default, meta['unit'])} | {meta['unit']} | "
                    f"{meta['doc']} | {meta['where']} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")
