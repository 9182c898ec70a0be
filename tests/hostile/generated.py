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
