"""The student bundle stands alone: built by ``release`` in each language, installed as its README
says into a fresh venv that sees nothing of this one, and used from its own folder.

The venv is made from the base interpreter (``python -m venv``, no system site-packages) and
run with no PYTHONPATH: the repository's editable install and the development venv's packages
are out of its reach, so a dependency the bundle's pyproject forgets fails here as it fails a
student. Its install is the README's step 1: torch from this machine's CPU wheel (the wheel of
this venv's torch, which pip finds as the Makefile's install does; never the CUDA build), the
rest by ``pip install -e .`` (through uv, and uv's cache, so a warm run installs in seconds).

Each README command that names no placeholder then runs as written, in the bundle's folder
with the venv's ``bin`` first on PATH: on the stubs, and again on finished work (the reference
copied in as a student's files). A bundle in one language defaults to that language.
"""
from __future__ import annotations

import importlib.metadata
import json
import math
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

# Its module fixtures are built once: every test of this module runs on one xdist worker.
pytestmark = pytest.mark.xdist_group("bundle")

MANIFEST = tomllib.loads((ROOT / "course" / "course.toml").read_text(encoding="utf-8"))
COMMAND = MANIFEST["branding"]["command"]
UNITS = list(MANIFEST["units"])
LANGS = ("en", "zh")
# What each language's student notebook says above its answer cells (autograder/authoring/notebook.py's
# TEXT, and its translation in course/lessons/zh/notebook.toml).
GRADED = {"en": "How this notebook is graded", "zh": "本笔记本如何评分"}
BAD_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "CONDA_PREFIX", "ATTN_COURSE_ROOT",
           "PYTHONDONTWRITEBYTECODE")  # (bytecode on: each interpreter here compiles the venv's packages once)
# Modules the bundle ships that only an instructor runs (the nbgrader pipeline needs nbgrader).
INSTRUCTOR_ONLY = {"autograder.nbgrader.pipeline"}


def clean_env(venv: Path | None = None) -> dict[str, str]:
    """This environment without anything that points at the repository or its venv; ``venv``'s
    bin first on PATH, as an activated venv has it."""
    env = {k: v for k, v in os.environ.items() if k not in BAD_ENV and not k.startswith(("AUTOGRADER_", "UV_PYTHON"))}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != Path(sys.prefix, "bin").resolve()]
    if venv is not None:
        path.insert(0, str(venv / "bin"))
    return {**env, "PATH": os.pathsep.join(path), "MPLBACKEND": "Agg"}


def run(*argv, cwd: Path, venv: Path | None = None, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=clean_env(venv))
    if check:
        assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def readme_commands(readme: str) -> list[str]:
    """The commands the bundle's README gives (its code spans that start with pip, python or the
    course's command), without those that hold a placeholder (``...``)."""
    spans = re.findall(r"`([^`\n]+)`", readme)
    return [s for s in spans if s.split()[0] in ("pip", "python", COMMAND) and "..." not in s]


@pytest.fixture(scope="module")
def uv() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:
        found = shutil.which("uv")
        if not found:
            pytest.skip("uv is not installed (the Makefile's install puts it in .venv)")
        return found
    return find_uv_bin()


@pytest.fixture(scope="module")
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


@pytest.fixture(scope="module", params=LANGS)
def bundle(request, tmp_path_factory, uv, torch_wheel) -> dict:
    """The bundle released in one language, installed as its README says in a fresh venv."""
    lang = request.param
    top = tmp_path_factory.mktemp(f"bundle-{lang}")
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
    install(readme, out, venv, uv, torch_wheel)
    return {"lang": lang, "root": out, "python": python, "venv": venv, "bin": venv / "bin", "top": top,
            "readme": readme}


def readme_run(bundle: dict, command: str, check: bool = True) -> subprocess.CompletedProcess:
    """A README command as written, in the bundle's folder, the venv's bin first on PATH."""
    return run(*shlex.split(command), cwd=bundle["root"], venv=bundle["venv"], check=check)


def test_the_bundle_is_what_it_imports(bundle):
    """From any folder the engine, the units and the lessons are the bundle's; the reference and the
    repository's venv are nowhere on the path."""
    code = ("import sys, autograder, assignments, course.demos, course.lessons, importlib.util\n"
            "print(autograder.__file__, assignments.__file__, course.demos.__file__, course.lessons.__file__)\n"
            "print(importlib.util.find_spec('solutions'))\n"
            "print(*sys.path, sep='\\n')")
    files, reference, *path = run(bundle["python"], "-c", code, cwd=bundle["top"]).stdout.splitlines()
    for file in files.split():
        assert Path(file).is_relative_to(bundle["root"]), file
    assert reference == "None"
    leaks = [p for p in map(Path, path) if p.is_absolute() and (p.resolve().is_relative_to(ROOT)
                                                                or p.resolve().is_relative_to(Path(sys.prefix).resolve()))]
    assert not leaks, f"the bundle's venv sees the repository: {leaks}"
    assert (bundle["root"] / "docs" / "course-api.md").is_file(), "the contract ships with the stubs"
    assert not (bundle["root"] / "course" / "stand_ins").exists() and not (bundle["root"] / "solutions").exists()
    doc = run(bundle["python"], "-c", "import assignments; print(assignments.__doc__)", cwd=bundle["top"]).stdout
    assert "TODO" in doc and "Reference solutions" not in doc, doc


def test_the_readme_is_in_the_bundles_language_and_names_its_api_page(bundle):
    """The README is the bundle's language's (``course/student_readme.zh.md`` for zh) and sends students
    to that language's API page (``docs/course-api.zh.md`` for zh), which the bundle holds."""
    from autograder.authoring.contract import translation

    paths = MANIFEST["paths"]
    template = translation(ROOT / paths["student_readme"], bundle["lang"])
    page = translation(ROOT / paths["api"], bundle["lang"]).relative_to(ROOT).as_posix()
    assert bundle["lang"] == "en" or template.name != Path(paths["student_readme"]).name, "no README in zh"
    assert bundle["lang"] == "en" or page != paths["api"], "no API page in zh"
    assert bundle["readme"] == template.read_text(encoding="utf-8").format(
        course=MANIFEST["course"]["name"], command=COMMAND, api=page)
    assert f"`{page}`" in bundle["readme"] and (bundle["root"] / page).is_file(), page


def test_every_module_imports_with_the_bundles_dependencies(bundle):
    """Every module the bundle ships imports in the venv its pyproject made (the instructor's nbgrader
    pipeline aside): what the engine, the stubs, the lessons, the demos, the viewer and the
    notebooks' kernel need is all declared."""
    code = f"""
import importlib, pkgutil
failed = {{}}
names = ["course.viz", "ipykernel", "IPython.display"]
for top in ("autograder", "assignments", "course.demos", "course.lessons"):
    names += [top] + [m.name for m in pkgutil.walk_packages(importlib.import_module(top).__path__, top + ".")]
for name in names:
    if name.endswith(".__main__") or name in {sorted(INSTRUCTOR_ONLY)!r}:
        continue
    try:
        importlib.import_module(name)
    except Exception as error:
        failed[name] = f"{{type(error).__name__}}: {{error}}"
print(failed)
"""
    failed = run(bundle["python"], "-c", code, cwd=bundle["top"]).stdout.strip()
    assert failed == "{}", f"modules that do not import with the bundle's dependencies: {failed}"


def test_readme_commands_on_the_stubs(bundle):
    """Each README command, as written, on the stubs: check scores 0 and exits 0, the lessons are
    written in the bundle's language, and the viewer says which file to write first."""
    commands = readme_commands(bundle["readme"])
    ran = set()
    for command in commands:
        argv = shlex.split(command)
        if argv[0] == "pip":
            continue  # the install, done by the fixture
        proc = readme_run(bundle, command, check=False)
        assert "Traceback" not in proc.stderr, f"{command}:\n{proc.stderr[-3000:]}"
        if argv[:2] == [COMMAND, "check"]:
            assert proc.returncode == 0, f"{command}: {proc.stderr[-2000:]}"
            assert "not implemented yet" in proc.stdout, proc.stdout[-2000:]
        elif argv[:3] == ["python", "-m", "course.lessons"]:
            assert proc.returncode == 0, f"{command}: {proc.stderr[-2000:]}"
            out = bundle["root"] / argv[3]
            for unit in UNITS:
                assert (out / f"{unit}.py").is_file() and (out / f"{unit}.ipynb").is_file(), unit
            assert GRADED[bundle["lang"]] in (out / f"{UNITS[0]}.ipynb").read_text(encoding="utf-8"), \
                f"the lessons are not in the bundle's language, {bundle['lang']}"
        elif argv[:2] == [COMMAND, "viz"]:
            assert proc.returncode == 2 and "implement attention.py first" in proc.stderr, proc.stderr[-2000:]
        else:
            raise AssertionError(f"the README's {command!r}: this test does not know what it should do")
        ran.add(" ".join(argv[:2]))
    assert {f"{COMMAND} check", "python -m", f"{COMMAND} viz"} <= ran, f"the README no longer gives {ran}"
    report = json.loads(readme_run(bundle, f"{COMMAND} check --format json").stdout)
    assert report["score"] == 0 and report["max_score"] > 0
    assert Path(report["submission"]) == bundle["root"] / "assignments"


def test_lessons_default_to_the_bundles_language_and_refuse_another_in_one_line(bundle):
    other = next(lang for lang in LANGS if lang != bundle["lang"])
    out = bundle["top"] / "other-lessons"
    proc = run(bundle["python"], "-m", "course.lessons", out, "--lang", other, cwd=bundle["root"], check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"no lessons in {other!r}" in proc.stderr and f"--lang {bundle['lang']}" in proc.stderr, proc.stderr
    assert not out.exists()


def test_grade_and_help_in_the_bundle(bundle):
    """``grade`` needs the hidden tests, which stay with the instructor: it says so (not pytest's
    exit code) and points to check; --help lists the course's own commands (viz)."""
    proc = run(bundle["bin"] / COMMAND, "grade", "assignments", cwd=bundle["root"], check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "pytest" not in proc.stderr, proc.stderr
    assert f"{COMMAND} check" in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
    usage = run(bundle["bin"] / COMMAND, "--help", cwd=bundle["root"]).stdout
    assert re.search(r"^\s+viz\s+\S", usage, re.M), usage


def test_lessons_render_from_the_stubs_and_name_the_file_to_write(bundle):
    """The lessons are the student notebooks the release wrote (no solutions/ here); run as a script
    on the stubs, a lesson stops at its first public test, which names what to implement."""
    out = bundle["top"] / "lessons"
    run(bundle["python"], "-m", "course.lessons", out, cwd=bundle["root"])
    script = (out / "multi_head.py").read_text(encoding="utf-8")
    # The student notebook, as nbgrader's release makes it: solutions cleared, the sibling through
    # the kernel side (here, with no stand-ins shipped, the student's own attention.py).
    assert "scaled_dot_product_attention = sibling('multi_head', 'attention').scaled_dot_product_attention" in script
    assert "### BEGIN SOLUTION" not in script and "raise NotImplementedError()" in script
    assert "hidden_tests(" not in script and "course.stand_ins" not in script
    assert (out / "multi_head.ipynb").is_file()
    small = script.replace('SIZE = "full"', 'SIZE = "small"').replace('PLOTS = "plots"', f'PLOTS = {str(out)!r}')
    (out / "multi_head.py").write_text(small, encoding="utf-8")
    proc = run(bundle["python"], out / "multi_head.py", cwd=out, check=False)
    # Run top to bottom on the stubs, it stops at the first public test cell, naming the property.
    assert proc.returncode == 1
    assert re.search(r"AssertionError: split_heads .*: not implemented yet \(multi_head\.py line \d+\)", proc.stderr), \
        proc.stderr[-2000:]


def test_repro_rebuilds_a_case_from_the_bundle_alone(bundle):
    """A failure's reproduce command runs in the bundle: on the stubs it says what to write and
    exits 1; on the student's finished file it shows their answer beside the expected one, exit 0."""
    import torch

    from autograder.core import cases
    from autograder.core.protocol import Call

    x = torch.tensor([0.0, math.log(2), math.log(3)], dtype=torch.float64)
    case = {"call": Call("attention", "softmax", (x,), {"dim": -1}), "part": "output", "what": "softmax",
            "expected": torch.tensor([1 / 6, 2 / 6, 3 / 6], dtype=torch.float64), "atol": 1e-10, "rtol": 1e-9}
    argv = [bundle["bin"] / COMMAND, "repro", "attention", "test_softmax", "--example", cases.dumps("attention", case)]
    stub = run(*argv, cwd=bundle["root"], check=False)
    assert stub.returncode == 1 and "not implemented" in stub.stdout and "Traceback" not in stub.stderr, stub.stdout + stub.stderr
    mine = bundle["top"] / "repro-mine"
    mine.mkdir()
    shutil.copyfile(ROOT / "solutions" / "attention.py", mine / "attention.py")
    done = run(*argv, "--path", mine, cwd=bundle["root"], check=False)
    assert done.returncode == 0 and "equal within" in done.stdout, done.stdout + done.stderr


def test_readme_commands_on_finished_work(bundle):
    """The same commands once every unit is written (the reference, copied into the bundle's
    assignments/ as a student's work): check gives full marks, the viewer draws the page and says
    whose code it ran (the student's, not a solutions/ the bundle lacks), and a lesson's demo
    cells run on it and show their plot."""
    assignments = bundle["root"] / "assignments"
    stubs = bundle["top"] / "stubs"
    shutil.copytree(assignments, stubs)
    try:
        for unit in MANIFEST["units"].values():
            shutil.copyfile(ROOT / "solutions" / unit["file"], assignments / unit["file"])
        report = json.loads(readme_run(bundle, f"{COMMAND} check --format json").stdout)
        assert report["score"] == report["max_score"] > 0, report
        viz = next(c for c in readme_commands(bundle["readme"]) if shlex.split(c)[:2] == [COMMAND, "viz"])
        proc = readme_run(bundle, viz)
        page = (bundle["root"] / "attention.html").read_text(encoding="utf-8")
        title = re.search(r"<title>(.*)</title>", page)[1]
        assert "from assignments" in title and "solutions" not in title, title
        assert "wrote attention.html" in proc.stdout
        # A lesson's setup and demo cells, as its notebook has them, on the student's folder.
        nb = json.loads((bundle["root"] / "course" / "lessons" / bundle["lang"] / "multi_head.ipynb").read_text(encoding="utf-8"))
        cells = ["".join(c["source"]) for c in nb["cells"] if MANIFEST["branding"]["demo_tag"] in c["metadata"].get("tags", ())]
        assert len(cells) >= 2 and "SIZE" in cells[0], "the lesson has a setup cell and a demo"
        setup = (cells[0].replace('SIZE = "full"', 'SIZE = "small"').replace('SOURCE = "notebook"', 'SOURCE = "assignments"')
                 .replace('PLOTS = "plots"', f'PLOTS = {str(bundle["top"] / "plots")!r}'))
        demo = run(bundle["python"], "-c", "\n".join([setup, *cells[1:]]), cwd=bundle["root"])
        assert "IPython.core.display.Image" in demo.stdout and list((bundle["top"] / "plots").glob("*.png")), demo.stdout
    finally:
        shutil.rmtree(assignments)
        shutil.copytree(stubs, assignments)
