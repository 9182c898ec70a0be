"""Hostile submissions that are built from the course's own files at test time.

Each ``make_<name>(root, dest)`` writes a submission folder at ``dest``:
the forbidden-function cases are the reference solution with its softmax
replaced by a call to ``torch.softmax`` (so only the ban can cost them
points); the link cases point at the reference from inside the submission.
"""
from __future__ import annotations

import os
from pathlib import Path

SOFTMAX_BODY = "    peak = x.amax(dim=dim, keepdim=True)\n"

# How each case reaches torch.softmax, and whether the static scan can see it.
FORBIDDEN = {
    "forbidden_direct": ("    return torch.softmax(x, dim)\n", "static"),
    "forbidden_importlib": (
        "    import importlib\n    return importlib.import_module('torch.nn.functional').softmax(x, dim)\n", "static"),
    "forbidden_getattr": (
        "    name = ''.join(['soft', 'max'])\n    return getattr(torch, name)(x, dim)\n", "runtime"),
    "forbidden_builtins": (
        "    fn = vars(__import__('builtins'))['getattr'](torch, 'x_softmax'[2:])\n    return fn(x, dim)\n", "runtime"),
}


def make_forbidden(root: Path, dest: Path, name: str) -> Path:
    source = (root / "solutions" / "attention.py").read_text(encoding="utf-8")
    assert source.count(SOFTMAX_BODY) == 1, "the reference softmax changed: update tests/hostile/generated.py"
    body, _ = FORBIDDEN[name]
    dest.mkdir(parents=True)
    (dest / "attention.py").write_text(source.replace(SOFTMAX_BODY, body + SOFTMAX_BODY), encoding="utf-8")
    return dest


def make_symlink_file(root: Path, dest: Path) -> Path:
    """attention.py is a link to the reference solution."""
    dest.mkdir(parents=True)
    os.symlink(root / "solutions" / "attention.py", dest / "attention.py")
    return dest


def make_symlink_dir(root: Path, dest: Path) -> Path:
    """A link to the solutions folder, imported through the package."""
    dest.mkdir(parents=True)
    os.symlink(root / "solutions", dest / "ref")
    (dest / "attention.py").write_text(
        "from .ref.attention import softmax, causal_mask, scaled_dot_product_attention  # noqa: F401\n",
        encoding="utf-8",
    )
    return dest


def make_slow(root: Path, dest: Path, seconds: float) -> Path:
    """The reference, correct but ``seconds`` slow in every softmax call."""
    source = (root / "solutions" / "attention.py").read_text(encoding="utf-8")
    assert source.count(SOFTMAX_BODY) == 1, "the reference softmax changed: update tests/hostile/generated.py"
    dest.mkdir(parents=True)
    slow = f"    __import__('time').sleep({seconds!r})\n"
    (dest / "attention.py").write_text(source.replace(SOFTMAX_BODY, slow + SOFTMAX_BODY), encoding="utf-8")
    return dest


def make_deep(root: Path, dest: Path, depth: int = 1100) -> Path:
    """The reference at the top, and a folder ``depth`` levels deep beside it
    (deeper than Python's recursion limit)."""
    dest.mkdir(parents=True)
    (dest / "attention.py").write_text((root / "solutions" / "attention.py").read_text(encoding="utf-8"), encoding="utf-8")
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):  # relative to an fd: the path would pass PATH_MAX
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    return dest


def remove_deep(dest: Path) -> None:
    """Remove what :func:`make_deep` made, without recursion."""
    fds = [os.open(dest, os.O_RDONLY | os.O_DIRECTORY)]
    while "d" in os.listdir(fds[-1]):
        fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
    os.close(fds.pop())
    while fds:
        os.rmdir("d", dir_fd=fds[-1])
        os.close(fds.pop())
    (dest / "attention.py").unlink()
    dest.rmdir()


def make_site(root: Path, dest: Path, site: Path) -> Path:
    """A site-packages as a non-editable ``pip install .`` leaves it: ``site``'s
    entries (torch...), linked, and a copy of the reference ``solutions`` package."""
    dest.mkdir(parents=True)
    for entry in os.listdir(site):
        if entry not in ("solutions", "__editable__", "__pycache__") and not entry.startswith("__editable__"):
            os.symlink(site / entry, dest / entry)
    solutions = dest / "solutions"
    solutions.mkdir()
    for file in (root / "solutions").glob("*.py"):
        (solutions / file.name).write_text(file.read_text(encoding="utf-8"), encoding="utf-8")
    return dest
