"""The static scan sees the usual ways of reaching a forbidden function and the
constructs that hide one, reading the text Python runs; the dispatcher hook sees
the operation whatever the route; honest code is flagged by neither."""
from __future__ import annotations

import pytest
import torch

from autograder.core.forbidden import Operators, Traps, Use, scan_file, scan_source
from autograder.core.loader import LoadError, load_unit, read_source
from autograder.core.manifest import load_course
from autograder.core.protocol import Call
from autograder.core.subject import InProcessSubject
import mutants
from conftest import ROOT, grade_json

COURSE = load_course(ROOT)
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


# -- constructs that have no place in a unit file ------------------------------------

@pytest.mark.parametrize(
    "source, construct",
    [
        ("import torch\nf = eval('torch.softmax')", "eval"),
        ("exec('y = 1')", "exec"),
        ("code = compile('1', 'f', 'eval')", "compile"),
        ("t = __import__('torch')", "__import__"),
        ("from importlib import import_module", "importlib"),
        ("import torch\nname = 'soft' + 'max'\nf = getattr(torch, name)", "getattr with a computed name on torch"),
        ("import torch.nn.functional as F\nf = getattr(F, n, None)", "getattr with a computed name on torch.nn.functional"),
        ("import torch\nf = vars(torch)['softmax']", "vars with a computed name on torch"),
        ("import torch\nf = torch._C._nn.scaled_dot_product_attention", "torch._C"),
        ("import torch\ny = torch._softmax(x, -1, False)", "torch._softmax"),
        ("from torch.utils._python_dispatch import _pop_mode", "torch.utils._python_dispatch"),
        ("import torch._decomp", "torch._decomp"),
        ("import torch\ny = torch.ops.aten._softmax(x, -1, False)", "torch.ops"),
        ("import torch\nf = torch.jit.script(g)", "torch.jit"),
        ("import ctypes", "ctypes"),
        ("import gc\ngc.get_objects()", "gc"),
        ("import sys\nm = sys.modules['torch']", "sys.modules"),
        ("import autograder.core.forbidden", "autograder"),
        ("f = g.__globals__", "__globals__"),
        ("class T:\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n        pass", "__torch_function__"),
        ("import sys\nf = sys._getframe(1).f_back", "sys._getframe"),
    ],
)
def test_scan_flags_constructs_with_their_line(source, construct):
    uses = scan_source(source, ())
    assert construct in {u.name for u in uses}, uses
    last = len(source.splitlines())
    assert all(1 <= u.line <= last for u in uses), uses


@pytest.mark.parametrize(
    "source",
    [
        "def f(self, name):\n    return getattr(self, 'weight_' + name)",
        "import torch\nw = getattr(torch, 'float64')",
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        nn.Module.__init__(self)",
        "import re\np = re.compile('x')",
    ],
)
def test_scan_allows_what_honest_code_does(source):
    assert scan_source(source, FORBIDDEN) == []


def test_honest_files_have_no_finding(root):
    course = load_course(root)
    for folder in (course.solutions, root / "tests" / "alternatives"):
        for path in sorted(folder.glob("*.py")):
            unit = course.unit_for_file(path.name)
            if unit is not None:
                assert scan_file(path, unit.forbidden) == [], path
    for path in sorted((root / "course" / "stand_ins").glob("*.py")):  # over torch's own functions, by design
        assert scan_file(path, ()) == [], path


# -- the scan reads what Python runs ---------------------------------------------------

HIDDEN = "# a comment +AAo-y = 42\n"  # UTF-7: "+AAo-" is a newline


def test_a_utf7_cookie_is_flagged_and_its_hidden_line_seen(tmp_path):
    path = tmp_path / "attention.py"
    path.write_bytes(b"# coding: utf-7\nimport torch\n" + HIDDEN.encode() + b"f = torch.softmax\n")
    source, encoding = read_source(path)
    assert encoding == "utf-7" and "\ny = 42\n" in source
    uses = scan_file(path, FORBIDDEN)
    assert Use("a coding cookie for utf-7", 1) in uses and Use("torch.softmax", 5) in uses, uses


@pytest.mark.parametrize("head", [b"", b"# -*- coding: utf-8 -*-\n", b"\xef\xbb\xbf"])
def test_utf8_is_not_flagged(tmp_path, head):
    path = tmp_path / "attention.py"
    path.write_bytes(head + "s = 'é'\n".encode())
    assert scan_file(path, FORBIDDEN) == []
    assert read_source(path)[0].endswith("s = 'é'\n")


def test_the_loader_runs_the_text_that_was_scanned(tmp_path):
    """Loaded from the decoded text: the module sees what the scan saw, cookie and all."""
    course = load_course(ROOT)
    unit = course.units["positional_encoding"]
    (tmp_path / unit.file).write_bytes(b"# coding: utf-7\n" + HIDDEN.encode())
    module = load_unit(course, unit, tmp_path, isolate=True)
    assert module.y == 42
    (tmp_path / unit.file).write_bytes(b"\xef\xbb\xbf# coding: latin-1\ny = 1\n")  # a BOM that disagrees
    with pytest.raises(LoadError, match="does not compile"):
        load_unit(course, unit, tmp_path, isolate=True)


# -- the dispatcher records the operation, whatever the route ----------------------------

def _lstm_cell_args():
    x, h = torch.randn(2, 4), torch.randn(2, 3)
    return x, (h, h), torch.randn(12, 4), torch.randn(12, 3)


ROUTES = {
    "softmin": ("aten::_softmax", lambda: torch.nn.functional.softmin(-torch.randn(3, 4), -1)),
    "private": ("aten::_softmax", lambda: torch._softmax(torch.randn(3, 4), -1, False)),
    "ops": ("aten::_softmax", lambda: torch.ops.aten._softmax(torch.randn(3, 4), -1, False)),
    "eval": ("aten::_softmax", lambda: eval("lambda x: torch.softmax(x, -1)")(torch.randn(3))),
    "C_nn": ("aten::_scaled_dot_product_flash_attention_for_cpu",
             lambda: torch._C._nn.scaled_dot_product_attention(*[torch.randn(1, 2, 3, 4)] * 3)),
    "lstm_cell": ("aten::lstm_cell", lambda: torch.ops.aten.lstm_cell(*_lstm_cell_args())),
    "lstm_cell_inference": ("aten::lstm_cell", lambda: _in_inference_mode(torch.lstm_cell, *_lstm_cell_args())),
    "group_norm": ("aten::native_group_norm", lambda: torch.nn.functional.group_norm(torch.randn(2, 1, 5), 1)),
    "native_layer_norm": ("aten::native_layer_norm",
                          lambda: torch.ops.aten.native_layer_norm(torch.randn(2, 5), [5], None, None, 1e-5)),
}


def _in_inference_mode(function, *args):
    with torch.inference_mode():
        return function(*args)


@pytest.mark.parametrize("route", ROUTES)
def test_operators_are_recorded_whatever_the_route(route):
    operator, run = ROUTES[route]
    recorder = Operators(("aten::_softmax", operator))
    run()  # outside recording: nothing counts
    with recorder.recording():
        recorder.trusted(run)()  # inside trusted code: nothing counts
        assert recorder.seen == set()
        run()
    assert recorder.seen == {operator}


def test_recorded_operators_still_compute_the_same_values_and_gradients():
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    with Operators(("aten::_softmax", "aten::lstm_cell")).recording():
        got = torch.autograd.grad(torch.nn.functional.softmin(-x, -1).pow(2).sum(), x)[0]
        cell = torch.nn.LSTMCell(5, 2, dtype=torch.float64)
        h, c = cell(x)
        cell_grad = torch.autograd.grad((h * c).sum(), x)[0]
    y = x.detach().requires_grad_()
    assert torch.allclose(got, torch.autograd.grad(y.softmax(-1).pow(2).sum(), y)[0])
    h, c = cell(y)
    assert torch.allclose(cell_grad, torch.autograd.grad((h * c).sum(), y)[0])


def test_stand_ins_are_trusted(tmp_path):
    """multi_head's stand-in attention calls torch.softmax: a student who uses it is not caught."""
    course = load_course(ROOT)
    (tmp_path / "multi_head.py").write_text(
        "import torch\nfrom .attention import scaled_dot_product_attention\n\n\n"
        "def split_heads(x, num_heads):\n    return scaled_dot_product_attention(x, x, x)[0]\n"
    )
    subject = InProcessSubject(course, tmp_path)
    assert subject.status("multi_head") is None
    subject.run(Call("multi_head", "split_heads", (torch.randn(1, 2, 4), 2)))
    assert subject.runtime_uses("multi_head") == set()


# -- the hostile corpus: each route scores 0, named ----------------------------------------

HOSTILE = ROOT / "tests" / "hostile"
CASES = {  # folder -> (unit, what the message must name)
    "forbidden_softmin": ("attention", ["aten::_softmax (seen at run time)"]),
    "forbidden_eval": ("attention", ["eval (line 7)", "aten::_softmax"]),
    "forbidden_utf7": ("attention", ["a coding cookie for utf-7 (line 1)", "torch.softmax (line 9)", "aten::_softmax"]),
    "forbidden_private_softmax": ("attention", ["torch._softmax (line", "aten::_softmax"]),
    "forbidden_ops_softmax": ("attention", ["torch.ops (line", "aten::_softmax"]),
    "forbidden_c_nn_sdpa": ("attention", ["torch._C (line", "aten::_scaled_dot_product_flash_attention_for_cpu"]),
    "forbidden_ops_lstm_cell": ("recurrent_cells", ["torch.ops (line", "aten::lstm_cell"]),
    "forbidden_mha_module": ("multi_head", ["torch.nn.modules.activation.MultiheadAttention (line 5)", "aten::_softmax"]),
    "forbidden_group_norm": ("transformer_block", ["aten::native_group_norm (seen at run time)"]),
    "forbidden_native_layer_norm": ("transformer_block", ["torch.ops (line", "aten::native_layer_norm"]),
}


def _check_case(name: str, result: dict) -> None:
    unit_name, named = CASES[name]
    unit = result["units"][unit_name]
    assert unit["status"] == "forbidden" and unit["score"] == 0, (name, unit["status"], unit["message"])
    for text in named:
        assert text in unit["message"], (name, text, unit["message"])
    # Each is otherwise working code: the ban, not a bug, is what costs it its points.
    assert any(t["output"].startswith("no points") for t in unit["tests"]), name


@pytest.fixture(scope="module")
def hostile_results():
    folders = [HOSTILE / name for name in CASES]
    units = sorted({unit for unit, _ in CASES.values()})
    return dict(zip(CASES, grade_json(folders, units, "--no-sandbox")))


@pytest.mark.xdist_group("forbidden-routes")  # one worker grades hostile_results
@pytest.mark.parametrize("name", CASES)
def test_each_route_scores_zero_and_is_named(hostile_results, name):
    _check_case(name, hostile_results[name])


def test_a_route_is_caught_in_the_sandbox():
    [result] = grade_json([HOSTILE / "forbidden_softmin"], ["attention"])
    _check_case("forbidden_softmin", result)


@pytest.mark.parametrize("unit", mutants.grouped(u.name for u in COURSE.units.values() if Operators(u.forbidden).names))
def test_honest_code_keeps_full_marks(unit, catalogue):
    """Solutions and alternatives: no construct, no operator, every unit whose list names operators at full marks.

    Each alternative as the catalogue grades it (the reference with the unit's file replaced; a
    graded unit sees its siblings only as stand-ins): no grading run of its own (32 CPU-seconds)."""
    for case in ("solutions", "alternative"):
        got = catalogue[unit][case]
        assert got["status"] == "graded" and got["score"] == got["max_score"], (case, unit, got["message"])
