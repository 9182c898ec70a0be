"""The trusted side is bounded (issue 13, items 4 and 6).

What a worker sends costs the trusted process little and can only fail the
call: every malformed frame is a ProtocolError, tensors are bounded before
anything is allocated from them, writes to a worker have deadlines, and the
worker's error text reaches a report capped and without stand-in code. And
the reference solutions are not in the wheel.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
import torch

from autograder.core import redact
from autograder.sandbox.inside import transport
from autograder.core.manifest import load_course

from test_sandbox import drive

ROOT = Path(__file__).resolve().parents[2]
COURSE = load_course(ROOT)
HOSTILE = ROOT / "tests" / "hostile"
STAND_IN = (ROOT / "course" / "stand_ins" / "attention.py").read_text(encoding="utf-8")


def frame(header, blob: bytes = b"", *, n_head: int | None = None, n_blob: int | None = None, magic=b"ATN1") -> bytes:
    """A frame as a worker could write it: any header (dict or raw bytes), any declared sizes."""
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    sizes = (len(head) if n_head is None else n_head, len(blob) if n_blob is None else n_blob)
    return struct.pack(">4sIQ", magic, *sizes) + head + blob


def tensor(shape, dtype="float64", device="cpu", at=None, **extra) -> dict:
    return {"tensor": at, "dtype": dtype, "shape": shape, "device": device, **extra}


def reply(*values) -> dict:
    return {"op": "result", "ok": True, "values": {f"v{i}": v for i, v in enumerate(values)}}


def decode(data: bytes):
    reader = transport.FrameReader()
    reader.feed(data)
    got = reader.frame()
    assert got is not None, "the frame is incomplete"
    return transport.unpack(*got)


def nested(depth: int):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


MB = 1 << 20
CRAFTED = {
    "meta tensor of 2**26 float64": frame(reply(tensor([2**26], device="meta"))),
    "meta tensor whose shape overflows": frame(reply(tensor([2**39] * 4, device="meta"))),
    "cpu tensor whose shape overflows": frame(reply(tensor([2**62, 2**62], at=[0, 0]))),
    "empty tensor with an enormous dim": frame(reply(tensor([0, 2**62]))),
    "negative dim": frame(reply(tensor([-1, 4], device="meta"))),
    "float dim": frame(reply(tensor([2.5], device="meta"))),
    "too many dims": frame(reply(tensor([1] * 40, device="meta"))),
    "many meta tensors together over the budget": frame(reply(*[tensor([2**17], device="meta")] * 40)),
    "unknown dtype": frame(reply(tensor([2], dtype="float128", device="meta"))),
    "dtype that is not a string": frame(reply(tensor([2], dtype=["float32"], device="meta"))),
    "unknown device": frame(reply(tensor([2], device="tpu:0"))),
    "strides": frame(reply(tensor([2, 2], device="meta", stride=[0, 0]))),
    "unknown tag": frame(reply({"pickle": "cos\nsystem\n"})),
    "untagged object": frame(reply({"shape": [2]})),
    "two tags in one object": frame(reply({"tuple": [], "dict": {}})),
    "a tag beside a tensor's fields": frame(reply(tensor([2], device="meta", tuple=[]))),
    "malformed size": frame(reply({"size": [-1]})),
    "dict whose key is a tensor": frame(reply({"dict": [[tensor([1], device="meta"), 1]]})),
    "data that does not match the shape": frame(reply(tensor([4], at=[0, 16])), bytes(16)),
    "data past the blob": frame(reply(tensor([4], at=[16, 32])), bytes(32)),
    "two tensors on the same bytes": frame(reply(tensor([2], at=[0, 16]), tensor([2], at=[0, 16])), bytes(16)),
    "meta tensor with data": frame(reply(tensor([2], device="meta", at=[0, 16])), bytes(16)),
    "nesting past the depth limit": frame(reply(nested(40))),
    "nesting that breaks the JSON parser": frame(b'{"values":{"v":' + b"[" * 50000 + b"]" * 50000 + b"}}"),
    "an integer of 5000 digits": frame(b'{"values":{"v":' + b"9" * 5000 + b"}}"),
    "header that is not JSON": frame(b"\x80\x81 not json"),
    "header that is a list": frame(b"[1, 2]"),
    "values that are a list": frame({"values": [1]}),
    "dict entry that is not a pair": frame(reply({"dict": [[1, 2, 3]]})),
    "recipe with a tensor as target": frame(reply({"new": tensor([1], device="meta"), "args": {"tuple": []},
                                                   "kwargs": {"dict": {}}})),
    "recipe with unknown fields": frame(reply({"new": "Linear", "args": {"tuple": []}, "kwargs": {"dict": {}},
                                               "code": "os.system"})),
}
PREFIXES = {
    "bad magic": frame({"op": "result"}, magic=b"PKL0"),
    "header over the limit": frame(b"{}", n_head=transport.MAX_HEADER + 1),
    "blob over the limit": frame(b"{}", n_blob=transport.MAX_BLOB + 1),
    "a frame with the old limits (32 MiB of header, 1 GiB of blob)": frame(b"{}", n_head=32 * MB, n_blob=1 << 30),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_frame_is_a_protocol_error(case):
    with pytest.raises(transport.ProtocolError):
        decode(CRAFTED[case])


@pytest.mark.parametrize("case", PREFIXES)
def test_a_frame_over_the_limits_is_refused_on_its_prefix(case):
    """The reader refuses it from its first 16 bytes, before it buffers the rest."""
    reader = transport.FrameReader()
    with pytest.raises(transport.ProtocolError):
        reader.feed(PREFIXES[case][:16])


def test_a_second_bad_frame_is_refused_as_it_arrives():
    good = transport.pack({"op": "result"})
    reader = transport.FrameReader()
    with pytest.raises(transport.ProtocolError):
        reader.feed(good + PREFIXES["blob over the limit"][:16])


def test_a_flood_of_frames_is_refused():
    reader = transport.FrameReader()
    empty = frame(b"{}", bytes(transport.MAX_BLOB))
    reader.feed(empty)
    with pytest.raises(transport.ProtocolError):
        for _ in range(4):
            reader.feed(empty)


def test_honest_values_at_the_limits_go_through():
    """A reply 10x the largest of an honest grade still decodes, every kind of value intact."""
    values = {"output": (torch.randn(256, 1024), [torch.randn(3, 4, dtype=torch.float64), None]),
              "meta": torch.empty(2**17, device="meta"), "empty": torch.empty(0, 7), "half": torch.ones(3, dtype=torch.bfloat16),
              "mask": torch.rand(5, 5) < 0.5, "plain": {"a": 1, 2: 2.5, "d": torch.float16, "s": torch.Size([2, 3])}}
    header, got = decode(transport.pack({"op": "result"}, values))
    assert header == {"op": "result"}
    assert torch.equal(got["output"][0], values["output"][0]) and torch.equal(got["output"][1][0], values["output"][1][0])
    assert got["meta"].device.type == "meta" and got["meta"].shape == (2**17,)
    assert got["empty"].shape == (0, 7) and torch.equal(got["half"], values["half"]) and torch.equal(got["mask"], values["mask"])
    assert got["plain"] == values["plain"]


@pytest.mark.parametrize("output", [torch.zeros(transport.MAX_BLOB // 8 + 1, dtype=torch.float64), [0.5] * 20_000],
                         ids=["tensor data", "JSON"])
def test_a_worker_cannot_send_more_than_the_limit(output):
    """The worker's encoder refuses too big an output with TypeError, which it reports as BadOutput."""
    with pytest.raises(TypeError, match="at most"):
        transport.pack({"op": "result"}, {"output": output})


# -- the trusted process's peak memory ------------------------------------------------

MEMORY_PROBE = r"""
import json, resource, sys
import torch
from autograder.sandbox.inside import transport
from autograder.testing.gradcheck import check_gradients
from autograder.core.protocol import Call
torch.set_num_threads(1)

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def trusted_side(data):
    # What the trusted process does with a reply: read it, decode it, check gradients on it.
    reader = transport.FrameReader()
    for at in range(0, len(data), 1 << 16):
        reader.feed(data[at:at + (1 << 16)])
    header, values = transport.unpack(*reader.frame())
    result = transport.result_from(values)
    x = torch.randn(4, dtype=torch.float64)
    try:
        check_gradients(lambda call: result, lambda ts, g: Call("u", "f", tuple(ts), grad_outputs=g), [x])
    except Exception:
        pass  # a wrong gradient, or meta values, fail the test; only the memory counts here

def result(output, grad):
    return {"output": output, "arg_grads": {"tuple": [grad]}, "kwarg_grads": {"dict": {}},
            "param_grads": {"dict": {}}, "state": None, "buffers": None, "mutated": [], "largest": None}

honest = transport.pack({"op": "result", "ok": True}, {
    "output": torch.randn(384, 1024), "arg_grads": (torch.randn(4, dtype=torch.float64),), "kwarg_grads": {},
    "param_grads": {}, "state": None, "buffers": None, "mutated": [], "largest": None})
trusted_side(honest)
baseline = peak()
out = {"honest": baseline, "refused": [], "accepted": []}
grad = {"tensor": None, "dtype": "float64", "shape": [4], "device": "meta"}
attacks = {
    "meta bomb": {"tensor": None, "dtype": "float64", "shape": [2**26], "device": "meta"},
    "meta at the limit": {"tensor": None, "dtype": "float64", "shape": [transport.MAX_BLOB // 8 - 4], "device": "meta"},
    "overflow": {"tensor": None, "dtype": "float64", "shape": [2**39] * 4, "device": "meta"},
    "many metas": {"tuple": [{"tensor": None, "dtype": "float64", "shape": [2**20], "device": "meta"}] * 300},
}
for name, output in attacks.items():
    head = json.dumps({"op": "result", "ok": True, "values": result(output, grad)}).encode()
    data = transport._PREFIX.pack(transport.MAGIC, len(head), 0) + head
    try:
        trusted_side(data)
        out["accepted"].append(name)
    except transport.ProtocolError:
        out["refused"].append(name)
# One reply at the limits: a full header (padded) and a full blob, one tensor over nearly all of it.
n = transport.MAX_BLOB // 8 - 4
big = {"tensor": [0, 8 * n], "dtype": "float64", "shape": [n], "device": "cpu"}
head = json.dumps({"op": "result", "ok": True, "pad": "", "values": result(big, grad)}).encode()
head = head.replace(b'"pad": ""', b'"pad": "' + b"x" * (transport.MAX_HEADER - len(head)) + b'"')
assert len(head) == transport.MAX_HEADER
try:
    trusted_side(transport._PREFIX.pack(transport.MAGIC, len(head), transport.MAX_BLOB) + head + bytes(transport.MAX_BLOB))
    out["accepted"].append("at the limits")
except transport.ProtocolError:
    out["refused"].append("at the limits")
out["peak"] = peak()
print(json.dumps(out))
"""


def test_replies_cost_the_trusted_side_little_memory():
    """Crafted replies are refused or bounded: the peak stays within 256 MiB of an honest reply's."""
    proc = subprocess.run([sys.executable, "-c", MEMORY_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert {"meta bomb", "overflow", "many metas"} <= set(out["refused"]), out
    assert {"meta at the limit", "at the limits"} <= set(out["accepted"]), out  # bounds, not refusals
    assert out["peak"] - out["honest"] < 256 * MB, out


# -- deadlines on writes -----------------------------------------------------------

def test_a_write_to_a_reader_that_stops_reading_times_out():
    """A pipe shrunk to one page and never read costs the writer its timeout, not its life."""
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            transport.write_all(w, bytes(64 << 10), timeout=0.5)
        assert 0.4 < time.monotonic() - start < 5
        assert os.get_blocking(w), "the descriptor's blocking mode is restored"
    finally:
        os.close(r)
        os.close(w)


def test_a_write_with_a_deadline_delivers_everything_to_a_slow_reader():
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    data = os.urandom(256 << 10)
    got = bytearray()

    def read():
        while chunk := os.read(r, 1000):
            got.extend(chunk)
            time.sleep(0.0005)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        transport.write_all(w, data, timeout=30)
    finally:
        os.close(w)
        reader.join(30)
        os.close(r)
    assert bytes(got) == data


# -- what a worker's error text shows ---------------------------------------------------

def stand_in_lines(source: str = STAND_IN) -> set[str]:
    return {n for n in (" ".join(line.split()) for line in source.splitlines()) if len(n) >= redact.MIN_LINE}


def leaked(text: str, source: str = STAND_IN) -> list[str]:
    flat = " ".join(text.split())
    return sorted(line for line in stand_in_lines(source) if line in flat)


@pytest.fixture(scope="module")
def redactor():
    return redact.for_course(COURSE)


def test_the_stand_ins_are_covered(redactor):
    """for_course reads every unit's stand-ins; so each line of each one would be found."""
    sources = redact.stand_in_sources(COURSE.root, sorted({p for u in COURSE.units.values() for p in u.files()}))
    assert len(sources) == len(list((ROOT / "course" / "stand_ins").glob("*.py"))) >= 2
    assert all(redactor.lines >= stand_in_lines(s) for s in sources)


@pytest.mark.parametrize("join", ["\n", " ", "\n\n  ", "\t"])
@pytest.mark.parametrize("start", range(0, len(STAND_IN), 400))
def test_stand_in_text_is_removed(redactor, start, join):
    """Chunks of a stand-in's source, however its lines are joined, come out without its lines."""
    lines = STAND_IN[start:start + 1900].split("\n")
    message = "my own words first\n" + join.join(lines)
    cleaned = redactor.clean(message, limit=10_000)
    assert not leaked(cleaned), leaked(cleaned)
    assert cleaned.startswith("my own words first")


@pytest.mark.parametrize("message", [
    "x = 1",
    "query's last dim 8 must equal key's last dim 10",
    "dropout_p=1.5 must be in [0, 1)",
    "key has 5 positions but value has 6",
    "causal_mask: query_len=-1 and key_len=3 must be >= 0",
    "expected x of shape (2, 5, 8), got (2, 5, 9): embed_dim 8 is not divisible by num_heads 3",
    "torch.softmax is not allowed here, so I wrote it with exp and sum over the last dim myself",
])
def test_a_students_own_message_survives(redactor, message):
    assert redactor.clean(message) == message


def test_a_long_message_is_capped(redactor):
    cleaned = redactor.clean("my own long story " * 1000)
    assert len(cleaned) <= redact.MESSAGE_LIMIT + 1 and cleaned.startswith("my own long story")


def test_the_error_report_is_cleaned_on_the_trusted_side(redactor):
    chunk = STAND_IN[1000:2900]
    assert leaked(chunk)
    error = transport.error_from({"kind": "ValueError", "message": "oops\n" + chunk, "where": chunk}, redactor)
    assert error.kind == "ValueError" and error.message.startswith("oops")
    assert not leaked(error.message) and not leaked(error.where)
    assert len(error.message) <= redact.MESSAGE_LIMIT + 1 and len(error.where) <= 201
    plain = transport.error_from({"kind": "K" * 500, "message": "m" * 5000, "where": "w" * 500})
    assert (len(plain.kind), len(plain.message), len(plain.where)) == (101, redact.MESSAGE_LIMIT + 1, 201)


# -- the wheel -----------------------------------------------------------------------

def test_the_wheel_holds_no_solutions(tmp_path):
    """A regular `pip install .` cannot put the reference solutions on a worker's path."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, src / name)
    for name in ("autograder", "solutions", "assignments"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
                           "-q", "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "autograder/sandbox/inside/transport.py" in names
    assert not [n for n in names if n.split("/")[0] == "solutions"]


# -- end to end: hostile submissions, sandboxed ------------------------------------------

TRANSPORT_CASES = sorted(p.name for p in HOSTILE.iterdir() if p.name.startswith(("transport_", "leak_")))


@pytest.fixture(scope="module")
def hostile_multi_head(tmp_path_factory):
    base = tmp_path_factory.mktemp("trusted")
    paths = [shutil.copytree(HOSTILE / name, base / name) for name in TRANSPORT_CASES]
    honest = base / "honest"
    honest.mkdir()
    shutil.copyfile(ROOT / "solutions" / "multi_head.py", honest / "multi_head.py")
    # The allow-list off: these attacks must reach the transport and the redaction, as code that got
    # past the allow-list and the restricted builtins would (with them on, their `open` ends them first).
    results = drive([*paths, honest], ["multi_head"], timeout=2.0, allow_list=False)["results"]
    return dict(zip([*TRANSPORT_CASES, "honest"], (r["units"]["multi_head"] for r in results)))


def outputs(unit: dict) -> str:
    return "\n".join([unit["message"], *(t["output"] for t in unit["tests"])])


def test_the_attacks_are_kept():
    assert {"leak_standin", "transport_meta_bomb", "transport_shape_overflow"} <= set(TRANSPORT_CASES)


@pytest.mark.xdist_group("trusted-hostile")  # the three share one worker's hostile_multi_head
@pytest.mark.parametrize("case", TRANSPORT_CASES)
def test_an_attack_on_the_trusted_side_scores_zero(hostile_multi_head, case):
    unit = hostile_multi_head[case]
    assert unit["score"] == 0, [(t["id"], t["output"]) for t in unit["tests"] if t["score"]]


@pytest.mark.xdist_group("trusted-hostile")
def test_the_other_submissions_of_the_run_are_graded(hostile_multi_head):
    unit = hostile_multi_head["honest"]
    assert unit["score"] == unit["max_score"] > 0, [(t["id"], t["output"]) for t in unit["tests"] if not t["score"]]


@pytest.mark.xdist_group("trusted-hostile")
def test_no_stand_in_line_reaches_the_report(hostile_multi_head):
    text = outputs(hostile_multi_head["leak_standin"])
    assert "your code raised" in text  # the attack ran
    assert not leaked(text), leaked(text)
