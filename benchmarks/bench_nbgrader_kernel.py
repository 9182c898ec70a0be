"""Seconds to execute a unit's notebook in nbgrader's kernel, sandboxed against plain.

Both kernel managers run the same source notebook (its locked cells, its public
tests and the hidden-test cell, which finds no submission there and only prints) in one
run, alternating, and the medians are compared, so the ratio holds on a noisy
machine. The sandbox must cost at most 1.5x (issue 15).

    .venv/bin/python benchmarks/bench_nbgrader_kernel.py [unit] [repeats]
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

from autograder.core.manifest import load_course
from autograder.nbgrader.kernel_manager import SandboxedKernelManager


def run(nb_path: Path, manager, workdir: Path, demo_tag: str) -> float:
    nb = nbformat.read(str(nb_path), as_version=4)
    nb.cells = [c for c in nb.cells if demo_tag not in c.metadata.get("tags", [])]
    started = time.perf_counter()
    NotebookClient(nb, timeout=120, kernel_name="python3", kernel_manager_class=manager,
                   resources={"metadata": {"path": str(workdir)}}).execute()
    return time.perf_counter() - started


def main() -> None:
    unit = sys.argv[1] if len(sys.argv) > 1 else "attention"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    course = load_course()
    nb_path = course.nbgrader_source / unit / f"{unit}.ipynb"
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp) / unit  # nbgrader runs a notebook in a folder named after its assignment
        workdir.mkdir()
        times = {"plain": [], "sandboxed": []}
        for _ in range(repeats):
            times["plain"].append(run(nb_path, AsyncKernelManager, workdir, course.brand.demo_tag))
            times["sandboxed"].append(run(nb_path, SandboxedKernelManager, workdir, course.brand.demo_tag))
    plain, boxed = (statistics.median(times[k]) for k in ("plain", "sandboxed"))
    print(f"{unit} notebook, median of {repeats}: plain kernel {plain:.2f} s, sandboxed kernel {boxed:.2f} s, "
          f"ratio {boxed / plain:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
