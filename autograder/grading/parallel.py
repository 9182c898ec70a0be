"""Grade several units at once: one grading process per group of units.

A grade's trusted side (hypothesis, the oracles, the checks) and the sandbox's
worker take turns on one core, so a grade of all the units leaves the other
cores idle. Each group here is the CLI's own ``grade --jobs 1`` of the same
folders on some of the units, in a fresh process that spawns its workers from
the caller's zygote (one zygote's start-up, about 1.3 CPU-s, instead of one per
process); the groups' JSON results are joined unit by unit, in course order. Hypothesis's
examples are a function of each test alone (derandomized), so a unit's result
does not depend on which process graded it or with which other units: the
joined result is the one a single process gives (``tests/project/test_cli.py``
compares them).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.core.results import GradeResult
from autograder.grading.errors import GraderError


def usable_cpus() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def groups(units: list[str], jobs: int) -> list[list[str]]:
    """``units`` dealt round-robin into at most ``jobs`` groups (a fixed rule: the same units
    share a process on every run; with the six units and two cores, 17.6 s against 15.7 s)."""
    jobs = max(1, min(jobs, len(units)))
    return [units[i::jobs] for i in range(jobs)]


def grade_in_groups(folders: list[Path], units: list[str], jobs: int, options: list[str],
                    pool=None) -> list[GradeResult]:
    """One result per folder, each of ``units`` (in course order) graded by its group's process.

    ``options`` are the ``grade`` options every process gets (``--timeout``, ``--seed``,
    ``--no-sandbox``). With ``pool`` (a sandbox's :class:`~autograder.sandbox.zygote.Pool`),
    every process spawns its workers from that one zygote. A process that fails fails the
    grade, with its own message.
    """
    with tempfile.TemporaryDirectory(prefix="attn-grade-") as tmp:
        running = []
        for i, group in enumerate(groups(units, jobs)):
            out = Path(tmp) / f"group{i}.json"
            command = [sys.executable, "-m", "autograder.cli", "grade", *map(str, folders),
                       *(arg for unit in group for arg in ("--unit", unit)), *options,
                       "--jobs", "1", "--format", "json", "-o", str(out)]
            log = open(Path(tmp) / f"group{i}.log", "w+", encoding="utf-8")  # a file: no pipe to fill
            streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": log}
            proc = (pool.popen_attached(command, dict(os.environ), **streams) if pool is not None
                    else subprocess.Popen(command, **streams))
            running.append((group, out, log, proc))
        try:
            parts = [_wait(group, out, log, proc) for group, out, log, proc in running]
            warnings = dict.fromkeys(line for _, _, log, _ in running for line in _read(log).splitlines())
        finally:
            for _, _, log, proc in running:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                log.close()
    for line in warnings:  # a weaker sandbox's warning, say: once, not once per group
        print(line, file=sys.stderr)
    merged = []
    for i in range(len(folders)):
        graded = {name: unit for part in parts for name, unit in part[i].units.items()}
        merged.append(GradeResult(submission=parts[0][i].submission,
                                  units={name: graded[name] for name in units if name in graded}))
    return merged


def _read(log) -> str:
    log.seek(0)
    return log.read()


def _wait(group: list[str], out: Path, log, proc: subprocess.Popen) -> list[GradeResult]:
    code = proc.wait()
    if code != 0 or not out.is_file():
        raise GraderError(f"grading {', '.join(group)} failed (exit {code}): {_read(log).strip()[-2000:]}")
    data = json.loads(out.read_text(encoding="utf-8"))
    return [GradeResult.from_dict(d) for d in (data if isinstance(data, list) else [data])]
