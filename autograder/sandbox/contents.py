"""Host side: what the box holds, read on the trusted side to build it.

The engine files a worker gets (:data:`BOXED`, :func:`engine_files`), the packages torch needs
from site-packages (:func:`package_entries`: each one, never the whole site-packages), the system
folders bound read-only (:data:`SYSTEM_DIRS`), and where the private folder's parts appear in
full mode (:data:`INSIDE`).
"""
from __future__ import annotations

import csv
import functools
import os
import re
import sys
from pathlib import Path


# What a worker imports, copied whole into the box: nothing else of the engine (no grading,
# no delivery, no course data) is there. tests/project/test_layers.py checks the worker needs no more.
BOXED = ("core", "trust", "sandbox/inside")
SYSTEM_DIRS = ("usr", "lib", "lib32", "lib64", "libx32", "bin", "sbin", "etc")


def engine_files(engine: Path) -> list[Path]:
    """The engine's files a worker gets, relative to ``engine`` (the package folder): the
    package's ``__init__``, every file of :data:`BOXED` (each copied whole, so nothing
    is kept in step by hand), and the ``__init__`` of each package above one."""
    found = {Path("__init__.py")}
    for folder in BOXED:
        parts = Path(folder).parts
        found |= {Path(*parts[:i], "__init__.py") for i in range(1, len(parts))}
        found |= {p.relative_to(engine) for p in (engine / folder).rglob("*.py")}
    return sorted(found)


# -- what a worker may see ---------------------------------------------------------------

INSIDE = Path("/sandbox")  # where the zygote sees the private folder's parts, under bwrap
ROOTS = ("torch", "numpy")  # what the worker imports from site-packages; their requirements follow


def _distributions(roots=ROOTS) -> list:
    """The installed distributions ``roots`` need, requirements followed (extras skipped)."""
    from importlib import metadata

    seen, todo, found = set(), list(roots), []
    while todo:
        name = re.split(r"[ ;<>=!~\[(]", todo.pop().strip(), maxsplit=1)[0].lower().replace("_", "-")
        if not name or name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform
        found.append(dist)
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
    return found


@functools.cache
def package_entries(roots=ROOTS) -> dict[str, list[str]]:
    """site folder -> its top-level entries that belong to ``roots``' distributions.

    Only these are bound into the sandbox, never the whole site-packages: a
    non-editable install puts the course's own packages (``solutions``...) there.
    Read once per process (a pool start asks twice), from the names in each
    distribution's file list: ``dist.files`` makes a path object of each of torch's
    15,000 files, 0.5 s of every grade.
    """
    entries: dict[str, set[str]] = {}
    for dist in _distributions(roots):
        site = str(dist.locate_file(""))
        for top in _top_entries(dist):
            if top not in ("", "..", "__pycache__") and not top.endswith(".pth"):
                entries.setdefault(site, set()).add(top)
    return {site: sorted(names) for site, names in entries.items()}


def _top_entries(dist) -> set[str]:
    """The first path part of every file ``dist`` installed (RECORD's rows, else ``dist.files``)."""
    record = dist.read_text("RECORD")
    if record is None:
        return {file.parts[0] for file in dist.files or [] if file.parts}
    return {row[0].split("/", 1)[0] for row in csv.reader(record.splitlines()) if row}



def base_sites() -> set[str]:
    import sysconfig

    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    return {p for p in (paths["purelib"], paths["platlib"]) if os.path.isdir(p)}

