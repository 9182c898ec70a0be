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
