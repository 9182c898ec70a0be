"""The course manifest (``course.toml``): units, files, paths, names and rules.

Everything the engine knows about a course comes from here. The one path the
engine itself fixes is where the manifest is found (:data:`MANIFEST`).
"""
from __future__ import annotations

import datetime
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from autograder.core.errors import UsageError
from autograder.core.i18n import _
from autograder.core.lateness import LatePolicy, parse_due
from autograder.core.settings import Limits

MANIFEST = Path("course") / "course.toml"
ROOT_ENV = "AUTOGRADER_COURSE_ROOT"


@dataclass(frozen=True)
class Rules:
    """What a unit file may reach (course.toml ``[rules]``), enforced by ``allowlist.scan``."""

    modules: tuple[str, ...]  # modules a unit may import or reach, exact dotted names
    deny: tuple[str, ...]  # fnmatch patterns of names refused inside allowed modules
    builtins: tuple[str, ...]  # builtin names a unit may use
    admit: tuple[str, ...] = ()  # fnmatch patterns admitted although a deny pattern covers them
    # Module trees of Python-built copies of forbidden computations, erased in the worker (``enforce.erase``).
    erase: tuple[str, ...] = ()


@dataclass(frozen=True)
class Unit:
    name: str
    title: str
    file: str
    forbidden: tuple[str, ...] = ()
    # Sibling modules replaced by trusted stand-ins while this unit is graded,
    # so that a bug in one unit never costs points in another.
    stand_ins: dict[str, str] = field(default_factory=dict)
    # Kernel families (course.toml [kernels]) enforced in the dispatcher while the unit's code runs.
    kernels: tuple[str, ...] = ()
    # Stand-in sibling -> the only entry points that may use it (a sibling not named: every one).
    stand_ins_for: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # When it is due (course.toml ``due``, an offset date-time, held in UTC); None: never late.
    due: datetime.datetime | None = None
    # A file (relative to the course root) whose classes stand in, in the worker, for the torch.nn
    # modules the unit's tests hand to its code (``New("torch.nn.X")``), written from allowed primitives.
    handed: str | None = None

    def files(self) -> list[str]:
        """The course files a worker grading this unit needs: its stand-ins and its handed modules."""
        return [*self.stand_ins.values(), *([self.handed] if self.handed else [])]


@dataclass(frozen=True)
class Branding:
    """The names students and instructors see (course.toml ``[branding]``)."""

    command: str
    student_package: str
    metadata_key: str
    demo_tag: str


@dataclass(frozen=True)
class CourseUnits:
    """What grading a course's units needs of it: the units, where the suites and the answers lie,
    the rules, the kernel families and the limits. A sandboxed worker rebuilds one of these (its
    folders absent, :mod:`autograder.sandbox.inside.worker`) and knows nothing more of the course;
    the grader's side has the whole :class:`Course`."""

    root: Path
    name: str
    units: dict[str, Unit]
    solutions: Path
    assignments: Path
    hidden_tests: Path
    public_tests: Path
    # What a unit file may reach (course.toml ``[rules]``); None: no allow-list.
    rules: Rules | None = None
    # Kernel families: name -> substrings of dispatcher operator names (course.toml ``[kernels]``).
    kernels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The engine's limits (course.toml ``[limits]``, :mod:`autograder.core.settings`); the defaults by default.
    limits: Limits = field(default_factory=Limits)

    def unit_for_file(self, filename: str) -> Unit | None:
        return next((u for u in self.units.values() if u.file == filename), None)

    def select(self, names: list[str] | None) -> list[Unit]:
        """The units named (all of them when ``names`` is empty), in course order."""
        if not names:
            return list(self.units.values())
        unknown = [n for n in names if n not in self.units]
        if unknown:
            raise UsageError(_("unknown unit(s) {names}; the units are {units}").format(names=", ".join(unknown),
                                                                                        units=", ".join(self.units)))
        return [u for u in self.units.values() if u.name in names]


@dataclass(frozen=True, kw_only=True)
class Course(CourseUnits):
    """A course as its ``course.toml`` describes it (:func:`load_course`)."""

    lessons: Path
    nbgrader_course: Path
    api: Path
    student_readme: Path
    brand: Branding
    # The course's message catalogues (<locale>/<lang>/LC_MESSAGES/messages.po, autograder.core.i18n); None: English only.
    locale: Path | None = None
    student_bundle: tuple[str, ...] = ()
    language: str = "en"  # the notebooks' language, where a command is not told another
    # What the student bundle's own files need beyond the engine's (its lessons' plots, a viewer's weights).
    student_requires: tuple[str, ...] = ()
    # Extra CLI commands the course provides: name -> file (relative to root) with main(argv).
    commands: dict[str, str] = field(default_factory=dict)
    # What late work costs (course.toml ``[late]``, :mod:`autograder.core.lateness`); none by default.
    late: LatePolicy = field(default_factory=LatePolicy)

    @property
    def nbgrader_source(self) -> Path:
        """nbgrader's source folder: ``source/`` is nbgrader's own default name under its course folder."""
        return self.nbgrader_course / "source"


def find_root(start: Path | None = None) -> Path:
    """The course root: $AUTOGRADER_COURSE_ROOT, else the nearest folder above ``start``
    (default: this package) that holds ``course/course.toml``."""
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env).resolve()
    here = (start or Path(__file__)).resolve()
    for folder in [here, *here.parents]:
        if (folder / MANIFEST).is_file():
            return folder
    raise FileNotFoundError(f"no {MANIFEST} above {here}; set {ROOT_ENV} to the course folder")


def load_course(root: Path | None = None) -> Course:
    root = (root or find_root()).resolve()
    if not (root / MANIFEST).is_file():
        raise FileNotFoundError(f"no {MANIFEST} in {root}" + (f" (named by ${ROOT_ENV})" if os.environ.get(ROOT_ENV) else ""))
    data = tomllib.loads((root / MANIFEST).read_text(encoding="utf-8"))
    paths = data["paths"]
    units = {
        name: Unit(
            name=name,
            title=spec["title"],
            file=spec["file"],
            forbidden=tuple(spec.get("forbidden", ())),
            stand_ins=dict(spec.get("stand_ins", {})),
            kernels=tuple(spec.get("kernels", ())),
            stand_ins_for={sibling: tuple(entries) for sibling, entries in spec.get("stand_ins_for", {}).items()},
            handed=spec.get("handed"),
            due=parse_due(spec["due"], f"{MANIFEST}: [units.{name}] due") if "due" in spec else None,
        )
        for name, spec in data["units"].items()
    }
    unknown = sorted({f for u in units.values() for f in u.kernels} - set(data.get("kernels", {})))
    if unknown:
        raise UsageError(f"{MANIFEST}: units name kernel families [kernels] does not define: {', '.join(unknown)}")
    return Course(
        root=root,
        name=data["course"]["name"],
        units=units,
        solutions=root / paths["solutions"],
        assignments=root / paths["assignments"],
        hidden_tests=root / paths["hidden_tests"],
        public_tests=root / paths["public_tests"],
        lessons=root / paths["lessons"],
        nbgrader_course=root / paths["nbgrader_course"],
        api=root / paths["api"],
        locale=root / paths["locale"] if "locale" in paths else None,
        student_readme=root / paths["student_readme"],
        student_bundle=tuple(paths["student_bundle"]),
        brand=Branding(**data["branding"]),
        language=data["course"].get("language", "en"),
        student_requires=tuple(data["course"].get("student_requires", ())),
        commands=dict(data.get("commands", {})),
        kernels={name: tuple(parts) for name, parts in data.get("kernels", {}).items()},
        rules=Rules(**{k: tuple(v) for k, v in data["rules"].items()}) if "rules" in data else None,
        late=LatePolicy.from_table(data.get("late"), f"{MANIFEST}: [late]"),
        limits=Limits.from_table(data.get("limits"), f"{MANIFEST}: [limits]"),
    )
