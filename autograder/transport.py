"""The wire format between the trusted grader and the sandboxed worker.

Nothing here ever unpickles: a message is a JSON header plus one blob of
raw tensor bytes (each tensor's dtype, shape and byte range are in the
header; ``torch.frombuffer`` reads them, so no code can run on decoding). Values are tagged
explicitly (tuples, lists, dicts, dtypes, devices, :class:`New` recipes,
tensors), so the decoder builds only plain data and plain ``torch.Tensor``
objects, and it checks every tensor against the dtype and shape its header
declares. A frame from the worker is untrusted: anything malformed raises
:class:`ProtocolError`, which the trusted side turns into a failed call.

Frame: ``b"ATN1"``, header length (u32, big-endian), blob length (u64),
the UTF-8 JSON header, then the blob.
"""
from __future__ import annotations

import json
import os
import struct

import torch

from .subject import Call, New, Result, StudentError

MAGIC = b"ATN1"
_PREFIX = struct.Struct(">4sIQ")
MAX_HEADER = 32 << 20  # bytes of JSON a frame may carry
MAX_BLOB = 1 << 30  # bytes of tensor data a frame may carry
MAX_DEPTH = 32

_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float16, torch.bfloat16, torch.float32, torch.float64,
        torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
        torch.complex64, torch.complex128,
    )
}


_VIEW_AS = {torch.bfloat16: torch.int16}  # no numpy dtype; same bytes
_ITEMSIZE = {d: torch.empty((), dtype=d).element_size() for d in _DTYPES.values()}


class ProtocolError(Exception):
    """A frame that does not follow this format (only a hostile or broken worker sends one)."""


# -- values ------------------------------------------------------------------

class _Encoder:
    def __init__(self):
        self.chunks: list[tuple[int, bytes]] = []
        self.offset = 0

    def blob(self) -> bytes:
        out = bytearray(self.offset)
        for at, data in self.chunks:
            out[at:at + len(data)] = data
        return bytes(out)

    def value(self, x, depth: int = 0):
        if depth > MAX_DEPTH:
            raise TypeError("value nested too deeply to send")
        if x is None or type(x) in (bool, int, float, str):
            return x
        if type(x) in (torch.Tensor, torch.nn.Parameter):
            return self.tensor(x)
        if isinstance(x, torch.Tensor):
            raise TypeError(f"a tensor subclass ({type(x).__name__}) cannot be sent")
        if type(x) is tuple:
            return {"$": "tuple", "v": [self.value(v, depth + 1) for v in x]}
        if type(x) is torch.Size:
            return {"$": "size", "v": [int(n) for n in x]}
        if type(x) is list:
            return {"$": "list", "v": [self.value(v, depth + 1) for v in x]}
        if type(x) is dict:
            return {"$": "dict", "v": [[self.value(k, depth + 1), self.value(v, depth + 1)] for k, v in x.items()]}
        if isinstance(x, torch.dtype):
            return {"$": "dtype", "v": str(x).removeprefix("torch.")}
        if isinstance(x, torch.device):
            return {"$": "device", "v": str(x)}
        if type(x) is New:
            return {"$": "new", "target": x.target, "args": self.value(x.args, depth + 1),
                    "kwargs": self.value(x.kwargs, depth + 1), "state": self.value(x.state, depth + 1)}
        raise TypeError(f"a {type(x).__name__} cannot be sent")

    def tensor(self, t: torch.Tensor):
        t = t.detach()
        if t.layout != torch.strided:
            raise TypeError(f"a {t.layout} tensor cannot be sent")
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise TypeError(f"a {t.dtype} tensor cannot be sent")
        head = {"$": "tensor", "dtype": dtype, "shape": list(t.shape), "device": str(t.device)}
        if t.device.type != "meta" and t.numel():
            if t.device.type != "cpu":
                t = t.to("cpu")
            if t.dtype in _VIEW_AS:
                t = t.view(_VIEW_AS[t.dtype])
            data = t.contiguous().numpy().tobytes()
            self.offset += -self.offset % 16  # aligned for every dtype
            head["at"] = [self.offset, len(data)]
            self.chunks.append((self.offset, data))
            self.offset += len(data)
        return head


class _Decoder:
    def __init__(self, blob: bytes, devices: bool):
        self.blob, self.devices = bytearray(blob), devices

    def value(self, x, depth: int = 0):
        if depth > MAX_DEPTH:
            raise ProtocolError("value nested too deeply")
        if x is None or type(x) in (bool, int, float, str):
            return x
        if type(x) is not dict or "$" not in x:
            raise ProtocolError(f"untagged {type(x).__name__} in a message")
        tag = x["$"]
        if tag in ("tuple", "list"):
            items = _list(x.get("v"))
            out = [self.value(v, depth + 1) for v in items]
            return tuple(out) if tag == "tuple" else out
        if tag == "dict":
            out = {}
            for pair in _list(x.get("v")):
                if type(pair) is not list or len(pair) != 2:
                    raise ProtocolError("malformed dict entry")
                key = self.value(pair[0], depth + 1)
                if type(key) not in (str, int, bool, float) and key is not None:
                    raise ProtocolError("a dict key must be a string or a number")
                out[key] = self.value(pair[1], depth + 1)
            return out
        if tag == "size":
            dims = _list(x.get("v"))
            if not all(type(n) is int and 0 <= n < 2**62 for n in dims) or len(dims) > 64:
                raise ProtocolError("malformed size")
            return torch.Size(dims)
        if tag == "dtype":
            return _dtype(x.get("v"))
        if tag == "device":
            return _device(x.get("v"))
        if tag == "new":
            target = x.get("target")
            if type(target) is not str:
                raise ProtocolError("malformed object recipe")
            args, kwargs, state = (self.value(x.get(k), depth + 1) for k in ("args", "kwargs", "state"))
            if type(args) is not tuple or type(kwargs) is not dict or not (state is None or type(state) is dict):
                raise ProtocolError("malformed object recipe")
            return New(target, args, kwargs, state)
        if tag == "tensor":
            return self.tensor(x)
        raise ProtocolError(f"unknown tag {str(tag)[:40]!r}")

    def tensor(self, x: dict) -> torch.Tensor:
        dtype = _dtype(x.get("dtype"))
        shape = x.get("shape")
        if type(shape) is not list or not all(type(n) is int and 0 <= n < 2**40 for n in shape) or len(shape) > 64:
            raise ProtocolError("malformed tensor shape")
        device = _device(x.get("device"))
        if device.type == "meta":
            return torch.empty(shape, dtype=dtype, device="meta")
        numel = 1
        for n in shape:
            numel *= n
        size = numel * _ITEMSIZE[dtype]
        at = x.get("at")
        if numel == 0:
            if at is not None:
                raise ProtocolError("an empty tensor carries data")
            t = torch.empty(shape, dtype=dtype)
        else:
            if (type(at) is not list or len(at) != 2 or not all(type(n) is int for n in at)
                    or at[1] != size or at[0] < 0 or at[0] % 16 or at[0] + size > len(self.blob)):
                raise ProtocolError("a tensor's data does not match its declared dtype and shape")
            t = torch.frombuffer(self.blob, dtype=dtype, count=numel, offset=at[0]).reshape(shape)
        if device.type != "cpu":
            if not self.devices:
                raise ProtocolError(f"a tensor claims to be on {device}")
            t = t.to(device)
        return t


def _list(v) -> list:
    if type(v) is not list:
        raise ProtocolError("malformed sequence")
    return v


def _dtype(name) -> torch.dtype:
    if type(name) is not str or name not in _DTYPES:
        raise ProtocolError(f"unknown dtype {str(name)[:40]!r}")
    return _DTYPES[name]


_DEVICES: dict[str, torch.device] = {}


def _device(name) -> torch.device:
    if type(name) is str and name in _DEVICES:
        return _DEVICES[name]
    if type(name) is not str or len(name) > 32:
        raise ProtocolError("malformed device")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ProtocolError(f"unknown device {name[:32]!r}") from None
    if device.type not in ("cpu", "cuda", "meta", "mps", "xpu"):
        raise ProtocolError(f"unknown device {name[:32]!r}")
    if len(_DEVICES) < 64:
        _DEVICES[name] = device
    return device


# -- frames --------------------------------------------------------------------

def pack(header: dict, values: dict | None = None) -> bytes:
    """One frame: ``header`` (plain JSON) with ``values`` (any sendable data) under "values"."""
    enc = _Encoder()
    if values is not None:
        header = {**header, "values": {k: enc.value(v) for k, v in values.items()}}
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob = enc.blob()
    return _PREFIX.pack(MAGIC, len(head), len(blob)) + head + blob


def unpack(head: bytes, blob: bytes, *, devices: bool = True) -> tuple[dict, dict]:
    """The header and its decoded values; raises :class:`ProtocolError` on anything malformed."""
    try:
        header = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ProtocolError("the message header is not valid JSON") from None
    if type(header) is not dict:
        raise ProtocolError("the message header is not an object")
    raw = header.pop("values", {})
    if type(raw) is not dict:
        raise ProtocolError("malformed values")
    dec = _Decoder(blob, devices)
    try:
        values = {k: dec.value(v) for k, v in raw.items()}
    except RecursionError:
        raise ProtocolError("value nested too deeply") from None
    return header, values


def read_exact(fd: int, n: int) -> bytes:
    """Blocking read of exactly ``n`` bytes (used by the worker on its request pipe)."""
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the pipe was closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, *, devices: bool = True) -> tuple[dict, dict]:
    magic, n_head, n_blob = _PREFIX.unpack(read_exact(fd, _PREFIX.size))
    if magic != MAGIC or n_head > MAX_HEADER or n_blob > MAX_BLOB:
        raise ProtocolError("bad frame")
    head = read_exact(fd, n_head)
    return unpack(head, read_exact(fd, n_blob), devices=devices)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class FrameReader:
    """Incremental frame parser for the trusted side, fed by non-blocking reads."""

    def __init__(self):
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def frame_ready(self) -> bool:
        if len(self.buffer) < _PREFIX.size:
            return False
        _, n_head, n_blob = _PREFIX.unpack_from(self.buffer)
        return len(self.buffer) >= _PREFIX.size + n_head + n_blob

    def frame(self) -> tuple[bytes, bytes] | None:
        """The next complete frame's (header, blob), if one has arrived."""
        if len(self.buffer) < _PREFIX.size:
            return None
        magic, n_head, n_blob = _PREFIX.unpack_from(self.buffer)
        if magic != MAGIC or n_head > MAX_HEADER or n_blob > MAX_BLOB:
            raise ProtocolError("the worker sent a malformed frame")
        end = _PREFIX.size + n_head + n_blob
        if len(self.buffer) < end:
            return None
        head = bytes(self.buffer[_PREFIX.size:_PREFIX.size + n_head])
        blob = bytes(self.buffer[_PREFIX.size + n_head:end])
        del self.buffer[:end]
        return head, blob


# -- calls and results ----------------------------------------------------------

_CALL_FIELDS = ("unit", "target", "args", "kwargs", "method", "train", "device", "dtype", "seed",
                "grad_outputs", "noncontiguous", "return_state")


def call_values(call: Call) -> dict:
    return {name: getattr(call, name) for name in _CALL_FIELDS}


def call_from(values: dict) -> Call:
    return Call(**{name: values[name] for name in _CALL_FIELDS})


_RESULT_FIELDS = ("output", "arg_grads", "kwarg_grads", "param_grads", "state", "buffers", "mutated")


def result_values(result: Result) -> dict:
    return {name: getattr(result, name) for name in _RESULT_FIELDS}


def result_from(values: dict) -> Result:
    """A :class:`Result` from a worker's reply, its fields checked for type."""
    if set(values) != set(_RESULT_FIELDS):
        raise ProtocolError("a result does not have the expected fields")
    r = Result(**values)
    if type(r.arg_grads) is not tuple or type(r.kwarg_grads) is not dict or type(r.param_grads) is not dict:
        raise ProtocolError("malformed gradients in a result")
    if not (r.state is None or type(r.state) is dict) or not (r.buffers is None or type(r.buffers) is dict):
        raise ProtocolError("malformed state in a result")
    if type(r.mutated) is not list or not all(type(m) is str for m in r.mutated):
        raise ProtocolError("malformed list of modified inputs")
    return r


def error_header(error: StudentError) -> dict:
    return {"kind": str(error.kind), "message": str(error.message), "where": str(error.where)}


def error_from(header: dict) -> StudentError:
    fields = [header.get(k) for k in ("kind", "message", "where")]
    if not all(type(f) is str for f in fields):
        raise ProtocolError("malformed error report")
    kind, message, where = (f[:2000] for f in fields)
    return StudentError(kind[:100], message, where[:200])
