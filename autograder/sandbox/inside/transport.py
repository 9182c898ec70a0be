"""The wire format between the trusted grader and the sandboxed worker.

Nothing here ever unpickles: a message is a JSON header plus one blob of
raw tensor bytes (each tensor's dtype, shape and byte range are in the
header; ``torch.frombuffer`` reads them, so no code can run on decoding). Values are written
as the cases a student reads are (:mod:`autograder.core.value_codec`: tuples, lists, dicts,
dtypes, devices, sizes, :class:`New` recipes, tensors, each tagged), exactly, so the decoder
builds only plain data and plain ``torch.Tensor`` objects, and it checks every tensor against
the dtype and shape its header declares. A frame from the worker is untrusted: anything malformed raises
:class:`ProtocolError` (and nothing else), which the trusted side turns into
a failed call.

The limits fit the course's tensors, so that what a worker declares costs the
trusted side little: in a full grade of solutions/ the largest reply is 385 KiB
and the largest call 769 KiB (headers up to 2.2 KiB; the largest tensor has
98,304 elements), and every limit below is 5x to 30x that. The bytes every
tensor of a frame declares, meta tensors included (they cost nothing to build,
but the tests allocate from their shape), count against the same budget as the
blob.

Frame: ``b"ATN1"``, header length (u32, big-endian), blob length (u64),
the UTF-8 JSON header, then the blob.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import struct
import time
from typing import cast

import torch

from autograder.core.errors import AutograderError
from autograder.core import value_codec
from autograder.core.redact import MESSAGE_LIMIT, Redactor
from autograder.core.protocol import Call, Result, StudentError

MAGIC = b"ATN1"
_PREFIX = struct.Struct(">4sIQ")
MAX_HEADER = 64 << 10  # bytes of JSON a frame may carry
MAX_BLOB = 4 << 20  # bytes of tensor data a frame may carry, and bytes its tensors may declare
MAX_DIMS = 16  # the course's tensors have at most 5
MAX_DEPTH = 32
# Bytes asked of each read of a pipe: what a pipe holds by default. CPython allocates the whole
# size before reading, and past glibc's mmap threshold (128 KiB) that is an mmap and a munmap
# per read: a 1 MiB read of a 2 KB reply took 12.5 us here, a 64 KiB one 0.8 us.
READ_SIZE = 1 << 16
# A reader buffers at most two whole frames: a worker answers one call at a time.
MAX_BUFFERED = 2 * (_PREFIX.size + MAX_HEADER + MAX_BLOB)

_DTYPES: dict[str, torch.dtype] = {
    value_codec.dtype_name(d): d
    for d in (
        torch.float16, torch.bfloat16, torch.float32, torch.float64,
        torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
        torch.complex64, torch.complex128,
    )
}


_VIEW_AS = {torch.bfloat16: torch.int16}  # no numpy dtype; same bytes
_ITEMSIZE = {d: torch.empty((), dtype=d).element_size() for d in _DTYPES.values()}


class ProtocolError(AutograderError):
    """A frame that does not follow this format (only a hostile or broken worker sends one)."""


# -- values ------------------------------------------------------------------
# The cases' JSON (autograder.core.value_codec), exact: what arrives is what was sent. A grade
# sends about 4,600 calls, 5 tensors each, and gets their results: the coders take the common
# cases (plain values, CPU tensors) first. A tensor is {"tensor": [offset, bytes] or null (meta
# or empty), "dtype": name, "shape": [...], "device": name}: its data lies at offset in the blob.

_DTYPE_NAMES = {d: name for name, d in _DTYPES.items()}
_TENSOR_FIELDS = frozenset(("tensor", "dtype", "shape", "device"))  # anything else (strides...) is refused


class _Encoder(value_codec.Encoder):
    max_depth = MAX_DEPTH

    def __init__(self):
        self.chunks: list[bytes] = []
        self.offset = 0

    def blob(self) -> bytes:
        if self.offset > MAX_BLOB:
            raise TypeError(f"the tensors come to {self.offset} bytes; at most {MAX_BLOB} can be sent")
        return b"".join(self.chunks)

    def tensor(self, t: torch.Tensor) -> dict:
        if t.layout != torch.strided:
            raise TypeError(f"a {t.layout} tensor cannot be sent")
        dtype = _DTYPE_NAMES.get(t.dtype)
        if dtype is None:
            raise TypeError(f"a {t.dtype} tensor cannot be sent")
        device = "cpu" if t.is_cpu else "meta" if t.is_meta else str(t.device)
        head = {"tensor": None, "dtype": dtype, "shape": list(t.shape), "device": device}
        if device != "meta" and t.numel():
            t = t.detach()
            if device != "cpu":
                t = t.to("cpu")
            if t.dtype in _VIEW_AS:
                t = t.view(_VIEW_AS[t.dtype])
            data = t.contiguous().numpy().tobytes()
            pad = -self.offset % 16  # aligned for every dtype
            if pad:
                self.chunks.append(bytes(pad))
                self.offset += pad
            head["tensor"] = [self.offset, len(data)]
            self.chunks.append(data)
            self.offset += len(data)
        return head


class _Decoder(value_codec.Decoder):
    max_depth = MAX_DEPTH
    error = ProtocolError
    dtypes = _DTYPES

    def __init__(self, blob: bytes | bytearray, devices: bool):
        # frombuffer wants writable memory; a reader's blob is a private bytearray already.
        self.blob = blob if type(blob) is bytearray else bytearray(blob)
        self.devices = devices
        self.end = 0  # tensors' byte ranges follow each other, as the encoder lays them out
        self.declared = 0  # bytes declared by the tensors so far, meta tensors included

    def device(self, name) -> torch.device:
        return _device(name)

    def tensor(self, x: dict) -> torch.Tensor:
        if not x.keys() <= _TENSOR_FIELDS:
            raise ProtocolError("unexpected fields in a tensor")
        dtype = self.dtype(x.get("dtype"))
        shape = x.get("shape")
        if type(shape) is not list or len(shape) > MAX_DIMS:
            raise ProtocolError("malformed tensor shape")
        numel = 1
        for n in shape:
            if type(n) is not int or not 0 <= n <= MAX_BLOB:
                raise ProtocolError("malformed tensor shape")
            numel *= n
        size = numel * _ITEMSIZE[dtype]
        self.declared += size
        if self.declared > MAX_BLOB:
            raise ProtocolError(f"the tensors of a reply declare more than {MAX_BLOB} bytes")
        device = _device(x.get("device"))
        at = x["tensor"]
        if device.type == "meta" or numel == 0:
            if at is not None:
                raise ProtocolError("a meta or empty tensor carries data")
            t = torch.empty(shape, dtype=dtype, device="meta" if device.type == "meta" else "cpu")
            if device.type == "meta":
                return t
        else:
            if (type(at) is not list or len(at) != 2 or type(at[0]) is not int or type(at[1]) is not int
                    or at[1] != size or at[0] < self.end or at[0] % 16 or at[0] + size > len(self.blob)):
                raise ProtocolError("a tensor's data does not match its declared dtype and shape")
            self.end = at[0] + size
            t = torch.frombuffer(self.blob, dtype=dtype, count=numel, offset=at[0]).reshape(shape)
        if device.type != "cpu":
            if not self.devices:
                raise ProtocolError(f"a tensor claims to be on {device}")
            t = t.to(device)
        return t


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
    if len(head) > MAX_HEADER:
        raise TypeError(f"the values come to {len(head)} bytes of JSON; at most {MAX_HEADER} can be sent")
    blob = enc.blob()
    return _PREFIX.pack(MAGIC, len(head), len(blob)) + head + blob


def unpack(head: bytes, blob: bytes | bytearray, *, devices: bool = True) -> tuple[dict, dict]:
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
    except ProtocolError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever torch or Python make of a crafted value
        raise ProtocolError(f"an undecodable value ({type(error).__name__})") from None
    return header, values


def _sizes(buffer, at: int = 0) -> tuple[int, int]:
    magic, n_head, n_blob = _PREFIX.unpack_from(buffer, at)
    if magic != MAGIC:
        raise ProtocolError("a frame does not start with the magic bytes")
    if n_head > MAX_HEADER or n_blob > MAX_BLOB:
        raise ProtocolError(f"a frame of {n_head} + {n_blob} bytes is over the limits ({MAX_HEADER} + {MAX_BLOB})")
    return n_head, n_blob


def read_frame(fd: int, reader: FrameReader, *, devices: bool = True) -> tuple[dict, dict]:
    """The next frame from blocking ``fd`` (the worker's request pipe), decoded; raises EOFError
    when the pipe closes. A frame that has all arrived costs one read."""
    while (frame := reader.frame()) is None:
        data = os.read(fd, READ_SIZE)
        if not data:
            raise EOFError("the pipe was closed")
        reader.feed(data)
    return unpack(*frame, devices=devices)


def write_all(fd: int, data: bytes, *, timeout: float | None = None) -> None:
    """Write all of ``data``; with ``timeout``, raise TimeoutError unless it is written within that many seconds.

    A reader that stops reading (its pipe shrunk to one page, say) then costs
    the writer ``timeout`` seconds, never a blocked process.
    """
    view = memoryview(data)
    if timeout is None:
        while view:
            view = view[os.write(fd, view):]
        return
    deadline = time.monotonic() + timeout
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    try:
        while view:
            left = deadline - time.monotonic()
            if left <= 0 or not poll.poll(left * 1000):
                raise TimeoutError(f"the reader took in {len(data) - len(view)} of {len(data)} bytes in {timeout:g} s")
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
    finally:
        os.set_blocking(fd, blocking)


class FrameReader:
    """Incremental frame parser, fed by reads: the trusted side's non-blocking ones, and the
    worker's blocking ones (:func:`read_frame`)."""

    def __init__(self):
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        """Buffer ``data``; raises ProtocolError at once for a frame over the limits, or a flood.

        Every frame prefix in the buffer is checked here, so that ``frame``
        never meets a bad one.
        """
        if len(self.buffer) + len(data) > MAX_BUFFERED:
            raise ProtocolError(f"the worker sent more than {MAX_BUFFERED} bytes of frames at once")
        self.buffer += data
        at = 0
        while len(self.buffer) - at >= _PREFIX.size:
            n_head, n_blob = _sizes(self.buffer, at)
            at += _PREFIX.size + n_head + n_blob

    def frame_ready(self) -> bool:
        if len(self.buffer) < _PREFIX.size:
            return False
        n_head, n_blob = _sizes(self.buffer)
        return len(self.buffer) >= _PREFIX.size + n_head + n_blob

    def frame(self) -> tuple[bytes, bytearray] | None:
        """The next complete frame's (header, blob), if one has arrived."""
        if not self.frame_ready():
            return None
        n_head, n_blob = _sizes(self.buffer)
        end = _PREFIX.size + n_head + n_blob
        head = bytes(self.buffer[_PREFIX.size:_PREFIX.size + n_head])
        blob = self.buffer[_PREFIX.size + n_head:end]
        del self.buffer[:end]
        return head, blob


# -- calls and results ----------------------------------------------------------
# A call or result travels as the frame's values, one per field. A field at its
# default is left out, and the receiving side's dataclass fills it in: in a full
# grade a call sets 3.6 of its 13 fields on average, a result 1.2 of its 8.


def _defaults(cls) -> dict:
    """The default of each field of dataclass ``cls`` that has one."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _at_default(value, default) -> bool:
    """Whether ``value`` is ``default`` (the defaults are None, bools, "cpu" and empty containers,
    so no tensor is ever compared)."""
    if value is default:
        return True
    if type(value) is not type(default):
        return False
    return value == default if type(value) is str else type(value) in (tuple, dict, list) and not value and not default


def _set_fields(obj, defaults: dict) -> dict:
    """``obj``'s fields that are not at their defaults."""
    out = {}
    for name in obj.__dataclass_fields__:
        value = getattr(obj, name)
        if name not in defaults or not _at_default(value, defaults[name]):
            out[name] = value
    return out


_CALL_DEFAULTS, _RESULT_DEFAULTS = _defaults(Call), _defaults(Result)
_MUTATED, _MAX_INPUTS = re.compile(r"input [1-9][0-9]{0,3}"), 1000
_CALL_FIELDS, _RESULT_FIELDS = frozenset(Call.__dataclass_fields__), frozenset(Result.__dataclass_fields__)


def call_values(call: Call) -> dict:
    return _set_fields(call, _CALL_DEFAULTS)


def call_from(values: dict) -> Call:
    if not values.keys() <= _CALL_FIELDS:
        raise ProtocolError("a call has unknown fields")
    return Call(**values)


def result_values(result: Result) -> dict:
    return _set_fields(result, _RESULT_DEFAULTS)


def result_from(values: dict) -> Result:
    """A :class:`Result` from a worker's reply, its fields checked for type."""
    if "output" not in values or not values.keys() <= _RESULT_FIELDS:
        raise ProtocolError("a result does not have the expected fields")
    r = Result(**values)
    if type(r.arg_grads) is not tuple or type(r.kwarg_grads) is not dict or type(r.param_grads) is not dict:
        raise ProtocolError("malformed gradients in a result")
    if not (r.state is None or type(r.state) is dict) or not (r.buffers is None or type(r.buffers) is dict):
        raise ProtocolError("malformed state in a result")
    # Only the engine's own wording ("input 3") may reach a report: the worker chooses these strings.
    if type(r.mutated) is not list or len(r.mutated) > _MAX_INPUTS or not all(
            type(m) is str and _MUTATED.fullmatch(m) for m in r.mutated):
        raise ProtocolError("malformed list of modified inputs")
    if not (r.largest is None or type(r.largest) is int):
        raise ProtocolError("malformed tensor size in a result")
    return r


def error_header(error: StudentError) -> dict:
    return {"kind": str(error.kind), "message": str(error.message), "where": str(error.where)}


_CAP_ONLY = Redactor(())


def error_from(header: dict, redactor: Redactor | None = None) -> StudentError:
    """The worker's error report, cut to size and, given ``redactor``, without any stand-in text."""
    fields = [header.get(k) for k in ("kind", "message", "where")]
    if not all(type(f) is str for f in fields):
        raise ProtocolError("malformed error report")
    clean = (redactor or _CAP_ONLY).clean
    kind, message, where = cast("list[str]", fields)  # (each checked above)
    return StudentError(clean(kind, 100), clean(message, MESSAGE_LIMIT), clean(where, 200))
