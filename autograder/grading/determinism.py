"""Grades are deterministic: hypothesis's settings for grading, its local-constant pool held
empty, and (for speed, with the same examples) each test's digest computed once."""
from __future__ import annotations

import contextlib

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


def memoize_digests():
    """Compute each test's source digest once per process, not on every run of the test.

    Derandomized hypothesis seeds a test's examples from a digest of its source
    (``function_digest``: ``inspect.getsource`` and a re-tokenization), computed twice
    each time the test runs, so once per submission graded: 4% of the time of a unit's
    catalogue graded in one run. While grading, the same function (with the same
    per-item key hypothesis's pytest plugin adds to it) has the same source, so the
    same bytes come from a cache. A private name of the pinned version, like
    :func:`pin_local_constants`; returns the function that restores it.
    """
    import weakref

    from hypothesis import core

    known: weakref.WeakKeyDictionary[object, dict[object, bytes]]  # function -> its extra digest -> bytes
    original, known = core.function_digest, weakref.WeakKeyDictionary()

    def digest(function) -> bytes:
        extra = getattr(function, "_hypothesis_internal_add_digest", None)
        try:
            return known[function][extra]
        except (KeyError, TypeError):  # not yet; or not weakly referable (then not cached)
            value = original(function)
        with contextlib.suppress(TypeError):
            known.setdefault(function, {})[extra] = value
        return value

    core.function_digest = digest
    return lambda: setattr(core, "function_digest", original)
