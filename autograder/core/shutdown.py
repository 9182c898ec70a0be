"""A process's exit without its last garbage collection.

The interpreter's shutdown garbage-collects every object torch, pytest and hypothesis made:
0.7 s of every grading process, a third of ``import torch``. Frozen (``gc.freeze``), they are
only freed. For a process's entry point only: a long-lived process that froze its objects
would never collect their cycles.
"""
from __future__ import annotations

import gc
from typing import TypeVar

_Code = TypeVar("_Code", bound=int | None)  # what the entry point returned, passed through


def exit_code(code: _Code) -> _Code:
    """``code``, once this process's objects are frozen: ``raise SystemExit(exit_code(main()))``."""
    gc.freeze()
    return code
