"""The engine's errors, one tree: every error the engine raises on purpose is an
:class:`AutograderError`, and carries the exit code the command line ends with.

* :class:`UsageError` (2): the user's to fix, bad arguments or a malformed input file (a course
  manifest, a roster, an option); it is a ``ValueError`` too, so a caller that validates with
  ``except ValueError`` still catches it.
* :class:`FailUnder` (1): a score below ``--fail-under``, a result already reported.
* :class:`GraderError` (3): the grader itself failed, never the submission.
* :class:`Interrupted` (130): SIGINT or SIGTERM stopped a command; what was finished is kept.

A bare ``ValueError`` (or any other exception) that escapes a command is the engine's own bug,
and the command line says so (exit 3), never "bad arguments". Two kinds of exception stay out of
the tree on purpose: a removed computation's ``Forbidden`` and a call's ``CallTimeout``
(:mod:`autograder.trust`) derive from ``BaseException``, so that student code cannot catch them.
"""
from __future__ import annotations

__all__ = ["AutograderError", "FailUnder", "GraderError", "Interrupted", "UsageError"]


class AutograderError(Exception):
    """An error the engine raises on purpose; ``exit_code`` is the command line's."""

    exit_code = 3


class UsageError(AutograderError, ValueError):
    """Bad arguments or a malformed input: the user's to fix."""

    exit_code = 2


class FailUnder(AutograderError):
    """A submission scored below ``--fail-under``."""

    exit_code = 1


class GraderError(AutograderError):
    """The grader itself failed (not the submission)."""

    exit_code = 3


class Interrupted(AutograderError):
    """SIGINT or SIGTERM stopped the command; what it finished stays."""

    exit_code = 130
