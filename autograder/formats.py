"""Report formats written from the one result model: JUnit XML and Markdown."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from .results import GradeResult


def to_junit(results: list[GradeResult]) -> str:
    """One <testsuite> per (submission, unit), one <testcase> per property;
    points go in <properties>, as CI dashboards read them."""
    suites = ET.Element("testsuites")
    for result in results:
        for unit in result.units.values():
            failed = sum(t.status == "failed" for t in unit.tests)
            skipped = sum(t.status == "skipped" for t in unit.tests)
            suite = ET.SubElement(suites, "testsuite", name=unit.name, tests=str(len(unit.tests)),
                                  failures=str(failed), skipped=str(skipped), errors="0")
            props = ET.SubElement(suite, "properties")
            for name, value in (("submission", result.submission), ("score", unit.score),
                                ("max_score", unit.max_score), ("status", unit.status)):
                ET.SubElement(props, "property", name=name, value=str(value))
            for test in unit.tests:
                case = ET.SubElement(suite, "testcase", classname=unit.name, name=test.name)
                case_props = ET.SubElement(case, "properties")
                ET.SubElement(case_props, "property", name="score", value=f"{test.score:g}")
                ET.SubElement(case_props, "property", name="max_score", value=f"{test.max_score:g}")
                if test.status == "failed":
                    ET.SubElement(case, "failure", message=test.output[:500]).text = test.output
                elif test.status == "skipped":
                    ET.SubElement(case, "skipped", message=test.output)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(results: list[GradeResult]) -> str:
    """A report fit for a CI step summary: a table per submission, failures listed."""
    lines = []
    for result in results:
        lines += [f"## {result.submission}: {result.score:g}/{result.max_score:g}", "",
                  "| unit | score | status |", "|---|---:|---|"]
        lines += [f"| {u.name} | {u.score:g}/{u.max_score:g} | {_cell(u.message or u.status)} |" for u in result.units.values()]
        failures = [(u.name, t) for u in result.units.values() for t in u.tests if t.status == "failed"]
        if failures:
            lines += ["", "| unit | property | points | reason |", "|---|---|---:|---|"]
            lines += [f"| {unit} | {_cell(t.name)} | {t.score:g}/{t.max_score:g} | {_cell(t.output)} |" for unit, t in failures]
        lines.append("")
    return "\n".join(lines)
