"""The library versions a grade depends on, carried into the environments this package writes.

Hypothesis's examples are a function of its version, and torch's arithmetic of
its own. The Gradescope image and the Classroom workflow install exactly the
torch and hypothesis this grader runs, so a submission scores the same there
as here; the student bundle pins hypothesis only (students bring their own torch).

What those environments install at all is listed once, in the engine's own ``pyproject.toml``
(the file beside ``autograder/``): the extras of ``[project.optional-dependencies]``, which
:func:`project_requirements` reads with tomllib when an environment is written (``export``,
``release``), never at import. In the course repository that is the repository's pyproject, the
one ``pip install -e .`` installs from, so it is never stale (an editable install's metadata is
until it is reinstalled). A student's bundle has its own, generated pyproject without these
extras: nothing a student runs writes a grading environment, and its modules import without it.
"""
from __future__ import annotations

import re
from collections.abc import Collection
from typing import cast
from importlib.metadata import version
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"  # the engine's project


def requirement(name: str) -> str:
    """``name==X.Y.Z`` for the installed distribution (a local tag such as ``+cpu`` dropped)."""
    return f"{name}=={version(name).split('+')[0]}"


def requirement_name(spec: str) -> str:
    """The normalized distribution name a requirement names (``Foo_Bar[x]>=1`` -> ``foo-bar``)."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if not found:
        raise ValueError(f"not a requirement: {spec!r}")
    return re.sub(r"[-_.]+", "-", found[1]).lower()


def project_requirements(extra: str, *, pinned: Collection[str] = (), pyproject: Path = PYPROJECT) -> list[str]:
    """The requirements of the extra ``extra`` of ``pyproject`` (``[project.optional-dependencies]``),
    as written there, in order and once each; the project's own extras that it names
    (``<project>[engine]``) are expanded in place. A requirement of a distribution in ``pinned`` is
    this grader's installed version instead (:func:`requirement`).

    Raises ValueError when the file or the extra is not there (a student's bundle has neither)."""
    import tomllib  # here: only the commands that write an environment read the file

    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        extras = project["optional-dependencies"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"the grader's dependencies are read from the engine's pyproject.toml "
                         f"([project.optional-dependencies]), and {pyproject} has none ({error})") from None
    own, pins = requirement_name(project["name"]), {requirement_name(p) for p in pinned}
    found: dict[str, str] = {}

    def expand(name: str, seen: tuple[str, ...]) -> None:
        if name not in extras:
            raise ValueError(f"{pyproject}: no extra {name!r} in [project.optional-dependencies]")
        for spec in extras[name]:
            key = requirement_name(spec)
            if key == own:  # the project's own extras, e.g. "<project>[engine]" (none: nothing to add)
                named = re.search(r"\[([^\]]*)\]", spec)
                for sub in named[1].split(",") if named else ():
                    if sub.strip() not in seen:
                        expand(sub.strip(), (*seen, sub.strip()))
            elif key not in found:
                found[key] = (requirement(cast(re.Match[str], re.match(r"\s*([^\s\[<>=!~;]+)", spec))[1])
                              if key in pins else spec)
    expand(extra, (extra,))
    return list(found.values())
