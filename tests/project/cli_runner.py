"""``python -m autograder.cli`` for the project's tests, without paying for torch on every run.

Each run is a child forked from a warm interpreter (multiprocessing's forkserver, one per
test process) that has imported :data:`PRELOAD` and nothing else: no module of this
project, no test module. The child then does what ``python -m autograder.cli ARGS`` in
``cwd`` with ``env`` does: it takes that environment and folder, puts ``cwd`` first on a
fresh interpreter's ``sys.path``, runs the module as ``__main__``, finishes as the
interpreter would (non-daemon threads, ``atexit``, flushed streams) and exits with the
code a fresh process would. Its stdout and stderr are files, read back as text.

Measured: a stub grade of one unit took 4.0 s and 4.9 CPU-s in a fresh interpreter, 1.5 s
and 1.5 CPU-s forked (torch alone is 1.6 CPU-s here). What gains is a run that grades in its
own process (``--jobs 1``, ``repro``, ``check``, ``export``); a ``grade`` of several units
imports no torch in its parent, and the grading processes it starts are new interpreters,
as in use. The whole suite: 2,082 CPU-s busy before, 1,977 after.

What a fork does not give: every child of one test process shares its forkserver's hash
seed, and what the interpreter reads from the environment as it starts (``PYTHONPATH``,
``PYTHONHASHSEED``) is the forkserver's. A test whose point is a new interpreter per run (two
runs that must agree whatever the hash seed), or that sets such a variable, asks
:func:`conftest.attn_course` for ``fresh=True``.
"""
from __future__ import annotations

import functools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile

# Third-party only: what every grading run imports, and what most of its start-up costs (torch's
# first meta-device operator imports torch._dynamo, 1.3 CPU-s, as the sandbox's zygote warms it).
PRELOAD = ["torch", "torch._dynamo", "numpy", "pytest", "_pytest.python", "hypothesis", "rich.console"]


@functools.cache
def _forkserver():
    """The forkserver's context, and what `python -m` puts on ``sys.path`` after its first entry
    (the current folder), asked of a new interpreter once."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    base_path = json.loads(subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(sys.path[1:]))"],
                                          capture_output=True, text=True, check=True).stdout)
    return context, base_path


def run(args: list[str], *, cwd, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``python -m autograder.cli *args`` in ``cwd`` with ``env``, as :func:`subprocess.run` with
    ``capture_output=True, text=True`` would report it (``TimeoutExpired`` past ``timeout``)."""
    context, base_path = _forkserver()
    command = [sys.executable, "-m", "autograder.cli", *args]
    with tempfile.TemporaryDirectory(prefix="attn-cli-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        child = context.Process(target=_child, args=(list(args), str(cwd), dict(env), base_path, out, err))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(command, timeout)
        with open(out, encoding="utf-8") as stdout, open(err, encoding="utf-8") as stderr:
            return subprocess.CompletedProcess(command, child.exitcode, stdout.read(), stderr.read())


def _child(args: list[str], cwd: str, env: dict, base_path: list[str], out: str, err: str) -> None:
    import atexit
    import runpy
    import threading
    import traceback

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    sys.path[:] = [cwd, *base_path]
    sys.argv = ["-m", *args]  # run_module puts the module's path first, as `python -m` does
    try:
        runpy.run_module("autograder.cli", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:  # as the interpreter reads it: a number, None for 0, anything else printed, 1
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - as the interpreter does: the traceback, then exit 1
        traceback.print_exc()
        code = 1
    threading._shutdown()  # what a normal interpreter exit does, in its order
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
