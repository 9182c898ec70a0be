"""The student bundle: what students get, and nothing they must not see.

It holds what course.toml's ``[paths] student_bundle`` lists: the stubs, the
public tests, the engine (so ``check`` works), the course manifest, the
lessons, demos and viewer, and the API page (the contract the stubs' docstrings
cite); with a minimal pyproject.toml so that ``pip install -e .`` works. It
never holds solutions/, tests/hidden/, the mutants, or the stand-ins (correct
code for units 2 and 3, written over torch: shipping them would hand out
answers; the lessons and demos then run on the student's own units).

The course's message catalogues (course.toml ``[paths] locale``) ship as far as a shipped file writes
their messages (:func:`~autograder.authoring.catalogue.for_students`): the advice only the hidden
suites give stays with them; the engine's ship inside ``autograder/``.

Its notebooks are in the languages asked for (the lesson folders of the others are left out),
and its manifest's ``language`` is one of them, so the bundle's commands default to a language
it holds. ``tests/project/test_bundle.py`` installs it as its README says into a venv that sees
nothing of this one, and runs the README's steps in each language.

The pages students read come in the bundle's languages. A translation sits beside its page as
``<stem>.<lang><suffix>`` (``course-api.zh.md``, ``student_readme.zh.md``; ``translation()``); a
language without one reads the page itself. Every file the bundle lists ships as it is, and with it
its translation into each language released: the API page (course.toml ``[paths] api``) itself is
in every bundle, since it is the one the engine reads (``repro`` takes a unit's API from its
section) and the stubs cite, and a bundle holding Chinese holds ``course-api.zh.md`` beside it (a
bundle of both languages, both pages). The README is written once, in the bundle's language (its
manifest's), from that language's README, and its ``{api}`` names that language's page: a zh bundle's
README.md is Chinese and sends its readers to ``docs/course-api.zh.md``, which
``tests/project/test_api_page_languages.py`` holds equal in content to the English page.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat

from autograder.core.errors import UsageError
from autograder.authoring.catalogue import for_students
from autograder.authoring.contract import translation
from autograder.authoring.lesson import languages, lesson_source
from autograder.authoring.notebook import build_notebook
from autograder.delivery.classroom import Classroom
from autograder.core.manifest import MANIFEST, Course, load_course
from autograder.core.versions import project_requirements

PYPROJECT = """[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "{package}"
version = "0.1.0"
description = "Your work for {course}: fill in assignments/, check it with `{command} check`."
requires-python = ">=3.11"
# Install torch first (the CPU wheel: pip install torch --index-url https://download.pytorch.org/whl/cpu).
# hypothesis is the grader's own version: the public tests then see the grader's examples.
# The engine's needs come first (check, repro, and a Jupyter kernel for the notebooks: the
# grader's pyproject.toml, extra "student"); the course's own (course.toml's student_requires:
# what its lessons, demos and viewer import) follow.
dependencies = [{requires}]

[project.scripts]
{command} = "autograder.cli:main"

# The engine, your units, and the course's lessons and demos (course.demos), importable
# from anywhere once installed with `pip install -e .`.
[tool.setuptools.packages.find]
include = ["autograder*", "assignments*", "course*"]
"""

# Pinned to the grader's own version: hypothesis's examples are a function of it (torch is the
# student's own build, CUDA or not).
PINNED = ("hypothesis",)


def requires(course: Course) -> list[str]:
    """The bundle's dependencies: the engine's (pyproject.toml's ``student`` extra: what check and
    repro import, and the kernel the notebooks run in; tests/project/test_bundle.py imports every
    module of the bundle in a venv holding only these), then the course's own."""
    engine = project_requirements("student", pinned=PINNED)
    return engine + [r for r in course.student_requires if r not in engine]


def release(course: Course, out: Path, langs: list[str] | None = None) -> Path:
    """Write the bundle into the new folder ``out``, its notebooks in ``langs`` (default: every
    language the lessons are written in)."""
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose a new folder")
    unknown = set(langs or ()) - set(languages(course))
    if unknown:
        raise UsageError(f"no lessons in {', '.join(sorted(unknown))}; they are written in {', '.join(languages(course))}")
    langs = list(dict.fromkeys(langs or languages(course)))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in course.student_bundle:
        source, target = course.root / name, out / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=ignore)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
            for lang in langs:  # a page ships with its translations into the languages released
                translated = translation(source, lang)
                if translated != source:
                    shutil.copy(translated, out / translated.relative_to(course.root))
    lessons = out / course.lessons.relative_to(course.root)
    for lang in set(languages(course)) - set(langs):  # a language not released is not in the bundle
        shutil.rmtree(lessons / lang, ignore_errors=True)
    language = course.language if course.language in langs else langs[0]
    _set_language(out, language)
    brand = course.brand
    (out / "pyproject.toml").write_text(PYPROJECT.format(
        package=brand.student_package, course=course.name, command=brand.command,
        requires=", ".join(json.dumps(r) for r in requires(course))), encoding="utf-8")
    # The course writes what its students read, in the bundle's language; the engine fills in the names.
    (out / "README.md").write_text(translation(course.student_readme, language).read_text(encoding="utf-8").format(
        course=course.name, command=brand.command,
        api=translation(course.api, language).relative_to(course.root).as_posix()), encoding="utf-8")
    _student_notebooks(course, lessons, langs)
    if course.locale is not None:  # the course's messages, as far as a shipped file writes them
        for_students(course, out / course.locale.relative_to(course.root), course.hidden_tests)
    (out / ".github" / "workflows").mkdir(parents=True)
    (out / ".github" / "workflows" / "classroom.yml").write_text(Classroom().workflow(course), encoding="utf-8")
    return out


def _set_language(out: Path, lang: str) -> None:
    """Make ``lang`` the bundle manifest's ``[course] language``: the language its commands
    (``python -m <lessons>``, ``build``) use when not told one, so it is one the bundle holds."""
    manifest = out / MANIFEST
    text = manifest.read_text(encoding="utf-8")
    course_table = re.search(r"(?ms)^\[course\][ \t]*(?:#[^\n]*)?$(.*?)(?=^\[|\Z)", text)  # a comment may follow
    if course_table is None:
        raise UsageError(f"{manifest}: no [course] table to set the language in (write its header on a line of its own)")
    line = f"language = {json.dumps(lang)}"
    body = re.sub(r'(?m)^language\s*=\s*"[^"\n]*"', lambda _: line, course_table[1], count=1)
    if body == course_table[1] and not re.search(r"(?m)^language\s*=", body):
        body = f"\n{line}" + body
    manifest.write_text(text[:course_table.start(1)] + body + text[course_table.end(1):], encoding="utf-8")
    if load_course(out).language != lang:
        raise UsageError(f"{manifest}: could not set [course] language = {lang!r}")


def _student_notebooks(course: Course, folder: Path, langs: list[str]) -> None:
    """Each lesson, in each of ``langs``, as the notebook a student gets (the bundle has no
    solutions to build it from): ``<lessons>/<lang>/<unit>.ipynb``."""
    for lang in langs:
        for unit in course.units:
            if lesson_source(course, unit, lang) is not None:
                nb = build_notebook(course, unit, lang=lang, student=True)
                nbformat.write(nb, str(folder / lang / f"{unit}.ipynb"))
