"""Hostile uploads for a class batch (issue 15), built at test time.

Each ``make_<case>(root, subs)`` writes one student's upload into the class
folder ``subs`` and returns the name it is graded under. None of them may stop
or poison the batch: ``tests/project/test_batch_hostile.py`` asserts that every
honest classmate is graded beside them.

| case | attack |
|---|---|
| ``deep_zip`` | a small zip with one member 1,100 folders deep (was a RecursionError that killed the batch) |
| ``deep_folder`` | a folder 1,100 levels deep |
| ``sparse_file`` | a 20 GiB sparse file, 0 bytes on disk (was a MemoryError: the digest read every file whole) |
| ``slow`` | correct answers, each after 0.9 s: the chunk outruns its wall-clock budget and is killed |
| ``decode_crash`` | a worker reply whose tensor header declares an overflowing shape |
| ``clash_zip`` / ``clash_folder`` | ``zed/`` and ``zed.zip``: two uploads, one name |
| ``over_alice`` | ``alice.zip`` beside ``alice/``: was unpacked over alice's folder |
| ``report_json`` | ``report.json.zip``: was the chunk's own report file |
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

DEPTH = 1100


def _attention(root: Path) -> str:
    return (root / "solutions" / "attention.py").read_text(encoding="utf-8")


def make_deep_zip(root: Path, subs: Path) -> str:
    member = "/".join(["d"] * DEPTH) + "/attention.py"
    with zipfile.ZipFile(subs / "deep_zip.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, "x = 1\n")
    return "deep_zip"


def make_deep_folder(root: Path, subs: Path) -> str:
    fd = os.open(subs, os.O_RDONLY)
    os.mkdir("deep_folder", dir_fd=fd)
    for _ in range(DEPTH):  # relative to an fd: no path ever exceeds PATH_MAX
        next_fd = os.open("deep_folder" if _ == 0 else "d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = next_fd
        os.mkdir("d", dir_fd=fd)
    os.close(fd)
    return "deep_folder"


def make_sparse_file(root: Path, subs: Path) -> str:
    folder = subs / "sparse_file"
    folder.mkdir()
    (folder / "attention.py").write_text(_attention(root), encoding="utf-8")
    with open(folder / "weights.bin", "wb") as handle:
        handle.truncate(20 << 30)
    return "sparse_file"




# Busy, not asleep: the unit's builtins admit no `time` (about 0.5 s a call on the course machine).
SLOW = """

_correct = scaled_dot_product_attention


def scaled_dot_product_attention(*args, **kwargs):
    for _ in range(15_000_000):
        pass
    return _correct(*args, **kwargs)
"""


def make_slow(root: Path, subs: Path) -> str:
    (subs / "slow").mkdir()
    (subs / "slow" / "attention.py").write_text(_attention(root) + SLOW, encoding="utf-8")
    return "slow"


DECODE_CRASH = '''
"""Writes a reply frame whose meta tensor declares a shape that overflows, on every descriptor."""
import json, os, struct

def _forge():
    tensor = {"tensor": None, "dtype": "float32", "shape": [2**39] * 4, "device": "meta"}
    head = json.dumps({"op": "result", "ok": True, "values": {"output": tensor}}).encode()
    frame = struct.pack(">4sIQ", b"ATN1", len(head), 0) + head
    for fd in range(3, 64):
        try:
            os.write(fd, frame)
        except OSError:
            pass

def softmax(x, dim=-1):
    _forge()
    return x

def causal_mask(query_len, key_len=None, *, device=None):
    _forge()
    return None

def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    _forge()
    return query, None
'''


def make_decode_crash(root: Path, subs: Path) -> str:
    (subs / "decode_crash").mkdir()
    (subs / "decode_crash" / "attention.py").write_text(DECODE_CRASH, encoding="utf-8")
    return "decode_crash"


def make_clash(root: Path, subs: Path) -> tuple[str, str]:
    (subs / "zed").mkdir()
    (subs / "zed" / "attention.py").write_text(_attention(root), encoding="utf-8")
    with zipfile.ZipFile(subs / "zed.zip", "w") as zf:
        zf.writestr("attention.py", "raise SystemExit('the other zed')\n")
    return "zed", "zed.zip"


def make_over_alice(root: Path, subs: Path) -> tuple[str, str]:
    (subs / "alice").mkdir()
    (subs / "alice" / "attention.py").write_text(_attention(root), encoding="utf-8")
    with zipfile.ZipFile(subs / "alice.zip", "w") as zf:
        zf.writestr("attention.py", "def softmax(x, dim=-1):\n    return x\n")
    return "alice", "alice.zip"


def make_report_json(root: Path, subs: Path) -> str:
    with zipfile.ZipFile(subs / "report.json.zip", "w") as zf:
        zf.writestr("attention.py", _attention(root))
    return "report.json"
