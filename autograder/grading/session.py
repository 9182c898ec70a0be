"""One grading session: how every entry point starts grading, so the start-up rules hold once.

The rules (each measured or learned the hard way, see :mod:`.forking` and
:mod:`autograder.sandbox.pool`):

- the sandbox's zygote starts before this process imports torch, pytest and hypothesis (its own
  torch import overlaps ours: :meth:`GradingSession.grade` imports them after);
- grading processes forked from this one attach to that zygote (:attr:`GradingSession.pool` is
  what :func:`~autograder.grading.parallel.grade_in_groups` and the batch's servers take);
- a mode that isolates less than full mode says so: printed once, to stderr, and kept in
  :attr:`GradingSession.warning` for the entry point's own results file (Gradescope's and
  PrairieLearn's ``output``, the batch's summary, nbgrader's status);
- the zygote goes at the end, whatever happened.

``tests/project/test_layers.py`` fails when a module outside the sandbox starts a pool any
other way.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from autograder.core.i18n import _
from autograder.core.manifest import Course
from autograder.core.errors import GraderError
from autograder.grading.forking import import_grader

if TYPE_CHECKING:  # (imported where the zygote starts: alive)
    from autograder.sandbox.pool import ZygoteConnection


class GradingSession:
    """``with GradingSession(course) as session: session.grade(folders)``; ``sandbox=False``
    runs student code in the grading process itself (no zygote, no warning: not for real grades).

    ``own``: a zygote of the session's own, never shared with another grade in this process,
    and replaced by :meth:`alive` when it ended (the batch: a killed zygote then costs only the
    chunks it was grading). ``announce=False``: the warning is kept, not printed (a process whose
    parent reports it). ``remember=False``: the suites' reference answers are not kept for the
    next submission (:mod:`autograder.testing.memo`): a process that grades one submission
    (Gradescope, PrairieLearn) asks each question once, and memory is what it is short of.
    ``fork_zygote=True``: in a mode without namespaces, the zygote is forked from this process,
    sharing its torch (:mod:`autograder.sandbox.forked`, which says when a process may).
    """

    def __init__(self, course: Course, *, sandbox: bool = True, announce: bool = True, own: bool = False,
                 remember: bool = True, fork_zygote: bool = False):
        self.course, self.sandbox, self.announce, self.own = course, sandbox, announce, own
        self.remember, self.fork_zygote = remember, fork_zygote
        self.pool: ZygoteConnection | None = None
        self.warning: str | None = None

    def __enter__(self) -> "GradingSession":
        if self.sandbox:
            try:
                self.alive()
            except OSError as error:
                raise GraderError(_("the sandbox could not start: {problem}").format(problem=error)) from None
        return self

    def alive(self):
        """The session's zygote, started (or, for ``own``, replaced) if it is not running.
        Raises OSError (or the sandbox's error) when it cannot start."""
        from autograder.sandbox.pool import Pool, prestart

        # (own: the session's pool is a Pool, whose zygote it started)
        if self.own and self.pool is not None and cast(Pool, self.pool).proc.poll() is not None:
            self.pool.close()
            self.pool = None
        if self.pool is None:
            self.pool = Pool(self.course, fork=self.fork_zygote) if self.own else prestart(self.course, fork=self.fork_zygote)
            if self.warning is None and self.pool.warning:
                self.warning = self.pool.warning
                if self.announce:  # a mode that hides less than full isolation says so, loudly
                    print(f"{self.course.brand.command}: {self.notice}", file=sys.stderr)
        return self.pool

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop (``own``) or release the zygote; nothing happens to one already gone."""
        if self.pool is None:
            return
        if self.own:
            self.pool.close()
        else:
            self.pool.release()
        self.pool = None

    def load_grader(self):
        """The grader's heavy imports (torch, pytest, hypothesis), after the zygote started: for a
        process that forks grading processes (they inherit them)."""
        return import_grader()

    @property
    def notice(self) -> str | None:
        """The warning as a results file records it (None in full mode or unsandboxed)."""
        return f"WARNING: {self.warning}" if self.warning else None

    def grade(self, folders: list[Path], units: list[str] | None = None, **options):
        """:func:`~autograder.grading.grade.grade` on ``folders``, sandboxed as the session is."""
        grade = import_grader()
        if not self.remember:
            from autograder.testing import memo  # (imported with the grader)

            memo.keep_at_most(0)
        return grade(self.course, folders, units=units, sandbox=self.sandbox, **options)


def isolation_notice() -> str | None:
    """The notice a sandboxed session records here (the mode probed once per process, as the
    session's zygote does; nothing is started): also for a results file written when this run
    started no zygote (a batch resumed after its last student)."""
    from autograder.sandbox.isolation import isolation_mode, mode_warning

    warning = mode_warning(isolation_mode())
    return f"WARNING: {warning}" if warning else None
