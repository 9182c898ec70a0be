"""Fixtures for the project's own tests: grading runs as a real CLI process."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import cli_runner

ROOT = Path(__file__).resolve().parents[2]


def attn_course(*args: str, check: bool = True, env: dict | None = None, fresh: bool = False,
                timeout: float = 2400) -> subprocess.CompletedProcess:
    """Run ``attn-course`` as a user would (``python -m autograder.cli`` in the project's folder).

    By default in a child of a warm interpreter that has imported torch, pytest and hypothesis
    (``cli_runner``: up to 2.5 CPU-s less a run); ``fresh`` starts a new interpreter, for a test
    whose point is a new process each run (its own hash seed).
    """
    environment = {**os.environ, **(env or {})}
    if fresh:
        proc = subprocess.run([sys.executable, "-m", "autograder.cli", *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=environment)
    else:
        proc = cli_runner.run(list(args), cwd=ROOT, env=environment, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"attn-course {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def grade_json(paths: list[Path], units: list[str] = (), *extra: str) -> list[dict]:
    """Grade ``paths`` and return one result dict per path.

    Results are cached for this test run (both xdist workers share it), per submission: a
    submission's grade depends only on its own files and the options (hypothesis's examples
    are a function of the test alone), so the mutant catalogue graded for one test is not
    graded again for the next. What no one has graded yet is claimed and graded here, up to
    :data:`CLAIM` submissions per CLI run; what the other worker is grading right now is waited
    for at the end, never before.
    """
    unit_args = [arg for unit in units for arg in ("--unit", unit)]
    keys = [_grade_key(Path(p), unit_args, extra) for p in paths]
    folder = dict(zip(keys, paths))
    pending = sorted(set(keys))
    while True:
        with contextlib.ExitStack() as held:  # released once graded: a waiting worker reads them at once
            mine = []
            for key in pending:
                if len(mine) == CLAIM:
                    break
                if not _cached(key) and _try_lock(held, key):
                    mine.append(key)
            if not mine:
                break
            _grade_into_cache([k for k in mine if not _cached(k)], folder, unit_args, extra)
    for key in pending:  # by now, most likely done by the other worker
        if not _cached(key):
            with open(run_cache() / f"{key}.lock", "w") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                _grade_into_cache([key] if not _cached(key) else [], folder, unit_args, extra)
    results = [json.loads((run_cache() / f"{k}.json").read_text(encoding="utf-8")) for k in keys]
    for path, result in zip(paths, results):
        result["submission"] = str(Path(path).resolve())
    return results


# Submissions per grading run. Each run starts torch, pytest's collection, hypothesis and the
# meta device's kernels (about 5 s) and, sandboxed, the zygote. A unit's catalogue (up to 38
# folders) is asked for by one worker only (its tests share an xdist group), so it is graded in
# one run: claims of 8 made five runs of it, 100-150 s of CI's worker time in all.
CLAIM = 64


def _cached(key: str) -> bool:
    return (run_cache() / f"{key}.json").is_file()


def _try_lock(held: contextlib.ExitStack, key: str) -> bool:
    """Take ``key``'s lock for the rest of ``held`` if no one holds it."""
    handle = held.enter_context(open(run_cache() / f"{key}.lock", "w"))
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _grade_into_cache(keys: list[str], folder: dict[str, Path], unit_args: list[str], extra: tuple[str, ...]) -> None:
    if not keys:
        return
    # --jobs 1: the xdist workers already keep the cores busy (the key leaves --jobs out: the
    # grade does not depend on it, test_cli.py::test_jobs_grade_as_one_process_does).
    out = json.loads(attn_course("grade", *(str(folder[k]) for k in keys), *unit_args, "--jobs", "1",
                                 "--format", "json", *extra).stdout)
    for key, result in zip(keys, out if isinstance(out, list) else [out]):
        part = run_cache() / f"{key}.part"
        part.write_text(json.dumps(result), encoding="utf-8")
        os.replace(part, run_cache() / f"{key}.json")  # whole or absent: the other worker may be looking


# One folder per test run, made by the controller (pytest_configure) before its workers start,
# so they inherit it; a module run on its own gets one too.
CACHE_ENV = "AUTOGRADER_TEST_GRADES"


def run_cache() -> Path:
    if not os.environ.get(CACHE_ENV):
        os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="autograder-test-grades-")
    return Path(os.environ[CACHE_ENV])


def _grade_key(folder: Path, unit_args: list[str], extra: tuple[str, ...]) -> str:
    """What a submission's grade depends on: its files (names and bytes) and the options."""
    digest = hashlib.sha256(json.dumps([unit_args, list(extra)]).encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


# The platforms' own artefacts (the JUnit XSD, PrairieLearn's question schema, Classroom's
# reporter) are the files tests/vendor/*/SOURCE.md names. They are third-party files, not
# committed here, so they are looked up in $ATTN_VENDOR_DIR (default
# ~/.cache/attention-course/vendor), and a test that needs one skips, naming it, where it is
# absent. `make vendor` (part of `make test`) puts there what a package registry publishes, at a
# pinned sha256: the XSD, from pytest's sdist; the other two are on no registry and are put
# there by hand (tests/vendor/README.md says from where). The schemas written here from the
# platforms' docs (Gradescope's and PrairieLearn's results) are in tests/vendor/ itself.
THIRD_PARTY = Path(os.environ.get("ATTN_VENDOR_DIR") or Path.home() / ".cache" / "attention-course" / "vendor")


def third_party(rel: str) -> Path:
    path = THIRD_PARTY / rel
    if not path.is_file():
        pytest.skip(f"the platform's own {rel} is not in {THIRD_PARTY} (tests/vendor/README.md says where it comes from)")
    return path


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def student_bundles(tmp_path_factory):
    """lang -> the student's bundle in that language, installed in a fresh venv (``student_bundle``)."""
    import student_bundle  # it imports this module

    return student_bundle.Bundles(tmp_path_factory)


@pytest.fixture(scope="session")
def catalogue(tmp_path_factory):
    """Every unit's mutant catalogue, the reference, the stubs and the correct alternative, graded
    in process (``mutants.Graded``), for every test that reads them."""
    import mutants  # it imports this module

    return mutants.Graded(tmp_path_factory, "--no-sandbox")


import modes  # noqa: E402 - it imports ROOT from this module, defined above


@pytest.fixture(scope="session", params=modes.params("attacks"))
def attack_run(request, tmp_path_factory) -> dict:
    """Both attack suites and the reference graded in one sandboxed run of one mode
    (``attack_runs``), for the trust suite's tests and the removal suite's alike."""
    modes.require(request.param)
    import attack_runs  # it imports this module

    return attack_runs.graded(request.param, tmp_path_factory.mktemp(f"attacks-{request.param}"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Make ``--dist loadgroup`` keep each ``xdist_group`` on one worker, as xdist documents.

    xdist 3.8 marks a grouped test by writing ``item._nodeid = "<id>@<group>"`` (its own
    collection hook, which runs before this one), but pytest 9 reports ``item.nodeid`` from
    ``item._id``, so the controller never sees the group: each worker then built the expensive
    session fixtures of a group for itself (the nbgrader class, the sandbox's hostile runs: about
    1,100 s of CI's 4,200 worker-seconds). Carrying xdist's name over to ``_id`` gives the
    controller the ``@group`` ids it schedules by. Once xdist writes ``_id`` itself, the ids
    already agree and this does nothing.
    """
    for item in items:
        grouped = item.__dict__.get("_nodeid")
        if grouped and grouped != item.nodeid:
            item._id = type(item._id).parse(grouped)


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="autograder-test-grades-")


def pytest_unconfigure(config):
    """The controller (or a run without xdist) removes the run's grade cache."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        import shutil

        shutil.rmtree(os.environ.pop(CACHE_ENV, ""), ignore_errors=True)


# Where a run's time goes (.ci/run names a file in $ATTN_TEST_DURATIONS; .ci/durations.py prints it):
# the controller (or a run without xdist), which sees every worker's reports, writes one JSON line a
# test: its id, its xdist group ("" for none), its worker, the seconds of its setup, call and teardown
# (a session fixture's setup counts in the first test that asks for it), and when it started and stopped.
DURATIONS_ENV = "ATTN_TEST_DURATIONS"
_TIMES: dict[str, dict] = {}


def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get(DURATIONS_ENV):
        return
    nodeid, group = report.nodeid, ""
    head, at, tail = nodeid.rpartition("@")  # xdist's "<id>@<group>" (pytest_collection_modifyitems)
    if at and "::" not in tail and "]" not in tail:
        nodeid, group = head, tail
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    entry = _TIMES.setdefault(nodeid, {"id": nodeid, "group": group, "worker": getattr(gateway, "id", "main"),
                                       "setup": 0.0, "call": 0.0, "teardown": 0.0, "start": report.start})
    entry[report.when] = round(report.duration, 3)
    entry["stop"] = report.stop


def pytest_sessionfinish(session):
    if os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get(DURATIONS_ENV):
        return
    path = Path(os.environ[DURATIONS_ENV])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(entry) + "\n" for entry in _TIMES.values()), encoding="utf-8")
