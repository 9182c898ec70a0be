"""Reference answers remembered across submissions: the same inputs get the same answer.

Derandomized hypothesis draws the same examples for every submission of a grading
run, so a suite's reference functions (oracles) are asked the same questions once
per submission: a class, a mutant catalogue or a batch chunk recomputed each answer
up to 40 times. :func:`remembered` keeps each answer, keyed by a digest of the
arguments' values, for the life of the grading process.

It never changes an answer: what it cannot key exactly (an argument of another
type, a tensor that requires grad, a non-CPU tensor) or return safely (anything but
tensors, numbers, strings and containers of them) is computed every time. A
remembered tensor is handed out as a fresh copy, so a caller that modifies its
answer cannot change the next one.
"""
from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict

import torch

MAX_BYTES = 256 << 20  # the answers kept, in all; the least recently used go first
MAX_ARGUMENT_BYTES = 8 << 20  # larger arguments cost more to digest than most answers take to compute

PLAIN = (bool, int, float, complex, str, bytes, torch.dtype)  # keyed by type and repr, returned as they are

_answers: OrderedDict[tuple, object] = OrderedDict()
_held = [0]


class _Unkeyable(Exception):
    pass


def _feed(digest, value, budget: list[int]) -> None:
    if isinstance(value, torch.Tensor):
        if value.requires_grad or value.device.type != "cpu" or value.is_sparse or type(value) is not torch.Tensor:
            raise _Unkeyable
        budget[0] -= value.numel() * value.element_size()
        if budget[0] < 0:
            raise _Unkeyable
        digest.update(f"T{value.dtype}{tuple(value.shape)}".encode())
        digest.update(value.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, (tuple, list)):
        digest.update(f"{type(value).__name__}{len(value)}(".encode())
        for item in value:
            _feed(digest, item, budget)
        digest.update(b")")
    elif isinstance(value, dict):
        digest.update(f"D{len(value)}(".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key, budget)
            _feed(digest, value[key], budget)
        digest.update(b")")
    elif value is None or isinstance(value, PLAIN):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
    else:
        raise _Unkeyable


def _copy(value):
    """A copy that shares nothing mutable with ``value``; raises _Unkeyable for other types."""
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor or value.requires_grad:
            raise _Unkeyable
        return value.clone()
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_copy(v) for v in value)
    if isinstance(value, list) and type(value) is list:
        return [_copy(v) for v in value]
    if isinstance(value, dict) and type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if value is None or isinstance(value, PLAIN):
        return value
    raise _Unkeyable


def _size(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_size(v) for v in value)
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values())
    return 0


def keep_at_most(max_bytes: int) -> None:
    """Keep ``max_bytes`` of answers in all from now on (0: none). A process that grades one
    submission asks each question once, so it keeps none: on Gradescope the answers held
    were most of the grader's growth (150 MiB of a flash-attention unit's 4096-token reference)."""
    global MAX_BYTES
    MAX_BYTES = max_bytes
    _evict()


def _evict() -> None:
    """Drop the least recently used answers until those kept fit ``MAX_BYTES``."""
    while _held[0] > MAX_BYTES and _answers:
        _, dropped = _answers.popitem(last=False)
        _held[0] -= _size(dropped)


def remembered(function):
    """Decorate a pure reference function: the same argument values give the answer already computed."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if MAX_BYTES <= 0:
            return function(*args, **kwargs)
        digest = hashlib.blake2b(digest_size=20)
        try:
            _feed(digest, (args, kwargs), [MAX_ARGUMENT_BYTES])
        except Exception:  # noqa: BLE001 - _Unkeyable, or a tensor kind that cannot be read as bytes: compute
            return function(*args, **kwargs)
        key = (wrapper, torch.is_grad_enabled(), torch.get_default_dtype(), digest.digest())
        if key in _answers:
            _answers.move_to_end(key)
            return _copy(_answers[key])
        answer = function(*args, **kwargs)
        try:
            kept = _copy(answer)
        except _Unkeyable:
            return answer
        _answers[key] = kept
        _held[0] += _size(kept)
        _evict()
        return answer

    return wrapper
