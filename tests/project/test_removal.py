"""Trust by removal (issue 57): what the worker does to a process before a unit loads, shown in a
fresh interpreter (a removal is for the process's whole life).

* With every kernel family removed and every unit's forbidden names and the erased trees gone, the
  course's stand-ins and handed cells still compute what torch's own modules compute (outputs and
  gradients, float64), so nothing trusted needs what was removed.
* What was removed raises for anyone: this test's own code, torch's Python (F.softmin, an
  nn.MultiheadAttention found as another module's part), the erased trees, a fresh import of one.
* A handed cell works only for the instances handed to the call running; a gated stand-in only
  for its entries.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

SCRIPT = textwrap.dedent(r"""
    import json, sys, torch
    from autograder.trust import enforce, loader
    from autograder.core.manifest import load_course

    course = load_course()
    torch.manual_seed(0)
    out = {}
    D, H, B, L, E, heads = 4, 3, 2, 5, 8, 2
    x = torch.randn(B, D, dtype=torch.float64)
    q = torch.randn(B, heads, L, E // heads, dtype=torch.float64)
    seq = torch.randn(B, L, E, dtype=torch.float64)
    mask = torch.rand(L, L) > 0.3
    cells = {name: getattr(torch.nn, name)(D, H, dtype=torch.float64) for name in ("RNNCell", "LSTMCell", "GRUCell")}

    def flat(value):
        return torch.cat([t.reshape(-1) for t in (value if isinstance(value, tuple) else (value,))])

    def with_grad(fn, *inputs):
        inputs = [t.detach().requires_grad_() for t in inputs]
        value = flat(fn(*inputs))
        return value.detach(), torch.autograd.grad(value.pow(2).sum(), inputs)

    # Before removal: torch's own answers.
    expected = {name: with_grad(lambda t, c=cell: c(t), x) for name, cell in cells.items()}
    expected["attention"] = with_grad(lambda t: torch.nn.functional.scaled_dot_product_attention(
        t, t, t, attn_mask=mask), q)
    mha = torch.nn.MultiheadAttention(E, heads, batch_first=True, dtype=torch.float64)
    expected["multi_head"] = with_grad(lambda t: mha(t, t, t, attn_mask=~mask)[0], seq)

    enforce.install(course.kernels)
    enforce.remove(course.kernels)
    enforce.erase([n for u in course.units.values() for n in u.forbidden], course.rules.erase)

    unit = course.units["recurrent_cells"]
    handed = loader.load_handed(course, unit)
    enforce.gate_handed(handed)
    got = {}
    for name, cell in cells.items():
        mine = getattr(handed, name)(D, H, dtype=torch.float64)
        mine.load_state_dict(cell.state_dict())
        with enforce.handing([mine]):
            got[name] = with_grad(lambda t, c=mine: c(t), x)
        try:
            mine(x)
            out[f"{name} outside its call"] = "ran"
        except enforce.Forbidden as refused:
            out[f"{name} outside its call"] = refused.family
    stand_ins = loader.load_stand_ins(course, course.units["transformer_block"])
    got["attention"] = with_grad(lambda t: stand_ins["attention"].scaled_dot_product_attention(t, t, t, mask)[0], q)
    theirs = stand_ins["multi_head"].MultiHeadAttention(E, heads).double()
    w, b = mha.in_proj_weight.detach().chunk(3), mha.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for proj, wi, bi in zip((theirs.q_proj, theirs.k_proj, theirs.v_proj), w, b):
            proj.weight.copy_(wi); proj.bias.copy_(bi)
        theirs.out_proj.load_state_dict(mha.out_proj.state_dict())
    got["multi_head"] = with_grad(lambda t: theirs(t, attn_mask=mask)[0], seq)
    for name in expected:
        (v0, g0), (v1, g1) = expected[name], got[name]
        out[name] = bool(torch.allclose(v0, v1, atol=1e-10) and all(torch.allclose(a, c, atol=1e-10) for a, c in zip(g0, g1)))

    routes = {
        "softmin": lambda: torch.nn.functional.softmin(x, -1),
        "C softmax": lambda: torch._C._VariableFunctions.softmax(x, -1),
        "layer norm": lambda: torch.nn.functional.group_norm(x[None], 1),
        "lstm kernel": lambda: torch.ops.aten.lstm_cell(x, [x[:, :H], x[:, :H]], torch.ones(4 * H, D, dtype=x.dtype),
                                               torch.ones(4 * H, H, dtype=x.dtype)),
        "torch's MHA inside another module": lambda: type(torch.nn.TransformerEncoderLayer(8, 2).self_attn)(8, 2),
        "quantizable LSTM": lambda: torch.ao.nn.quantizable.LSTMCell(D, H),
        "torch.nn.attention": lambda: torch.nn.attention.sdpa_kernel([]),
        "flex attention imported anew": lambda: __import__("torch.nn.attention.flex_attention"),
        "ONNX imported anew": lambda: __import__("torch.onnx.ops"),
    }
    for name, route in routes.items():
        try:
            route()
            out[name] = "ran"
        except enforce.Forbidden as refused:
            out[name] = refused.family
        except ImportError:
            out[name] = "ImportError"
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def removed() -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell", "attention", "multi_head"])
def test_stand_ins_and_handed_cells_equal_torch_with_every_family_removed(removed, name):
    assert removed[name] is True, name


def test_an_erased_class_is_named_as_the_unit_lists_it_first(removed):
    """course.toml lists torch.nn.TransformerEncoderLayer before its defining module's path."""
    assert removed["torch's MHA inside another module"] == "erased:torch.nn.TransformerEncoderLayer"


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_a_handed_cell_computes_nothing_outside_its_call(removed, name):
    assert removed[f"{name} outside its call"] == "handed"


@pytest.mark.parametrize("route, family", [
    ("softmin", "erased"),  # F.softmin calls Tensor.softmax, erased
    ("C softmax", "softmax"),  # the C function: its kernel raises
    ("layer norm", "normalisation"),
    ("lstm kernel", "recurrent"),
    ("torch's MHA inside another module", "erased"),  # (as "erased:torch.nn.MultiheadAttention")
    ("quantizable LSTM", "erased"),
    ("torch.nn.attention", "erased"),
    ("flex attention imported anew", "ImportError"),
    ("ONNX imported anew", "ImportError"),
])
def test_what_was_removed_raises_for_anyone(removed, route, family):
    assert removed[route].split(":")[0] == family, (route, removed[route])
