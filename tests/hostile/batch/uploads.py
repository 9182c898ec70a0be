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


def make_decode_crash(root: Path, subs: Path) -> str:
    """The upload of uploads.toml: a patch of the corpus's transport_shape_overflow (tests/project/hostile_cases.py)."""
    import hostile_cases  # tests/project/, on the path of the tests that build these uploads

    entry = hostile_cases.load(Path(__file__).with_name("uploads.toml"), "upload")["decode_crash"]
    file, source = hostile_cases.patched(entry)
    (subs / "decode_crash").mkdir()
    (subs / "decode_crash" / file).write_text(source, encoding="utf-8")
    return "decode_crash"


def _folder_and_zip(root: Path, subs: Path, name: str, zipped: str) -> tuple[str, str]:
    """``name/`` holding the reference attention, and ``name.zip`` whose attention.py is ``zipped``."""
    (subs / name).mkdir()
    (subs / name / "attention.py").write_text(_attention(root), encoding="utf-8")
    with zipfile.ZipFile(subs / f"{name}.zip", "w") as zf:
        zf.writestr("attention.py", zipped)
    return name, f"{name}.zip"


def make_clash(root: Path, subs: Path) -> tuple[str, str]:
    return _folder_and_zip(root, subs, "zed", "raise SystemExit('the other zed')\n")


def make_over_alice(root: Path, subs: Path) -> tuple[str, str]:
    return _folder_and_zip(root, subs, "alice", "def softmax(x, dim=-1):\n    return x\n")


def make_report_json(root: Path, subs: Path) -> str:
    with zipfile.ZipFile(subs / "report.json.zip", "w") as zf:
        zf.writestr("attention.py", _attention(root))
    return "report.json"
