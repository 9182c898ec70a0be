"""Call values as JSON: the one codec of their structure, for the cases students read
(:mod:`autograder.core.cases`) and the sandbox's wire (:mod:`autograder.sandbox.inside.transport`).

A value is plain JSON (None, a bool, a number, a string), a list (an array), or an object
named by its :class:`Tag`: ``{"tuple": [...]}``, ``{"dict": {...}}``, ``{"dtype": "float32"}``,
``{"device": "cpu"}``, ``{"size": [2, 3]}``, an object recipe ``{"new": target, "args":
{"tuple": [...]}, "kwargs": {"dict": {...}}, "state": {"dict": {...}}}`` (no state, no field),
or a tensor ``{"tensor": ..., "dtype": ...}``. A tensor is the one leaf each user plugs in
(:meth:`Encoder.tensor`, :meth:`Decoder.tensor`): its numbers in a case, where its bytes lie in
the frame's blob on the wire.

The two users differ in one more thing, :attr:`Encoder.exact`. The wire gives back exactly what
was sent: a ``torch.Size`` stays a size, a dict whose keys are not all strings travels as
``{"dict": [[key, value], ...]}``, and a value of any other type (a subclass too, but
``nn.Parameter``) cannot be sent. A case is written for a reader: a size is a tuple, a dict's
keys are strings, and other objects are kept as they are (subclasses as their base).

Decoding is strict on both sides (a case is checked against its schema first, a worker's frame
only here): each tag's fields and their types are checked, anything else is refused with the
decoder's :attr:`Decoder.error`, and nesting is bounded by :attr:`Decoder.max_depth`.
"""
from __future__ import annotations

import sys
from enum import StrEnum

import torch

from autograder.core.protocol import New


class Tag(StrEnum):
    """The field that names a tagged value."""

    TENSOR = "tensor"  # the rest of its fields are the leaf's
    NEW = "new"  # with args, kwargs and state
    TUPLE = "tuple"
    DICT = "dict"
    DTYPE = "dtype"
    DEVICE = "device"
    SIZE = "size"  # exact only (a case writes a size as a tuple)


# The tags as plain strings, for the coders' loops (a grade sends about 4,600 calls).
_TENSOR, _NEW, _TUPLE, _DICT, _DTYPE, _DEVICE, _SIZE = (t.value for t in Tag)
_TAGS = frozenset(t.value for t in Tag)
NEW_FIELDS = frozenset((_NEW, "args", "kwargs", "state"))
_PLAIN = frozenset((type(None), bool, int, float, str))
_PARAMETER = torch.nn.Parameter


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


class Encoder:
    """Values to JSON; a user subclasses it with its :meth:`tensor`. The common cases (plain
    values, exact types) come first."""

    exact = True  # see the module's docstring
    max_depth = sys.maxsize  # containers within containers: deeper raises TypeError

    def tensor(self, t: torch.Tensor) -> dict:
        raise NotImplementedError

    def value(self, x, depth: int = 0):
        kind = type(x)
        if kind in _PLAIN:
            return x
        if kind is torch.Tensor or kind is _PARAMETER:
            return self.tensor(x)
        if kind is tuple or kind is list or kind is dict:
            return self._container(x, kind, depth)
        if kind is torch.dtype:
            return {_DTYPE: dtype_name(x)}
        if kind is torch.device:
            return {_DEVICE: str(x)}
        if kind is New:
            return self._new(x, depth)
        return self._other(x, depth)

    def _container(self, x, kind, depth: int):
        if depth >= self.max_depth and x:  # its items would lie deeper than the limit
            raise TypeError("value nested too deeply to send")
        depth += 1
        if kind is list:
            return [v if type(v) in _PLAIN else self.value(v, depth) for v in x]
        if kind is tuple:
            return {_TUPLE: [v if type(v) in _PLAIN else self.value(v, depth) for v in x]}
        if not self.exact:
            return {_DICT: {str(k): v if type(v) in _PLAIN else self.value(v, depth) for k, v in x.items()}}
        for k in x:
            if type(k) is not str:  # keys that JSON's object would turn into strings: as pairs
                return {_DICT: [[k if type(k) in _PLAIN else self.value(k, depth), v if type(v) in _PLAIN
                                 else self.value(v, depth)] for k, v in x.items()]}
        return {_DICT: {k: v if type(v) in _PLAIN else self.value(v, depth) for k, v in x.items()}}

    def _new(self, x: New, depth: int) -> dict:
        if depth >= self.max_depth:
            raise TypeError("value nested too deeply to send")
        depth += 1
        out = {_NEW: x.target, "args": self.value(x.args, depth), "kwargs": self.value(x.kwargs, depth)}
        if x.state is not None:
            out["state"] = self.value(x.state, depth)
        return out

    def _other(self, x, depth: int):
        """A value of no type above: a size, a subclass, anything else."""
        kind = type(x)
        if self.exact:
            if kind is torch.Size:
                return {_SIZE: [int(n) for n in x]}
            if isinstance(x, torch.Tensor):
                raise TypeError(f"a tensor subclass ({kind.__name__}) cannot be sent")
            raise TypeError(f"a {kind.__name__} cannot be sent")
        if isinstance(x, torch.Tensor):
            return self.tensor(x)
        if isinstance(x, New):
            return self._new(x, depth)
        if isinstance(x, torch.dtype):
            return {_DTYPE: dtype_name(x)}
        if isinstance(x, torch.device):
            return {_DEVICE: str(x)}
        for base in (tuple, list, dict):
            if isinstance(x, base):
                return self._container(x, base, depth)
        return x


class Decoder:
    """JSON to values, checked; a user subclasses it with its :meth:`tensor`, :attr:`dtypes` and
    :meth:`device`."""

    exact = True  # accepts sizes and dicts as pairs (what an exact Encoder writes)
    max_depth = sys.maxsize
    error: type[Exception] = ValueError  # what anything malformed raises
    dtypes: dict[str, torch.dtype] = {}  # the dtypes a value may name

    def tensor(self, x: dict) -> torch.Tensor:
        raise NotImplementedError

    def device(self, name) -> torch.device:
        raise NotImplementedError

    def dtype(self, name) -> torch.dtype:
        if type(name) is not str or name not in self.dtypes:
            raise self.error(f"unknown dtype {str(name)[:40]!r}")
        return self.dtypes[name]

    def value(self, x, depth: int = 0):
        kind = type(x)
        if kind in _PLAIN:
            return x
        if depth > self.max_depth:
            raise self.error("value nested too deeply")
        if kind is list:
            depth += 1
            return [v if type(v) in _PLAIN else self.value(v, depth) for v in x]
        if kind is not dict:
            raise self.error(f"untagged {kind.__name__} in a message")
        if _TENSOR in x:
            return self.tensor(x)
        depth += 1
        if _NEW in x:
            return self._new(x, depth)
        if len(x) != 1:
            tags = [k for k in x if k in _TAGS]
            raise self.error(f"unexpected fields in a {tags[0]}" if tags else "untagged dict in a message")
        ((tag, v),) = x.items()
        if tag == _TUPLE:
            return tuple([item if type(item) in _PLAIN else self.value(item, depth) for item in self._list(v)])
        if tag == _DICT:
            return self._dict(v, depth)
        if tag == _DTYPE:
            return self.dtype(v)
        if tag == _DEVICE:
            return self.device(v)
        if tag == _SIZE and self.exact:
            if type(v) is not list or len(v) > 64 or not all(type(n) is int and 0 <= n < 2**62 for n in v):
                raise self.error("malformed size")
            return torch.Size(v)
        raise self.error(f"unknown tag {tag[:40]!r}")

    def _list(self, v) -> list:
        if type(v) is not list:
            raise self.error("malformed sequence")
        return v

    def _dict(self, v, depth: int) -> dict:
        if type(v) is dict:  # string keys
            return {k: item if type(item) in _PLAIN else self.value(item, depth) for k, item in v.items()}
        if type(v) is not list or not self.exact:
            raise self.error("malformed dict")
        out = {}
        for pair in v:
            if type(pair) is not list or len(pair) != 2:
                raise self.error("malformed dict entry")
            key, item = pair
            if type(key) not in _PLAIN:
                key = self.value(key, depth)
                if type(key) not in _PLAIN:
                    raise self.error("a dict key must be a string or a number")
            out[key] = item if type(item) in _PLAIN else self.value(item, depth)
        return out

    def _new(self, x: dict, depth: int) -> New:
        if not x.keys() <= NEW_FIELDS:
            raise self.error("unexpected fields in a new")
        target = x[_NEW]
        if type(target) is not str:
            raise self.error("malformed object recipe")
        args, kwargs, state = (self.value(x.get(k), depth) for k in ("args", "kwargs", "state"))
        if type(args) is not tuple or type(kwargs) is not dict or not (state is None or type(state) is dict):
            raise self.error("malformed object recipe")
        return New(target, args, kwargs, state)
