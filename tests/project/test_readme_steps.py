"""The README's instructor steps run as written, in the order given (issue 46, item 6).

Each ``attn-course`` line of the sections below is run in order, its placeholder paths
(``path/to/...``, a bare output file) put under a temporary folder; the lines of the sections'
other tools (docker) and those needing a class of submissions (nbgrader's, grade-batch's: their
own tests run them) are left out. A section whose order fails (``export classroom`` before the
bundle exists, say) fails here.
"""
from __future__ import annotations

import re
import shlex

import pytest

from conftest import ROOT, attn_course

SECTIONS = ("Instructors: GitHub Classroom", "Instructors: Gradescope", "Instructors: PrairieLearn")


def steps(section: str) -> list[list[str]]:
    """The section's ``attn-course`` command lines, as argument lists, comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for block in re.findall(r"```sh\n(.*?)```", body, re.S) for line in block.splitlines()]
    return [shlex.split(line, comments=True) for line in lines if line.startswith("attn-course ")]


def placed(args: list[str], tmp) -> list[str]:
    """``args`` with every placeholder path under ``tmp``."""
    out = []
    for i, arg in enumerate(args):
        if arg.startswith("path/to/"):
            arg = str(tmp / arg.removeprefix("path/to/"))
        elif i and args[i - 1] in ("-o", "--output"):
            arg = str(tmp / arg)
        out.append(arg)
    return out


@pytest.mark.parametrize("section", SECTIONS)
def test_the_section_runs_in_the_order_written(section, tmp_path):
    commands = steps(section)
    assert commands, f"no attn-course step in the README's {section!r}"
    for args in commands:
        proc = attn_course(*placed(args[1:], tmp_path), check=False)
        assert proc.returncode == 0, f"{' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    expect = {"Instructors: GitHub Classroom": "template-repo/.github/workflows/classroom.yml",
              "Instructors: Gradescope": "autograder.zip",
              "Instructors: PrairieLearn": "course/questions/attention-course/info.json"}[section]
    assert expect in written, written[:20]


def test_readme_moodle_import_names_the_mapping_fields_the_export_uses():
    """Moodle's "Import grades from CSV" maps the file before it imports (issue 59): the README's
    steps name the form's fields, the user column the gradebook is keyed by ([lms]
    moodle_identifier, with the user field Moodle maps it to) and the columns the export writes."""
    import csv

    from autograder.core.manifest import load_course
    from autograder.delivery.lms_settings import MOODLE_IDENTIFIERS, lms_settings

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = text.split("## Instructors: the command line\n", 1)[1].split("\n## ", 1)[0]
    steps = " ".join(body.split("Moodle's import (", 1)[1].split("\n\n", 2)[:2][1].split())
    assert "imports as it is" not in " ".join(body.split()), "Moodle's import needs its mapping steps"
    for field in ("Identify user by", "Map from", "Map to", "Grade item mappings", "Ignore", "Upload grades",
                  "Force import"):
        assert f"**{field}**" in steps or f'"{field}"' in steps, field
    identifier = lms_settings(load_course(ROOT)).moodle_identifier
    user_field = dict(zip(MOODLE_IDENTIFIERS, ("useremail", "useridnumber", "username")))
    assert f"`{identifier}`" in steps and f"`{user_field[identifier]}`" in steps
    for name, moodle in user_field.items():
        assert f"`{name}` is `{moodle}`" in steps
    with (ROOT / "tests" / "vendor" / "lms" / "moodle_export.csv").open(newline="", encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    assert identifier in header
    for column in ("Course total", "Last downloaded from this course"):
        assert any(c.startswith(column) for c in header) and f"`{column}`" in steps
    assert "`(Real)`" in steps and "`(Feedback)`" in steps
    assert all(re.search(r" \((Real|Feedback)\)\Z", c) for c in header[6:-1])
