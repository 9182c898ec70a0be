"""Hostile: copy the attention stand-in (trusted code) into the report, 1,900 characters per error."""
import itertools

from . import attention as _sibling

with open(_sibling.__file__, encoding="utf-8") as _file:
    _SOURCE = _file.read()
_CHUNKS = itertools.cycle(range(0, len(_SOURCE), 1900))


def _leak(*args, **kwargs):
    at = next(_CHUNKS)
    raise ValueError(_SOURCE[at:at + 1900])


split_heads = merge_heads = _leak


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        _leak()
