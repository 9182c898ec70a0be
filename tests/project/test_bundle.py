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

import json
import math
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from student_bundle import COMMAND, GRADED, LANGS, MANIFEST, UNITS, finished, readme_commands, readme_run, run
from autograder.authoring.catalogue import read
from autograder.core import i18n

# The bundles are built once a session (conftest's student_bundles): the lesson notebooks share them.
pytestmark = pytest.mark.xdist_group("bundle")

# Modules the bundle ships that only an instructor runs (the nbgrader pipeline and its preprocessor need nbgrader).
INSTRUCTOR_ONLY = {"autograder.nbgrader.pipeline", "autograder.nbgrader.restore"}
CJK = re.compile(r"[\u3400-\u9fff]")


def said(lang: str, msgid: str) -> str:
    """``msgid`` as a bundle in ``lang`` says it: the catalogues it ships (the repository's)."""
    if lang == "en":
        return msgid
    for locale, domain in ((i18n.ENGINE_LOCALE, i18n.ENGINE_DOMAIN), (ROOT / MANIFEST["paths"]["locale"], i18n.COURSE_DOMAIN)):
        message = read(i18n.catalogue_path(locale, lang, domain)).get(msgid)
        if message is not None and message.string:
            return message.string
    raise KeyError(f"{msgid!r} has no {lang} translation")


@pytest.fixture(scope="module", params=LANGS)
def bundle(request, student_bundles) -> dict:
    """The bundle released in one language, installed as its README says in a fresh venv."""
    return student_bundles[request.param]


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
    """Each README command, as written, on the stubs: check scores 0 and exits 0, saying so in the
    bundle's language (its course.toml's), the lessons are written in the bundle's language, and the
    viewer says which file to write first."""
    lang = bundle["lang"]
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
            assert said(lang, "not implemented yet") in proc.stdout, proc.stdout[-2000:]
            assert lang == "en" or (CJK.search(proc.stdout) and "not implemented yet" not in proc.stdout), proc.stdout
        elif argv[:3] == ["python", "-m", "course.lessons"]:
            assert proc.returncode == 0, f"{command}: {proc.stderr[-2000:]}"
            out = bundle["root"] / argv[3]
            for unit in UNITS:
                assert (out / f"{unit}.py").is_file() and (out / f"{unit}.ipynb").is_file(), unit
            assert GRADED[bundle["lang"]] in (out / f"{UNITS[0]}.ipynb").read_text(encoding="utf-8"), \
                f"the lessons are not in the bundle's language, {bundle['lang']}"
        elif argv[:2] == [COMMAND, "viz"]:
            first = said(lang, "implement {file} first{then} ({last} says: {says}). It ran {ran}. To run your code from "
                                "another folder, set SOURCE in the lesson's setup cell (or --source) to the folder that "
                                "holds your {file}.").split("{then}")[0].format(file="attention.py")
            assert proc.returncode == 2 and first in proc.stderr, proc.stderr[-2000:]
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
    # Run top to bottom on the stubs, it stops at the first public test cell, naming the property, in the
    # bundle's language (the kernel speaks it).
    lang = bundle["lang"]
    title = said(lang, "split_heads of features [0 1 2 3] into 2 heads gives [0 1] and [2 3]")
    failed = said(lang, "{title}: {message}").format(title=title, message=said(lang, "not implemented yet"))
    assert proc.returncode == 1
    assert f"AssertionError: {failed}" in proc.stderr and "multi_head.py" in proc.stderr, proc.stderr[-2000:]


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
    assert stub.returncode == 1 and said(bundle["lang"], "not implemented yet") in stub.stdout \
        and "Traceback" not in stub.stderr, stub.stdout + stub.stderr
    mine = bundle["top"] / "repro-mine"
    mine.mkdir()
    shutil.copyfile(ROOT / "solutions" / "attention.py", mine / "attention.py")
    done = run(*argv, "--path", mine, cwd=bundle["root"], check=False)
    equal = said(bundle["lang"], "equal within atol={atol:g}, rtol={rtol:g}").format(atol=1e-10, rtol=1e-9)
    assert done.returncode == 0 and equal in done.stdout, done.stdout + done.stderr


def test_readme_commands_on_finished_work(bundle):
    """The same commands once every unit is written (the reference, copied into the bundle's
    assignments/ as a student's work): check gives full marks, the viewer draws the page and says
    whose code it ran (the student's, not a solutions/ the bundle lacks). The lessons' notebooks
    run on it in test_lesson_notebooks.py."""
    with finished(bundle):
        report = json.loads(readme_run(bundle, f"{COMMAND} check --format json").stdout)
        assert report["score"] == report["max_score"] > 0, report
        viz = next(c for c in readme_commands(bundle["readme"]) if shlex.split(c)[:2] == [COMMAND, "viz"])
        proc = readme_run(bundle, viz)
        page = (bundle["root"] / "attention.html").read_text(encoding="utf-8")
        title = re.search(r"<title>(.*)</title>", page)[1]
        model = said(bundle["lang"], "Pronoun model, MultiHeadAttention from {source}, {origin} ({steps} steps)")
        assert model.split("{source}")[0] + "assignments" in title and "solutions" not in title, title
        assert said(bundle["lang"], "wrote {file} ({count} sentence(s), {words} tokens)").split("{file}")[0] \
            + "attention.html" in proc.stdout, proc.stdout
