"""The allow-list scan (autograder/trust/allowlist.py): every honest file the project holds
(references, alternatives, stubs, the mutant catalogue) passes with no finding, and each
known way around a ban list is refused."""
from __future__ import annotations

import pytest

from autograder.trust.allowlist import scan, scan_file
from autograder.core.manifest import load_course
import mutants
from conftest import ROOT

# The course's intended lists, for these tests (the real ones go to course.toml).

COURSE = load_course(ROOT)
RULES = COURSE.rules  # course.toml [rules]
UNITS = tuple(COURSE.units)
# Free names the snippets below use, bound first so that only the rule under test speaks.
PRELUDE = "x = w = a = b = m = p = q = d = f = self = name = k = C = mask = None\n"


def _scan(source: str, forbidden=(), siblings=UNITS):
    if not source.startswith("from __future__"):
        source = PRELUDE + source
    return scan(source, RULES, forbidden, siblings)


def _honest_files():
    for folder in ("solutions", "tests/alternatives", "assignments"):
        for path in sorted((ROOT / folder).glob("*.py")):
            yield pytest.param(path, id=f"{folder}/{path.name}")


@pytest.mark.parametrize("path", list(_honest_files()))
def test_honest_files_have_no_finding(path):
    unit = COURSE.unit_for_file(path.name)
    assert scan_file(path, RULES, unit.forbidden if unit else (), UNITS) == []


def test_honest_files_pass_with_the_siblings_sources():
    """Given the siblings' sources, a name taken from one must be one it defines: the references do."""
    sources = {u.name: (ROOT / "solutions" / u.file).read_text(encoding="utf-8") for u in COURSE.units.values()}
    for folder in ("solutions", "tests/alternatives", "assignments"):
        for unit in COURSE.units.values():
            assert scan_file(ROOT / folder / unit.file, RULES, unit.forbidden, sources) == [], (folder, unit.name)


# The catalogue's mutants that reach a forbidden function on purpose (the graded status
# "forbidden"); every other mutant is honest code with a bug.
CHEATING_MUTANTS = {
    "recurrent_cells": {"calls_torch_rnn_tanh_cell", "gru_cell_through_getattr", "lstm_cell_through_torch_C",
                        "imports_torch_rnn_module"},
    "attention": {"calls_torch_softmax", "softmax_through_getattr"},
    "multi_head": {"calls_torch_sdpa"},
    "positional_encoding": {"uses_torchtune_rope"},
    "transformer_block": {"ln_calls_torch"},
    "efficient_attention": {"calls_torch_softmax", "calls_fused_attention"},
}


@pytest.mark.parametrize("unit", UNITS)
def test_honest_mutants_have_no_finding_and_cheating_ones_are_refused(unit):
    spec = COURSE.units[unit]
    source = (ROOT / "solutions" / spec.file).read_text(encoding="utf-8")
    catalogue = mutants.load(unit)
    assert CHEATING_MUTANTS[unit] <= {m["name"] for m in catalogue}
    for mutant in catalogue:
        found = scan(mutants.mutated_source(source, mutant), RULES, spec.forbidden, UNITS)
        if mutant["name"] in CHEATING_MUTANTS[unit]:
            assert found, mutant["name"]
        else:
            assert found == [], mutant["name"]


MHA = ("torch.nn.MultiheadAttention",)
SOFTMAX = ("torch.Tensor.softmax",)


@pytest.mark.parametrize(
    "source, expected, forbidden",
    [
        ("import os", "an import of os", ()),
        ("import torch\ntorch.os.system('x')", "torch.os (a module outside the allowed list)", ()),
        ("import torch\ntorch.sys.modules", "torch.sys (a module outside the allowed list)", ()),
        ("import torch\nx = torch.ctypes", "torch.ctypes (a module outside the allowed list)", ()),
        ("from torch import os", "torch.os (a module outside the allowed list)", ()),
        ("import torch\nm = torch.nn", "a module used as a value (torch.nn)", ()),
        ("import torch\nf(torch)", "a module used as a value (torch)", ()),
        ("import torch\n[torch][0].os", "a module used as a value (torch)", ()),
        ("import torch\ntorch.allclose = None", "an assignment to torch.allclose", ()),
        ("import torch\ntorch.Tensor.__eq__ = None", "an assignment to torch.Tensor.__eq__", ()),
        ("import torch.nn.functional as F\nF.softmax = f", "an assignment to torch.nn.functional.softmax", ()),
        ("import torch\ndel torch.softmax", "a deletion of torch.softmax", ()),
        ("import torch\nsetattr(torch.Tensor, 'softmax', f)", "an assignment to torch.Tensor.softmax", ()),
        ("x.__class__.forward = f", "an assignment to an attribute of a class (forward)", ()),
        ("x.__class__.__mro__", "the attribute __mro__", ()),
        ("(lambda: 0).__code__", "the attribute __code__", ()),
        ("y = x.f_back", "the attribute f_back", ()),
        ("y = x.gi_frame.f_globals", "the attribute gi_frame", ()),
        ("y = f.co_consts", "the attribute co_consts", ()),
        ("x.__class__.mro()", "the attribute mro", ()),
        ("getattr(x, '__dict__')", "the attribute __dict__", ()),
        ('"{0.__class__}".format(x)', "a format string that reads attributes or items", ()),
        ('"{:{0.__class__}}".format(x)', "a format string that reads attributes or items", ()),
        ('"{0[k]}".format(d)', "a format string that reads attributes or items", ()),
        ("s = '{0.__class__}'\ns.format(x)", ".format on something other than a string literal", ()),
        ('"{}".format_map(d)', "the attribute format_map", ()),
        ("getattr(x, name)", "getattr with a computed name", ()),
        ("getattr(x, *name)", "getattr with a computed name", ()),
        ("g = getattr", "getattr other than as getattr(obj, 'name')", ()),
        ("map(getattr, [x], ['a'])", "getattr other than as getattr(obj, 'name')", ()),
        ("import torch\ngetattr(torch, 'softmax')", "getattr on a module (torch)", ()),
        ("eval('1')", "eval (not an allowed builtin)", ()),
        ("exec('1')", "exec (not an allowed builtin)", ()),
        ("vars(x)", "vars (never allowed)", ()),
        ("vars = dict\nvars(x)", "vars (never allowed)", ()),
        ("__builtins__", "__builtins__ (never allowed)", ()),
        ("globals()['torch']", "globals (never allowed)", ()),
        ("import torch\ntorch.save(x, 'f')", "torch.save (denied)", ()),
        ("import torch.nn.functional as F\nF.torch.load('f')", "torch.load (denied)", ()),
        ("from torch import load", "torch.load (denied)", ()),
        ("import torch\ntorch.set_default_tensor_type('os.system')", "torch.set_default_tensor_type (denied)", ()),
        ("import torch.nn.quantizable", "an import of torch.nn.quantizable", ()),
        ("import torch\ntorch.nn.quantizable.LSTM(1, 1)", "torch.nn.quantizable (a module outside the allowed list)", ()),
        ("import torch\ntorch.nn.modules.activation.MultiheadAttention(4, 2)", "torch.nn.MultiheadAttention", MHA),
        ("from torch.nn import MultiheadAttention as M", "torch.nn.MultiheadAttention", MHA),
        ("from torch import nn\nclass A(nn.MultiheadAttention): pass", "torch.nn.MultiheadAttention", MHA),
        ("import torch\ntorch._softmax(x, 0, False)", "torch._softmax (a private name)", ()),
        ("from torch import _VF", "torch._VF (a private name)", ()),
        ("import torch\ntorch.ops.aten._softmax", "torch.ops (a module outside the allowed list)", ()),
        ("import torch\ntorch.library", "torch.library (a module outside the allowed list)", ()),
        ("import typing\ntyping.get_type_hints(f)", "typing.get_type_hints (denied)", ()),
        ("import dataclasses\ndataclasses.make_dataclass('X', [])", "dataclasses.make_dataclass (denied)", ()),
        ("from .solutions import x", "an import of .solutions (not a sibling unit)", ()),
        ("from .. import x", "a relative import from outside the package (from .. import)", ()),
        ("from . import solutions", "an import of .solutions (not a sibling unit)", ()),
        ("from .attention import _helper", "attention._helper (a private name)", ()),
        ("from .attention import torch", "attention.torch (not a function or class attention defines)", ()),
        ("from . import attention\nattention.torch.os", "attention.torch (not a function or class attention defines)", ()),
        ("from . import attention\nattention.softmax = f", "an assignment to attention.softmax", ()),
        ("from . import attention\nf(attention)", "a module used as a value (attention)", ()),
        ("from torch import *", "a star import (from torch import *)", ()),
        ("import pickle", "an import of pickle", ()),
        ("import importlib", "an import of importlib", ()),
        ("import torch.utils.data", "an import of torch.utils.data", ()),
        ("match x:\n    case C(__class__=k): pass", "the attribute __class__", ()),
        ("match x:\n    case C(__dict__=k): pass", "the attribute __dict__", ()),
        ("class T:\n    def __torch_function__(cls, *a): pass", "a definition of __torch_function__", ()),
        ("class T:\n    __torch_function__ = f", "a definition of __torch_function__", ()),
        ("class T:\n    def __getattribute__(self, n): pass", "a definition of __getattribute__", ()),
        ("import torch\ntype('X', (torch.Tensor,), {'__torch_function__': f})", "the string '__torch_function__'", ()),
        ("class T:\n    __module__ = 'torch.nn'", "a binding of __module__", ()),
        ("import torch\ntorch.UntypedStorage.from_file('f')", "torch.UntypedStorage (denied)", ()),
        ("x.untyped_storage().from_file('f')", "the attribute from_file (denied)", ()),
        # Private names only on self inside the file's own classes (issue 57): not on another value that
        # happens to share a name the file defines.
        ("class A:\n    def f(self, other):\n        self._x = 1\n        return other._x",
         "the attribute _x (a private name: only on self inside this file's own classes)", ()),
        ("_x = 1\ny = x._x", "the attribute _x (a private name: only on self inside this file's own classes)", ()),
        # One object by two import paths is judged as that object: forbidden there too; the rest of a
        # module off the list stays refused.
        ("from torch.nn.modules.activation import MultiheadAttention", "torch.nn.MultiheadAttention", MHA),
        ("from torch.autograd.function import _SingleLevelFunction", "an import from torch.autograd.function", ()),
        ("from torch.utils.checkpoint import get_device_states", "torch.utils.checkpoint.get_device_states (denied)", ()),
        ("from torch.utils import data", "an import from torch.utils", ()),
        ("import torch.utils.checkpoint\ntorch.utils.data", "torch.utils (a module outside the allowed list)", ()),
        ("import torch.utils.checkpoint as c\nc.contextlib.suppress", "torch.utils.checkpoint.contextlib (a module outside the allowed list)", ()),
        ("import numpy as np\npi = np.pi", "an import of numpy", ()),
        ("x.numpy().tofile('f')", "the attribute numpy (denied)", ()),
        ("import functools\n@functools.singledispatch\ndef g(a): pass", "functools.singledispatch (denied)", ()),
        ("import torch as __builtins__", "__builtins__ (never allowed)", ()),
        ("type('X', (), dict(__torch_function__=f))", "the keyword __torch_function__", ()),
        ("import torch\ntorch._dynamo", "torch._dynamo (a private name)", ()),
        ("import torch\ntorch.nn.functional.torch.os", "torch.os (a module outside the allowed list)", ()),
        ("[].__class__.__base__.__subclasses__()", "the attribute __base__", ()),
        ("x.__init__.__globals__", "the attribute __globals__", ()),
        ("import typing\ntyping.sys", "typing.sys (a module outside the allowed list)", ()),
        ("x.softmax(-1)", "torch.Tensor.softmax", SOFTMAX),
        ("getattr(x, 'softmax')(-1)", "torch.Tensor.softmax", SOFTMAX),
        ("import torch\ntorch.Tensor.softmax(x, -1)", "torch.Tensor.softmax", SOFTMAX),
        ("open('f')", "open (not an allowed builtin)", ()),
        ("breakpoint()", "breakpoint (not an allowed builtin)", ()),
        ("__import__('os')", "__import__ (never allowed)", ()),
        ("import torch\ntorch.hub.load('a', 'b')", "torch.hub (a module outside the allowed list)", ()),
        ("import torch\ntorch.nosuchname", "torch.nosuchname (no such name)", ()),
        ("import torch\ntorch = x\ntorch.os", "a second binding of torch (an imported name)", ()),
        ("import torch\ndef g(torch):\n    return torch.os", "a second binding of torch (an imported name)", ()),
        ("import math\nimport torch as math", "a second binding of math (an imported name)", ()),
        ("import torch\nclass A(torch.nn.Module):\n    def f(self):\n        return self._modules",
         "the attribute _modules (a private name: only on self inside this file's own classes)", ()),
    ],
)
def test_hostile_snippet_is_refused(source, expected, forbidden):
    found = [u.name for u in _scan(source, forbidden)]
    assert expected in found, found


@pytest.mark.parametrize(
    "source, forbidden",
    [
        ("from __future__ import annotations", ()),
        ("from __future__ import annotations\nimport torch\ndef f(x: torch.Tensor) -> 'torch.Tensor':\n    return x", ()),
        ("import torch\nfrom torch import nn, Tensor\nclass A(nn.Module):\n    def __init__(self):\n"
         "        super().__init__()\n        self._cache = None\n    def forward(self, x):\n        return self._cache", ()),
        ("import torch.nn.functional as F\ny = F.linear(x, w)", ()),
        # Honest idioms the old spelling rules refused (issue 57).
        ('on_meta = x.device.type == "meta"', ()),
        ("import torch\ny = x.type(torch.float64)\nz = w.type(x.dtype)", ()),
        ("from torch.autograd.function import Function\nclass F(Function):\n    pass", ()),
        ("from torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x, use_reentrant=False)", ()),
        ("import torch.utils.checkpoint\ny = torch.utils.checkpoint.checkpoint(f, x, use_reentrant=False)", ()),
        ("from torch.utils import checkpoint\ny = checkpoint.checkpoint(f, x, use_reentrant=False)", ()),
        ("class A:\n    def softmax(self, x):\n        return x\n    def f(self, x):\n        return self.softmax(x)", SOFTMAX),
        ("from .attention import scaled_dot_product_attention", ()),
        ("from . import attention\nattention.softmax(x)", SOFTMAX),
        ("import math\nmath.sqrt(2)", ()),
        ('"{} {:.3f}".format(a, b)', ()),
        ('"{0} {name:>{w}}".format(a, name=b, w=3)', ()),
        ('f"{x.shape}"', ()),
        ("getattr(self, 'w_q')", ()),
        ("setattr(self, 'w_q', x)\nhasattr(self, 'w_k')", ()),
        ("type(x).__name__", ()),
        ("x.__class__.__name__", ()),
        ("from dataclasses import dataclass, field", ()),
        ("from typing import Optional, Tuple", ()),
        ("import torch\ndef f(x: torch.Tensor) -> torch.Tensor: ...", ()),
        ("import torch\ntorch.finfo(x.dtype).min", ()),
        ("import torch\ntorch.nn.init.xavier_uniform_(w)", ()),
        ("import torch\ntorch.tril(torch.ones(3, 3, dtype=torch.bool))", ()),
        ("import torch\nisinstance(x, torch.Tensor)", ()),
        ('raise ValueError(f"bad {x}")', ()),
        ("for i, (a, b) in enumerate(zip(p, q)): pass", ()),
        ("[y for y in range(3)]", ()),
        ("x.masked_fill(~m, float('-inf'))", ()),
        ("import torch\nwith torch.no_grad():\n    y = torch.autograd.grad(x, w)", ()),
        ("import torch\nfrom torch import nn\nclass A(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
         "        self.register_buffer('_mask', None)\n    def forward(self):\n        return self._mask", ()),
        ("import collections.abc\nfrom collections import namedtuple\nisinstance(x, collections.abc.Sequence)", ()),
        ("import torch\nmatch x:\n    case torch.Tensor(shape=s): pass\n    case (a, *rest): pass", ()),
        ("if __name__ == '__main__':\n    print(__doc__)", ()),
        ("import functools\n@functools.lru_cache(maxsize=None)\ndef g(n):\n    return n", ()),
        ("class V:\n    def __call__(self, y):\n        return y\n    def __eq__(self, o):\n        return True\n"
         "    __hash__ = None", ()),
        ("import torch\nfrom torch import nn\ntorch.nn.functional.softmax\nnn.Linear(2, 3).weight.data.uniform_(-1, 1)", ()),
    ],
)
def test_honest_snippet_passes(source, forbidden):
    assert _scan(source, forbidden) == []


def test_findings_are_once_each_at_their_first_line():
    found = _scan("import torch\ny = torch.os\nz = torch.os\neval('1')")
    assert [(u.name, u.line) for u in found] == [
        ("a module used as a value (torch.os)", 3), ("torch.os (a module outside the allowed list)", 3),
        ("eval (not an allowed builtin)", 5)]


def test_forbidden_entries_are_compared_as_objects_and_aten_ignored():
    forbidden = ("aten::_softmax", "torch.nn.MultiheadAttention", "torch.nn.modules.activation.MultiheadAttention")
    found = _scan("from torch.nn.modules import activation\nimport torch\ntorch.nn.MultiheadAttention", forbidden)
    names = [u.name for u in found]
    assert "torch.nn.MultiheadAttention" in names and "torch.nn.modules.activation.MultiheadAttention" not in names
    assert _scan("import torch\nx.softmax(-1)", ("aten::_softmax",)) == []


def test_scan_file_reports_a_coding_cookie_and_an_unscannable_file(tmp_path):
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\nimport math\n")
    assert [u.name for u in scan_file(latin, RULES)] == ["a coding cookie for iso-8859-1"]
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"def f(:\n")
    assert [u.name for u in scan_file(bad, RULES)] == ["a file that cannot be scanned (SyntaxError)"]
    assert [u.name for u in scan_file(tmp_path / "absent.py", RULES)] == ["a file that cannot be scanned (FileNotFoundError)"]


def test_the_api_page_lists_the_allow_list():
    """course.toml's [rules] is the one source; the page students read names every entry."""
    page = COURSE.api.read_text(encoding="utf-8")
    missing = [x for x in (*RULES.modules, *RULES.deny, *RULES.builtins) if f"`{x}`" not in page]
    assert not missing, missing


def test_the_api_page_lists_the_kernel_families():
    """course.toml's [kernels] and each unit's families are on the page, as enforce applies them."""
    page = COURSE.api.read_text(encoding="utf-8")
    for family, parts in COURSE.kernels.items():
        line = next((ln for ln in page.splitlines() if ln.strip().startswith(f"- `{family}`:")), "")
        assert line and all(f"`{p}`" in page for p in parts), family
    sections = page.split("\n## ")[1:]
    for unit in COURSE.units.values():
        section = next(s for s in sections if f"`{unit.file}`" in s.splitlines()[0])
        line = next((ln for ln in section.splitlines() if ln.startswith("Kernel families:")), "")
        assert [f for f in COURSE.kernels if f"`{f}`" in line] == [f for f in COURSE.kernels if f in unit.kernels], unit.name
