"""The static scan sees the usual ways of reaching a forbidden function,
and does not flag a student's own functions of the same name."""
from __future__ import annotations

import pytest
import torch

from autograder.forbidden import Traps, scan_source

FORBIDDEN = ("torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax")


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ny = torch.softmax(x, -1)",
        "import torch.nn.functional as F\ny = F.softmax(x, -1)",
        "from torch.nn import functional as fn\ny = fn.softmax(x, -1)",
        "from torch.nn.functional import softmax as sm\n",
        "y = x.softmax(-1)",
        "import torch\ny = getattr(torch, 'softmax')(x)",
        "import importlib\nF = importlib.import_module('torch.nn.functional')\ny = F.softmax(x)",
        "y = __import__('torch').softmax(x)",
    ],
)
def test_scan_finds_forbidden_use(source):
    assert scan_source(source, FORBIDDEN), source


@pytest.mark.parametrize(
    "source",
    [
        "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim, keepdim=True)\ny = softmax(x)",
        "from . import attention\ny = attention.softmax(x)",
        "import torch\ny = torch.exp(x)",
    ],
)
def test_scan_ignores_allowed_code(source):
    assert scan_source(source, FORBIDDEN) == []


def test_traps_record_only_calls_from_the_submission(tmp_path):
    student = tmp_path / "student.py"
    student.write_text("import torch\ndef f(x):\n    return getattr(torch.nn.functional, 'soft' + 'max')(x, -1)\n")
    traps = Traps(FORBIDDEN, tmp_path)
    namespace = {}
    with traps.installed():
        torch.nn.functional.softmax(torch.ones(2), -1)  # the grader's own call
        assert traps.seen == set()
        exec(compile(student.read_text(), str(student), "exec"), namespace)
        namespace["f"](torch.ones(2))
    assert traps.seen == {"torch.nn.functional.softmax"}
    assert torch.nn.functional.softmax.__module__ == "torch.nn.functional", "traps must be removed afterwards"


def test_a_read_only_owner_is_left_to_the_static_scan(tmp_path):
    builtin = ("torch._C._VariableFunctions.lstm_cell",)
    with Traps(FORBIDDEN + builtin, tmp_path).installed():  # no trap fits there: installing must not fail
        assert torch.nn.functional.softmax is not _softmax, "the other traps are still installed"
    assert torch.nn.functional.softmax is _softmax
    assert scan_source("import torch\nh, c = torch._C._VariableFunctions.lstm_cell(x, (h, c), w, u)", builtin)


_softmax = torch.nn.functional.softmax
