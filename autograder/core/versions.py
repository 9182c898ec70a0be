"""The library versions a grade depends on, carried into the environments this package writes.

Hypothesis's examples are a function of its version, and torch's arithmetic of
its own. The Gradescope image and the Classroom workflow install exactly the
torch and hypothesis this grader runs, so a submission scores the same there
as here; the student bundle pins hypothesis only (students bring their own torch).
"""
from __future__ import annotations

from importlib.metadata import version


def requirement(name: str) -> str:
    """``name==X.Y.Z`` for the installed distribution (a local tag such as ``+cpu`` dropped)."""
    return f"{name}=={version(name).split('+')[0]}"
