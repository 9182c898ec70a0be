"""Report formats written from the one result model: JUnit XML, Markdown and gradebook CSV.
(The gradebooks Canvas and Moodle import: :mod:`autograder.delivery.lms`.)

The model's text is already valid Unicode without control characters
(:mod:`autograder.core.safe_text`); each writer here escapes only for its own format: XML
through ElementTree, Markdown with :func:`markdown_text`, CSV cells with :func:`csv_cell`.
"""
from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET

from autograder.core.results import GradeResult
from autograder.core.safe_text import csv_cell

# XML 1.0 admits no C0 control character but tab, newline and carriage return;
# student code controls error messages, so these are stripped before writing.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_text(text: str) -> str:
    return _NOT_XML.sub("", text)


def _points(score: float, max_score: float) -> str:
    return f"points: {score:g}/{max_score:g}"


def to_junit(results: list[GradeResult]) -> str:
    """One <testsuite> per (submission, unit), named ``<submission>.<unit>``, one
    <testcase> per property. The shape is Jenkins xunit's junit-10.xsd: points sit
    in the suite's <properties> (one ``points:<property>`` entry per case) and in
    each case's <system-out>. The result model keeps no durations, so ``time`` is 0."""
    suites = ET.Element("testsuites")
    for result in results:
        for unit in result.units.values():
            failed = sum(t.status == "failed" for t in unit.tests)
            skipped = sum(t.status == "skipped" for t in unit.tests)
            suite_name = xml_text(f"{result.submission}.{unit.name}")
            suite = ET.SubElement(suites, "testsuite", name=suite_name, tests=str(len(unit.tests)),
                                  failures=str(failed), skipped=str(skipped), errors="0", time="0")
            props = ET.SubElement(suite, "properties")
            for name, value in (("submission", result.submission), ("unit", unit.name), ("score", f"{unit.score:g}"),
                                ("max_score", f"{unit.max_score:g}"), ("status", unit.status),
                                ("message", unit.message)):
                ET.SubElement(props, "property", name=name, value=xml_text(value))
            for test in unit.tests:
                ET.SubElement(props, "property", name=xml_text(f"points:{test.name}"),
                              value=f"{test.score:g}/{test.max_score:g}")
            for test in unit.tests:
                case = ET.SubElement(suite, "testcase", classname=suite_name, name=xml_text(test.name), time="0")
                output = xml_text(test.output)
                if test.status == "failed":
                    ET.SubElement(case, "failure", message=output[:500]).text = output
                elif test.status == "skipped":
                    ET.SubElement(case, "skipped", message=output)
                ET.SubElement(case, "system-out").text = _points(test.score, test.max_score)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# HTML's three, then every ASCII punctuation mark CommonMark lets a backslash escape that could
# start markup inside a line (links, images, emphasis, code, tables, autolinks, strikethrough).
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKUP = re.compile(r"[\\`*_\[\]{}()#+\-.!|~:]")


def markdown_text(text: str) -> str:
    """``text`` as inert Markdown on one line: no HTML, link, image, emphasis or table cell of its own."""
    text = "".join(_HTML.get(c, c) for c in one_line(text))
    return _MARKUP.sub(lambda m: "\\" + m.group(), text)



def to_markdown(results: list[GradeResult]) -> str:
    """A report fit for a CI step summary: a table per submission, failures listed."""
    lines = []
    for result in results:
        lines += [f"## {markdown_text(result.submission)}: {result.score:g}/{result.max_score:g}", "",
                  "| unit | score | status |", "|---|---:|---|"]
        lines += [f"| {u.name} | {u.score:g}/{u.max_score:g} | {markdown_text(u.message or u.status)} |" for u in result.units.values()]
        failures = [(u.name, t) for u in result.units.values() for t in u.tests if t.status == "failed"]
        if failures:
            lines += ["", "| unit | property | points | reason |", "|---|---|---:|---|"]
            lines += [f"| {unit} | {markdown_text(t.name)} | {t.score:g}/{t.max_score:g} | {markdown_text(t.output)} |" for unit, t in failures]
        lines.append("")
    return "\n".join(lines)


POINTS_POSSIBLE = "Points Possible"  # the maximum's row, in both layouts (Canvas's label)


_LINE_BREAKS = re.compile(r"\s*[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+\s*")  # what str.splitlines() splits at


def one_line(text: str) -> str:
    return _LINE_BREAKS.sub(" ", text)


def graded(record: dict | None) -> bool:
    """Whether ``record`` holds graded work (a result): only graded work gets a number in a
    gradebook; a refused or ungraded upload's cells are left blank, never 0."""
    return bool((record or {}).get("result"))


def gradebook_csv(names: list[str], possible: dict[str, float], records: list[dict]) -> str:
    """The class gradebook, one line per cell: one row per student record (``student``,
    ``status``, ``result``) and a "Points Possible" row. A record with no result (refused, not
    graded) has blank scores and its reason as its status. (An LMS's own layout: :func:`lms_gradebook`.)"""
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    points = [f"{possible.get(n, 0):g}" for n in names]

    def name(text: str) -> str:  # a student's row never reads as the gradebook's own
        cell = csv_cell(text)
        return "'" + cell if cell.casefold() == POINTS_POSSIBLE.casefold() else cell

    writer.writerow(["student", "status", *names, "total"])
    writer.writerow([POINTS_POSSIBLE, "", *points, f"{sum(possible.get(n, 0) for n in names):g}"])
    for record in records:
        if not graded(record):
            writer.writerow([name(record["student"]), csv_cell(record["status"]), *([""] * len(names)), ""])
            continue
        got = [unit_score(record, n) for n in names]
        writer.writerow([name(record["student"]), csv_cell(record["status"]), *(f"{s:g}" for s in got),
                         f"{sum(got):g}"])
    return table.getvalue()


def unit_score(record: dict | None, unit: str) -> float:
    return ((record or {}).get("result") or {}).get("units", {}).get(unit, {}).get("score", 0)
