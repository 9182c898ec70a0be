"""Grade several units at once: one grading process per group of units.

A grade's trusted side (hypothesis, the oracles, the checks) and the sandbox's
worker take turns on one core, so a grade of all the units leaves the other
cores idle. This process imports torch, pytest and hypothesis once, then,
before it runs any test, forks one process for each group but the first, which
it grades itself: a fork inherits the imports (:mod:`.forking`, which gives the
decision). Each process spawns its workers from the caller's zygote through a
connection of its own (one zygote's start-up, about 1.3 CPU-s, instead of one
per process); the groups' results are joined unit by unit, in course order.
Hypothesis's examples are a function of each test alone (derandomized), so a
unit's result does not depend on which process graded it or with which other
units: the joined result is the one a single process gives
(``tests/project/test_cli.py`` compares them).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from autograder.core.manifest import Course
from autograder.core.results import GradeResult
from autograder.grading import forking
from autograder.core.errors import GraderError


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


def grade_in_groups(course: Course, folders: list[Path], units: list[str], jobs: int, options: dict,
                    pool=None) -> list[GradeResult]:
    """One result per folder, each of ``units`` (in course order) graded by its group's process.

    ``options`` are :func:`~autograder.grading.grade.grade`'s keyword arguments. With ``pool``
    (a sandbox's :class:`~autograder.sandbox.pool.Pool`), every process spawns its workers
    from that one zygote. A process that fails fails the grade, with its own message.
    """
    grade = forking.import_grader()  # once, before the forks: they inherit it
    first, *others = groups(units, jobs)
    with tempfile.TemporaryDirectory(prefix="attn-grade-") as tmp:
        children = []
        try:
            for i, group in enumerate(others, 1):
                children.append(_fork(Path(tmp) / f"group{i}", group, pool,
                                      lambda group=group: grade(course, folders, units=group, **options)))
            parts = [grade(course, folders, units=first, **options)]
            while children:
                group, pid, out, log = children[0]
                status = os.waitpid(pid, 0)[1]
                children.pop(0)
                parts.append(_results(group, os.waitstatus_to_exitcode(status), out, log))
        finally:
            for _, pid, _, _ in children:  # this grade failed: they are of no use
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    merged = []
    for i in range(len(folders)):
        graded = {name: unit for part in parts for name, unit in part[i].units.items()}
        merged.append(GradeResult(submission=parts[0][i].submission,
                                  units={name: graded[name] for name in units if name in graded}))
    return merged


def _fork(base: Path, group: list[str], pool, run) -> tuple[list[str], int, Path, Path]:
    """Fork a process that writes ``run()``'s results to ``base``.json (what it prints to
    stderr goes to ``base``.log); returns (group, pid, results, log)."""
    out, log = base.with_suffix(".json"), base.with_suffix(".log")

    def write() -> int:
        out.write_text(json.dumps([r.to_dict() for r in run()]), encoding="utf-8")
        return 0

    null = os.open(os.devnull, os.O_RDWR)  # no input to share with this process
    streams = (null, os.dup(null), os.open(log, os.O_WRONLY | os.O_CREAT, 0o600))
    return group, forking.fork(write, streams, pool=pool), out, log


def _read(log: Path) -> str:
    try:
        return log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _results(group: list[str], code: int, out: Path, log: Path) -> list[GradeResult]:
    """What a group's process that ended with ``code`` graded."""
    if code != 0 or not out.is_file():
        raise GraderError(f"grading {', '.join(group)} failed (exit {code}): {_read(log).strip()[-2000:]}")
    for line in dict.fromkeys(_read(log).splitlines()):
        print(line, file=sys.stderr)  # a warning it printed (a library's, say)
    data = json.loads(out.read_text(encoding="utf-8"))
    return [GradeResult.from_dict(d) for d in data]
