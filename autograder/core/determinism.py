"""Grades are deterministic: hypothesis's settings for grading, and its local-constant pool held empty."""
from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

PROFILE = "autograder-grading"
EXPLORE = "autograder-explore"  # course authors only: fresh examples from --hypothesis-seed


def use_profile(*, explore: bool = False) -> None:
    """Load hypothesis's grading settings: derandomized examples, no example database, no
    deadline (or, with ``explore``, the same with fresh examples)."""
    grading = settings(
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        max_examples=20,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
    )
    settings.register_profile(PROFILE, grading)
    settings.register_profile(EXPLORE, grading, derandomize=False)
    settings.load_profile(EXPLORE if explore else PROFILE)


def pin_local_constants():
    """Stop hypothesis mixing literals from whatever local modules are loaded into its examples.

    Since 6.131 hypothesis sometimes draws a constant found in any non-installed
    module in ``sys.modules``. The examples then depend on what this process
    happened to import: student code graded in-process, a wrapper script, the
    order units load. Grades must depend only on the test and the pinned
    hypothesis version, so the local pool is held empty while grading (its
    built-in constants stay). Returns the function that restores it. These are
    private names of the pinned version: a new version without them fails here,
    loudly, rather than grading on examples nobody has checked.
    """
    from hypothesis.internal.conjecture import providers

    original, empty = providers._get_local_constants, providers.Constants()

    def swap(function):
        providers._get_local_constants = function
        providers.CONSTANTS_CACHE.cache.clear()  # it holds the pool it was computed from

    swap(lambda: empty)
    return lambda: swap(original)
