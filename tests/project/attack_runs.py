"""One sandboxed grading run per mode for both attack suites: the trust suite (issue 42,
tests/hostile/trust/attacks.toml) and the removal suite (issue 57, tests/hostile/removal/attacks.toml).

Each run grades the reference solutions (every unit an attack targets) and every attack of both suites
in one session of that mode ("full"; "container": under a seccomp filter that refuses namespaces, its
zygote forked from the grader as on Gradescope; "plain": forced on top of it, its zygote a fresh
interpreter). One session, one zygote and one reference grade serve both suites: a run per suite cost
the reference's grade and the session's start twice a mode. conftest's ``attack_run`` fixture makes it,
once a session for each mode, in the xdist group ``attacks-<mode>``.
"""
from __future__ import annotations

from pathlib import Path

import removal
import trust
from autograder.core.manifest import load_course
from conftest import ROOT
from test_sandbox import drive, leftovers

COURSE = load_course(ROOT)
TIMEOUT = 3.0  # per call: the reference's flash_attention at L = S = 4096 needs about 1 s here
SUITES = {"trust": trust.ATTACKS, "removal": removal.ATTACKS}
UNITS = sorted({a["unit"] for attacks in SUITES.values() for a in attacks}, key=list(COURSE.units).index)


def graded(mode: str, base: Path) -> dict:
    """The run in ``mode``: {"mode", "expected", "forked", "reference": unit -> result, "folders":
    suite -> name -> folder, suite ("trust", "removal") -> name -> the attack's unit result, "leftovers"}."""
    folders = {suite: {a["name"]: removal.materialize(a, base / suite) for a in attacks}
               for suite, attacks in SUITES.items()}
    paths = [COURSE.solutions, *(f for named in folders.values() for f in named.values())]
    if mode == "full":
        run = drive(paths, UNITS, timeout=TIMEOUT, mode="full")
    else:
        # Container mode is Gradescope's: its grader forks the zygote (autograder/sandbox/forked.py).
        run = drive(paths, UNITS, timeout=TIMEOUT, container=True, mode=None if mode == "container" else "plain",
                    fork=mode == "container")
    run["expected"] = mode
    run["reference"] = run["results"][0]["units"]
    run["folders"] = folders
    results = iter(run["results"][1:])
    for suite, attacks in SUITES.items():
        run[suite] = {a["name"]: next(results)["units"][a["unit"]] for a in attacks}
    run["leftovers"] = leftovers(run)
    return run
