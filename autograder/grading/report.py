"""Terminal reports, drawn with rich."""
from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autograder.core.i18n import N_, _
from autograder.grading.messages import split_reproduce
from autograder.core.results import NOT_IMPLEMENTED, GradeResult, UnitResult


def _points(score: float, max_score: float) -> str:
    return f"{score:g}/{max_score:g}"


def _summary(unit: UnitResult) -> str | None:
    """The one reason that covers every property of the unit (skips aside), if there is one."""
    counted = [t for t in unit.tests if t.status != "skipped"]
    if not counted or len({t.status for t in counted}) != 1:
        return None
    outputs = {t.output for t in counted}
    if len(outputs) == 1:
        return outputs.pop()
    for stub in dict.fromkeys((_(NOT_IMPLEMENTED), NOT_IMPLEMENTED)):
        if all(stub in o for o in outputs):
            return stub
    return None


def reproduce_commands(result: GradeResult, *, verbose: bool = False) -> list[tuple[str, str]]:
    """(unit / property, command) of every failure the table shows a row of (a unit summed up in
    one row, all its properties failing alike, shows none) that carries a reproduce command."""
    found = []
    for unit in result.units.values():
        if _summary(unit) is not None and not verbose:
            continue
        for test in unit.tests:
            command = split_reproduce(test.output)[1] if test.status == "failed" else None
            if command:
                found.append((f"{unit.name} / {test.name}", command))
    return found


# A unit's status as the table shows it (the result keeps the English word, which formats read).
STATUSES = {"unavailable": N_("unavailable"), "forbidden": N_("forbidden")}


def grade_table(result: GradeResult, *, verbose: bool = False) -> Table:
    table = Table(title=f"{result.submission}: {_points(result.score, result.max_score)}", title_justify="left")
    table.add_column(_("Unit"), style="bold")
    table.add_column(_("Property"))
    table.add_column(_("Points"), justify="right")
    table.add_column(_("Reason"), overflow="fold")
    for unit in result.units.values():
        # Student code controls the messages: escape them, never render them as markup.
        if unit.status != "graded":
            table.add_row(unit.name, f"[red]{escape(_(STATUSES.get(unit.status, unit.status)))}[/red]", "",
                          escape(unit.message))
        elif unit.message:  # the units it builds on, said first (autograder/grading/prerequisites.py)
            label = _("builds on")  # (a call inside an f-string is one Babel's extractor does not see)
            table.add_row(unit.name, f"[yellow]{escape(label)}[/yellow]", "", escape(unit.message))
        summary = _summary(unit)
        if not unit.tests:
            table.add_row(unit.name, _("no properties selected"), _points(0, 0), "")
        elif summary is not None and not verbose:
            counted = [t for t in unit.tests if t.status != "skipped"]
            skipped = len(unit.tests) - len(counted)
            note = _(" ({count} skipped)").format(count=skipped) if skipped else ""
            row = (_("all {count} properties hold{note}") if counted[0].status == "passed"
                   else _("all {count} properties fail{note}")).format(count=len(counted), note=note)
            table.add_row(unit.name, row, _points(unit.score, unit.max_score), escape(summary))
        else:
            for test in unit.tests:
                colour = {"passed": "green", "failed": "red", "skipped": "yellow"}[test.status]
                # The reproduce command is printed under the table, on a line of its own to copy.
                reason = escape(split_reproduce(test.output)[0]) if test.status != "passed" else ""
                table.add_row(unit.name, escape(test.name), f"[{colour}]{_points(test.score, test.max_score)}[/{colour}]", reason)
            total = escape(_("unit total"))
            table.add_row(unit.name, f"[bold]{total}[/bold]", f"[bold]{_points(unit.score, unit.max_score)}[/bold]", "", end_section=True)
    return table


def print_results(results: list[GradeResult], *, verbose: bool = False, console: Console | None = None) -> None:
    # Piped output (make, CI logs) gets a wide table rather than rich's 80 columns.
    console = console or (Console() if sys.stdout.isatty() else Console(width=160))
    for result in results:
        console.print(grade_table(result, verbose=verbose))
        commands = reproduce_commands(result, verbose=verbose)
        if commands:
            console.print(_("To see your answer beside the expected one, run (each command is one line):"), highlight=False)
        for where, command in commands:  # never wrapped, never read as markup: copied as printed
            console.print(f"  {where}:", markup=False, highlight=False, soft_wrap=True)
            console.print(f"    {command}", markup=False, highlight=False, soft_wrap=True)
