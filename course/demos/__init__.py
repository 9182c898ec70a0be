"""The course's demos: one small function per claim of the lessons.

Every demo module has ``NAME``, ``TITLE``, ``UNIT`` (the lesson it belongs to)
and ``run(out_dir, *, size="full", units=None) -> dict``: it saves
``out_dir/NAME.png`` (matplotlib, Agg backend) and returns the numbers it
plotted, so tests can check the claim. ``size="small"`` is what the tests run.
``quotes(result)`` gives the numbers the lessons quote from it, as they write
them (and ``timings(result)`` the times, which they quote as a range over runs):
``course/lessons/measured.json`` holds the reference's, ``course/make_plots.py
--record`` writes it. A lesson's demo cell is :func:`run_and_show` on the units
:func:`units_for` picks (the setup cell's ``SOURCE``).
``units`` chooses the implementation (see :func:`load_units`); by default the
reference ``solutions/`` (in a student's bundle, their own ``assignments/``).
A unit still a stub raises :class:`UnitNotImplemented`, whose message names
the file to implement first.
"""
from __future__ import annotations

from . import (capstone, heads, order, path_length, price, residual_depth, rnn_decay, scaling, seq2seq,
               serial_time)
from ._common import (AUTO, NOTEBOOK, SIZES, UnitNotImplemented, Units, code_for, load_units, run_and_show, show,
                      units_for)
from . import decode_time, efficient_memory  # unit 6, claims 10 and 11

# In the order of the claims 1..9, the seq2seq bottleneck (1b) beside claim 1.
DEMOS = {module.NAME: module for module in (
    rnn_decay, seq2seq, serial_time, path_length, scaling, heads, order, residual_depth, capstone, price)}
DEMOS.update({module.NAME: module for module in (efficient_memory, decode_time)})

__all__ = ["AUTO", "DEMOS", "NOTEBOOK", "SIZES", "UnitNotImplemented", "Units", "code_for", "load_units", "run_and_show",
           "run_demo", "show", "units_for"]


def run_demo(name: str, out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Run one demo by name."""
    if name not in DEMOS:
        raise ValueError(f"no demo named {name!r}; the demos are {', '.join(DEMOS)}")
    return DEMOS[name].run(out_dir, size=size, units=units)
