"""A student's bundle, as a student gets it: built by ``release`` in one language and installed
as its README says into a fresh venv that sees nothing of this one (``test_bundle.py`` says how).
Shared by the bundle's tests and the lesson notebooks, which run in the same venv."""
from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT, attn_course

MANIFEST = tomllib.loads((ROOT / "course" / "course.toml").read_text(encoding="utf-8"))
COMMAND = MANIFEST["branding"]["command"]
UNITS = list(MANIFEST["units"])
LANGS = ("en", "zh")
# What each language's student notebook says above its answer cells (autograder/authoring/notebook.py's
# TEXT, and its translation in course/lessons/zh/notebook.toml).
GRADED = {"en": "How this notebook is graded", "zh": "本笔记本如何评分"}
BAD_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "CONDA_PREFIX", "ATTN_COURSE_ROOT",
           "PYTHONDONTWRITEBYTECODE")  # (bytecode on: each interpreter here compiles the venv's packages once)


def clean_env(venv: Path | None = None) -> dict[str, str]:
    """This environment without anything that points at the repository or its venv; ``venv``'s
    bin first on PATH, as an activated venv has it."""
    env = {k: v for k, v in os.environ.items() if k not in BAD_ENV and not k.startswith(("AUTOGRADER_", "UV_PYTHON"))}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != Path(sys.prefix, "bin").resolve()]
    if venv is not None:
        path.insert(0, str(venv / "bin"))
    return {**env, "PATH": os.pathsep.join(path), "MPLBACKEND": "Agg"}


def run(*argv, cwd: Path, venv: Path | None = None, check: bool = True, timeout: int = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``argv`` in ``clean_env(venv)`` (plus ``env``); with ``check``, it must exit 0."""
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**clean_env(venv), **(env or {})})
    if check:
        assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def readme_commands(readme: str) -> list[str]:
    """The commands the bundle's README gives (its code spans that start with pip, python or the
    course's command), without those that hold a placeholder (``...``)."""
    spans = re.findall(r"`([^`\n]+)`", readme)
    return [s for s in spans if s.split()[0] in ("pip", "python", COMMAND) and "..." not in s]


def find_uv() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:
        found = shutil.which("uv")
        if not found:
            pytest.skip("uv is not installed (the Makefile's install puts it in .venv)")
        return found
    return find_uv_bin()


def torch_wheel() -> Path:
    """This venv's torch as a CPU wheel, from where pip finds it on this machine (as the Makefile's
    install does), kept in a cache folder: its exact version with the local tag, so never a CUDA build."""
    version = importlib.metadata.version("torch")
    if not version.endswith("+cpu"):
        pytest.skip(f"this venv's torch is {version}, not a CPU build: the bundle test installs the CPU wheel only")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-course" / "wheels"
    wheels = sorted(cache.glob(f"torch-{version}-*.whl"))
    if not wheels:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(cache),
                               f"torch=={version}"], capture_output=True, text=True, timeout=600)
        wheels = sorted(cache.glob(f"torch-{version}-*.whl"))
        if not wheels:
            pytest.skip(f"pip finds no wheel of torch=={version} on this machine: {proc.stderr.strip()[-300:]}")
    return wheels[-1]


def install(readme: str, bundle: Path, venv: Path, uv: str, torch_wheel: Path) -> None:
    """The README's install step, part by part: ``pip install torch --index-url .../cpu`` is this
    machine's CPU wheel, ``pip install -e .`` is uv's (the same install, with uv's cache)."""
    step = next((c for c in readme_commands(readme) if c.startswith("pip install")), None)
    assert step, "the bundle's README says how to install it"
    python = venv / "bin" / "python"
    for part in step.split("&&"):
        argv = shlex.split(part)
        if argv[:3] == ["pip", "install", "torch"]:
            assert argv[argv.index("--index-url") + 1].endswith("/cpu"), f"{part}: the README installs the CPU wheel"
            run(uv, "pip", "install", "--quiet", "--python", python, torch_wheel, cwd=bundle)
        elif argv == ["pip", "install", "-e", "."]:
            run(uv, "pip", "install", "--quiet", "--python", python, "-e", ".", cwd=bundle, timeout=600)
        else:
            raise AssertionError(f"the README's install step {part.strip()!r} is not one this test knows how to run")


def build(lang: str, top: Path) -> dict:
    """The bundle released in ``lang`` under ``top``, installed as its README says in a fresh venv."""
    out, venv = top / "bundle", top / "venv"
    attn_course("release", "--lang", lang, str(out))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120,
                   env=clean_env())
    python = venv / "bin" / "python"
    # Nothing of this environment is in reach: not the engine, not one of its packages.
    for module in ("autograder", "torch", "nbformat"):
        outside = run(python, "-c", f"import {module}", cwd=top, check=False)
        assert f"No module named '{module}'" in outside.stderr, f"{module} of the repository's venv is in reach"
    readme = (out / "README.md").read_text(encoding="utf-8")
    install(readme, out, venv, find_uv(), torch_wheel())
    return {"lang": lang, "root": out, "python": python, "venv": venv, "bin": venv / "bin", "top": top,
            "readme": readme}


class Bundles(dict):
    """lang -> its bundle, built on first use and kept for the session (the bundle tests and the
    lesson notebooks share one xdist group, so one worker builds each language once)."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self.tmp_path_factory = tmp_path_factory

    def __missing__(self, lang: str) -> dict:
        self[lang] = build(lang, self.tmp_path_factory.mktemp(f"bundle-{lang}"))
        return self[lang]


def readme_run(bundle: dict, command: str, check: bool = True) -> subprocess.CompletedProcess:
    """A README command as written, in the bundle's folder, the venv's bin first on PATH."""
    return run(*shlex.split(command), cwd=bundle["root"], venv=bundle["venv"], check=check)


@contextlib.contextmanager
def finished(bundle: dict):
    """The bundle with every unit written (the reference copied into its ``assignments/`` as a
    student's files), put back as released on leaving."""
    assignments = bundle["root"] / "assignments"
    stubs = bundle["top"] / "stubs"
    shutil.copytree(assignments, stubs)
    try:
        for unit in MANIFEST["units"].values():
            shutil.copyfile(ROOT / "solutions" / unit["file"], assignments / unit["file"])
        yield bundle
    finally:
        shutil.rmtree(assignments)
        shutil.copytree(stubs, assignments)
        shutil.rmtree(stubs)
