"""A class on a cluster (issue 59): ``grade-batch --scheduler`` grades one task per student on a
real Dask distributed cluster (a LocalCluster of two worker processes, started here) and writes
the gradebook ``-j 1`` writes, byte for byte."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import ROOT, attn_course
import mutants

distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed")

UNIT = "attention"


def a_class(subs: Path) -> None:
    """An honest student, a blank one (the released stubs) and one with a mutant of the unit."""
    shutil.copytree(ROOT / "solutions", subs / "alice")
    shutil.copytree(ROOT / "assignments", subs / "bob", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    mutants.write("attention.py", mutants.load(UNIT)[0], subs / "carol")


def batch(subs: Path, out: Path, *extra: str):
    return attn_course("grade-batch", str(subs), "-o", str(out), "--unit", UNIT, "--no-progress", *extra)


def test_cluster_gradebook_is_the_local_one(tmp_path):
    subs = tmp_path / "subs"
    a_class(subs)
    batch(subs, tmp_path / "local", "-j", "1")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        proc = batch(subs, tmp_path / "cluster", "--scheduler", cluster.scheduler_address)
    local = (tmp_path / "local" / "gradebook.csv").read_bytes()
    assert (tmp_path / "cluster" / "gradebook.csv").read_bytes() == local, proc.stderr
    rows = local.decode().splitlines()
    assert len(rows) == 5  # header, Points Possible, three students
    for name in ("alice", "bob", "carol"):
        assert (tmp_path / "cluster" / "students" / f"{name}.md").read_text(encoding="utf-8") == \
            (tmp_path / "local" / "students" / f"{name}.md").read_text(encoding="utf-8")
