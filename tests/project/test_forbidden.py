"""The static scan sees the usual ways of reaching a forbidden function and the
constructs that hide one, reading the text Python runs; the dispatcher refuses a
unit's kernel families whatever the route and the execution mode; honest code is
flagged by neither."""
from __future__ import annotations

import pytest
import torch

from autograder.trust import enforce
from autograder.trust.forbidden import Use, scan_file, scan_source
from autograder.trust.loader import LoadError, load_unit
from autograder.trust.source import read_source
from autograder.core.manifest import load_course
from autograder.core.protocol import Call, Failure, New, StudentError
from autograder.trust.subject import InProcessSubject
import hostile_cases
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


RUNTIME = """
from __future__ import annotations

import dataclasses
import enum
import functools
import typing

import torch
from torch import nn


class Pair(typing.NamedTuple):
    left: int
    right: int = 0


class Mode(enum.Enum):
    CAUSAL = "causal"


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


@functools.lru_cache(maxsize=None)
def table(n: int) -> tuple[int, ...]:
    return tuple(i * i for i in range(n))


def styles(x: torch.Tensor) -> torch.Tensor:
    assert x.dim() >= 1, f"need a vector, got {tuple(x.shape)}"
    match Mode("causal"):
        case Mode.CAUSAL:
            pass
    try:
        int("x")
    except (ValueError, TypeError):
        pass
    return Square.apply(x) + Pair(1).right + table(3)[2]


@dataclasses.dataclass(frozen=True)
class Spec:
    width: int = 2


class Own(nn.Module):
    def __init__(self):
        super().__init__()
        self._hidden = 1


def computed(owner, name):
    return getattr(owner, name)


def store(owner, name, value):
    setattr(owner, name, value)
    return owner


def later_import(name):
    return __builtins__["__import__"](name)
"""


def test_the_unit_runs_with_the_builtins_the_scan_approved(tmp_path):
    """What the scan cannot see (a computed name) is refused at run time by the unit's builtins;
    the honest uses (a dataclass, super(), an own private name, setattr on own objects) work."""
    unit = COURSE.units["positional_encoding"]
    (tmp_path / unit.file).write_text(RUNTIME)
    module = load_unit(COURSE, unit, tmp_path, isolate=True, rules=COURSE.rules)
    assert module.Spec().width == 2 and module.computed(module.Own(), "_hidden") == 1
    x = torch.arange(3.0, requires_grad=True)
    module.styles(x).sum().backward()
    assert torch.equal(x.grad, 2 * x.detach())
    linear = torch.nn.Linear(2, 2)
    assert module.store(linear, "scale", 3).scale == 3
    for owner, name in [(torch.nn.functional, "softmax"), (torch.randn(1), "_version"), (linear, "__dict__"),
                        (module.computed, "__globals__")]:
        with pytest.raises(AttributeError, match="may not reach"):
            module.computed(owner, name)
    with pytest.raises(AttributeError, match="changing the class Tensor"):
        module.store(torch.Tensor, "softmax", None)
    assert "open" not in module.__builtins__ and "eval" not in module.__builtins__
    with pytest.raises(ImportError, match="may not import os"):
        exec(compile("import os", str(tmp_path / unit.file), "exec"), {"__builtins__": module.__builtins__})


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
        ("import autograder.trust.forbidden", "autograder"),
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


# -- the dispatcher refuses a family's kernels, whatever the route and the mode ----------------

def _lstm_cell_args(**kw):
    x, h = torch.randn(2, 4, **kw), torch.randn(2, 3, **kw)
    return x, (h, h), torch.randn(12, 4, **kw), torch.randn(12, 3, **kw)


FAMILY_CALLS = {  # family -> calls that reach one of its kernels (each x -> result)
    "recurrent": {
        "lstm_cell": lambda x: torch.lstm_cell(x[:2, :4], (x[:2, :3], x[:2, :3]), x.new_ones(12, 4), x.new_ones(12, 3)),
        "gru_cell": lambda x: torch.gru_cell(x[:2, :4], x[:2, :3], x.new_ones(9, 4), x.new_ones(9, 3)),
        "rnn_tanh_cell": lambda x: torch.rnn_tanh_cell(x[:2, :4], x[:2, :3], x.new_ones(3, 4), x.new_ones(3, 3)),
    },
    "softmax": {
        "softmin": lambda x: torch.nn.functional.softmin(x, -1),
        "log_softmax": lambda x: x.log_softmax(-1),
        "special": lambda x: torch.special.softmax(x, -1),
    },
    "fused_attention": {
        "sdpa": lambda x: torch.nn.functional.scaled_dot_product_attention(x[None], x[None], x[None]),
    },
    "normalisation": {
        "layer_norm": lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
        "group_norm": lambda x: torch.nn.functional.group_norm(x[None], 1),
        "rms_norm": lambda x: torch.nn.functional.rms_norm(x, x.shape[-1:]),
        "batch_norm": lambda x: torch.nn.functional.batch_norm(x, None, None, training=True),
        "instance_norm": lambda x: torch.nn.functional.instance_norm(x[None]),
    },
}


def _plain(call, x):
    return call(x)


def _grad(call, x):
    return call(x.requires_grad_())


def _no_grad(call, x):
    with torch.no_grad():
        return call(x)


def _inference(call, x):
    with torch.inference_mode():
        return call(x)


def _autocast(call, x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return call(x)


def _vmap(call, x):
    return torch.func.vmap(call)(torch.stack([x, x]))


def _meta(call, x):
    return call(x.to("meta"))


def _func_grad(call, x):
    def total(t):
        out = call(t)
        return sum(o.float().sum() for o in out) if isinstance(out, tuple) else out.float().sum()

    return torch.func.grad(total)(x)


MODES = {"plain": _plain, "autograd": _grad, "no_grad": _no_grad, "inference_mode": _inference,
         "autocast": _autocast, "vmap": _vmap, "meta": _meta, "func.grad": _func_grad}


def test_every_family_names_operators_and_each_is_enforced():
    """The course's families cover the operators the API page promises, and every one has refusing kernels."""
    found = enforce.operators(COURSE.kernels)
    for family in COURSE.kernels:
        assert any(f == family for f in found.values()), family
    for op in ("aten::_softmax", "aten::_sparse_softmax", "aten::_safe_softmax", "aten::lstm_cell",
               "aten::quantized_lstm_cell", "aten::native_layer_norm", "aten::rms_norm", "aten::_fused_rms_norm",
               "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
               "aten::_transformer_encoder_layer_fwd"):
        assert op in found, op
    assert not any("backward" in op for op in found)  # the grader's own backward needs them
    enforce.install(COURSE.kernels)
    assert all(enforce.enforced(op) for op in found)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILY_CALLS)
def test_a_family_is_refused_under_every_execution_mode(family, mode):
    """While a family is refused, every kernel of it raises for whoever calls it (this test's own
    frame, no student frame anywhere), in every mode; another unit's family runs; after the call, torch as usual."""
    enforce.install(COURSE.kernels)
    for name, call in FAMILY_CALLS[family].items():
        x = torch.randn(4, 5)
        MODES[mode](call, x.clone())  # nothing refused: torch as usual
        with enforce.calling([family], "entry"):
            with pytest.raises(enforce.Forbidden, match=family):
                MODES[mode](call, x.clone())
        # Another unit's family: allowed (softmax aside: fused attention's math path runs softmax's kernels).
        with enforce.calling([f for f in FAMILY_CALLS if f not in (family, "softmax")], "entry"):
            MODES[mode](call, x.clone())


def test_sparse_nested_and_quantized_softmax_are_refused():
    enforce.install(COURSE.kernels)
    routes = [lambda: torch.sparse.softmax(torch.randn(3, 4).to_sparse(), -1),
              lambda: torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)]).softmax(-1),
              lambda: torch.quantize_per_tensor(torch.randn(3, 4), 0.1, 0, torch.quint8).softmax(-1)]
    with pytest.warns(UserWarning):  # nested and quantized tensors warn that they are prototypes
        for route in routes:
            with enforce.calling(["softmax"], "entry"), pytest.raises(enforce.Forbidden):
                route()


def test_refusing_kernels_compute_the_same_values_and_gradients_when_not_refused():
    enforce.install(COURSE.kernels)
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    cell = torch.nn.LSTMCell(5, 2, dtype=torch.float64)
    with enforce.calling([], "entry"):  # through the refusing kernels, nothing refused
        got = torch.autograd.grad(torch.nn.functional.softmin(-x, -1).pow(2).sum(), x)[0]
        h, c = cell(x)
        cell_grad = torch.autograd.grad((h * c).sum(), x)[0]
        normed = torch.autograd.grad(torch.nn.functional.rms_norm(x, (5,)).pow(3).sum(), x)[0]
    y = x.detach().requires_grad_()
    assert torch.allclose(got, torch.autograd.grad(y.softmax(-1).pow(2).sum(), y)[0])
    h, c = cell(y)
    assert torch.allclose(cell_grad, torch.autograd.grad((h * c).sum(), y)[0])
    rms = y / y.pow(2).mean(-1, keepdim=True).add(torch.finfo(y.dtype).eps).sqrt()
    assert torch.allclose(normed, torch.autograd.grad(rms.pow(3).sum(), y)[0])


def _unit(tmp_path, name, source):
    (tmp_path / COURSE.units[name].file).write_text(source)
    subject = InProcessSubject(COURSE, tmp_path)
    assert subject.status(name) is None
    return subject


def test_stand_ins_need_no_family_and_what_they_call_back_is_refused(tmp_path):
    """multi_head's stand-in attention computes its softmax without softmax's kernels: a student who uses
    it is not refused; student code the stand-in calls back (a value's __rmul__) is refused as anything is."""
    subject = _unit(tmp_path, "multi_head",
                    "import torch\nfrom .attention import scaled_dot_product_attention\n\n\n"
                    "class Scale:\n    def __rmul__(self, other):\n        return other.softmax(-1)\n\n\n"
                    "def split_heads(x, num_heads):\n    return scaled_dot_product_attention(x, x, x)[0]\n\n\n"
                    "def merge_heads(x):\n    return scaled_dot_product_attention(x, x, x, scale=Scale())[0]\n")
    subject.run(Call("multi_head", "split_heads", (torch.randn(1, 2, 4), 2)))
    assert subject.runtime_uses("multi_head") == set()
    with pytest.raises(StudentError) as caught:
        subject.run(Call("multi_head", "merge_heads", (torch.randn(1, 2, 4),)))
    assert caught.value.kind == Failure.FORBIDDEN and "multi_head.py line 7" in caught.value.describe()
    assert subject.runtime_uses("multi_head") == {"softmax"}


def test_a_stand_in_refuses_entries_the_unit_does_not_allow(tmp_path):
    subject = _unit(tmp_path, "efficient_attention",
                    "from .attention import scaled_dot_product_attention\n\n\n"
                    "def flash_attention(q, k, v, **kw):\n    return scaled_dot_product_attention(q, k, v)[0]\n")
    with pytest.raises(StudentError, match="flash_attention may not use the attention sibling"):
        subject.run(Call("efficient_attention", "flash_attention", (torch.randn(1, 2, 4),) * 3))
    assert subject.runtime_uses("efficient_attention") == {"stand-ins"}


def test_a_handed_torch_module_works_during_its_call_only(tmp_path):
    subject = _unit(tmp_path, "recurrent_cells",
                    "kept = []\n\n\ndef unroll(cell, x, state=None):\n    kept.append(cell)\n"
                    "    return cell(x[0], state)\n\n\ndef rnn_cell(x, h, w_ih, w_hh, b_ih=None, b_hh=None):\n"
                    "    return kept[0](x, h)\n")
    cell = New("torch.nn.RNNCell", (4, 3))
    subject.run(Call("recurrent_cells", "unroll", (cell, torch.randn(2, 1, 4))))  # inside its call: fine
    with pytest.raises(StudentError, match="only during the call it was given to"):
        subject.run(Call("recurrent_cells", "rnn_cell", (torch.randn(1, 4), torch.randn(1, 3), torch.randn(3, 4),
                                                         torch.randn(3, 3))))


def test_an_entry_that_is_a_torch_function_is_refused(tmp_path):
    """No frame decides: a C function as the entry point runs softmax's kernel, which raises for anyone."""
    subject = _unit(tmp_path, "attention", "import torch\n\nsoftmax = torch.special.log_softmax\n")
    with pytest.raises(StudentError) as caught:
        subject.run(Call("attention", "softmax", (torch.randn(2, 3), -1)))
    assert caught.value.kind == Failure.FORBIDDEN


# -- the hostile corpus: each route scores 0, named ----------------------------------------

CASES = {  # case (tests/project/hostile_cases.py) -> (unit, what the message must name)
    # F.softmin calls Tensor.softmax, which the worker erased (in process, softmax's kernel refuses).
    "forbidden_softmin": ("attention", ["attention.py", "at run time"]),
    "forbidden_eval": ("attention", ["eval (line 7)"]),  # refused builtins are absent at run time too
    "forbidden_utf7": ("attention", ["a coding cookie for utf-7 (line 1)", "torch.softmax (line 9)", "'softmax'"]),
    # A private name's receiver must be the unit's own (restricted.guard_private): torch._softmax never runs.
    "forbidden_private_softmax": ("attention", ["torch._softmax (line"]),
    "forbidden_ops_softmax": ("attention", ["torch.ops (line"]),
    "forbidden_c_nn_sdpa": ("attention", ["torch._C (line"]),
    "forbidden_ops_lstm_cell": ("recurrent_cells", ["torch.ops (line"]),
    "forbidden_mha_module": ("multi_head", ["torch.nn.modules.activation.MultiheadAttention (line 5)"]),
    "forbidden_group_norm": ("transformer_block", ["the kernel family 'normalisation' at run time (refused)"]),
    "forbidden_native_layer_norm": ("transformer_block", ["torch.ops (line"]),
}


def _check_case(name: str, result: dict) -> None:
    unit_name, named = CASES[name]
    unit = result["units"][unit_name]
    assert unit["status"] == "forbidden" and unit["score"] == 0, (name, unit["status"], unit["message"])
    for text in named:
        assert text in unit["message"], (name, text, unit["message"])
    assert not any(t["score"] for t in unit["tests"]), name


@pytest.fixture(scope="module")
def hostile_results(tmp_path_factory):
    base = tmp_path_factory.mktemp("forbidden")
    folders = [hostile_cases.write(name, base) for name in CASES]
    units = sorted({unit for unit, _ in CASES.values()})
    return dict(zip(CASES, grade_json(folders, units, "--no-sandbox")))


@pytest.mark.xdist_group("forbidden-routes")  # one worker grades hostile_results
@pytest.mark.parametrize("name", CASES)
def test_each_route_scores_zero_and_is_named(hostile_results, name):
    _check_case(name, hostile_results[name])


def test_a_route_is_caught_in_the_sandbox(tmp_path):
    [result] = grade_json([hostile_cases.write("forbidden_softmin", tmp_path)], ["attention"])
    _check_case("forbidden_softmin", result)


@pytest.mark.parametrize("unit", mutants.grouped(u.name for u in COURSE.units.values() if u.kernels))
def test_honest_code_keeps_full_marks(unit, catalogue):
    """Solutions and alternatives: no construct, no operator, every unit whose list names operators at full marks.

    Each alternative as the catalogue grades it (the reference with the unit's file replaced; a
    graded unit sees its siblings only as stand-ins): no grading run of its own (32 CPU-seconds)."""
    for case in ("solutions", "alternative"):
        got = catalogue[unit][case]
        assert got["status"] == "graded" and got["score"] == got["max_score"], (case, unit, got["message"])


def test_a_private_name_reaches_only_the_units_own_objects(tmp_path):
    """The scan admits ``self._x`` by spelling; at run time the receiver must be one of the unit's own
    classes or objects, so a method of the file's called on another object (``Own.peek(x)``) reads nothing."""
    subject = _unit(tmp_path, "attention",
                    "class Own:\n    def __init__(self):\n        self._x = 1\n\n    def peek(self):\n"
                    "        return self._x\n\n\ndef softmax(x, dim=-1):\n    return x * Own().peek()\n\n\n"
                    "def causal_mask(query_len, key_len=None, *, device=None):\n    return Own.peek(query_len)\n")
    got = subject.run(Call("attention", "softmax", (torch.ones(2, 2),))).output
    assert torch.equal(got, torch.ones(2, 2))  # its own object: fine
    with pytest.raises(StudentError, match="private attributes only of its own classes"):
        subject.run(Call("attention", "causal_mask", (3,)))


@pytest.mark.parametrize("route", ["forward_hook", "tensor_hook", "state_dict_hook"])
def test_hooks_the_engine_runs_reach_no_removed_kernel(tmp_path, route):
    """Deferred work in the places the engine runs a student's code for it (a module's forward hook,
    a tensor's gradient hook in the engine's backward, a state_dict hook) meets the same refusal."""
    body = {
        "forward_hook": "        self.register_forward_hook(lambda m, i, o: F.group_norm(i[0], 1))\n",
        "tensor_hook": "        pass\n",
        "state_dict_hook": "        self.register_state_dict_post_hook(lambda m, sd, p, lv: F.group_norm(torch.ones(1, 2, 3), 1))\n",
    }[route]
    forward = ("        y = x * 1.0\n        y.register_hook(lambda g: F.group_norm(g, 1))\n        return y\n"
               if route == "tensor_hook" else "        return x * 1.0\n")
    subject = _unit(tmp_path, "transformer_block",
                    "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
                    "class LayerNorm(nn.Module):\n    def __init__(self, d, eps=1e-5, elementwise_affine=True, bias=True):\n"
                    "        super().__init__()\n" + body + "    def forward(self, x):\n" + forward)
    call = Call("transformer_block", New("LayerNorm", (3,)), (torch.randn(2, 3),),
                grad_outputs=torch.ones(2, 3) if route == "tensor_hook" else None,
                return_state=route == "state_dict_hook")
    with pytest.raises(StudentError) as caught:
        subject.run(call)
    assert caught.value.kind == Failure.FORBIDDEN, caught.value.describe()
