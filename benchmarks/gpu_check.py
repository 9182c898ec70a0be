"""CUDA parity in one command (``make gpu-check``): the reference and two device mutants.

Grades ``solutions/`` and two mutants that build a tensor on the CPU
(``attention.causal_mask_on_cpu``, ``positional_encoding.table_built_on_cpu``),
in-process (the sandbox shows workers no GPU device), and prints one row per
unit and submission with each CUDA parity property's status. Exits 0 only if
the reference passes every parity property and each mutant fails its own
unit's; without CUDA it says so and exits 0 (the properties skip, worth 0).

    .venv/bin/python benchmarks/gpu_check.py
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from autograder.grading.grade import grade
from autograder.core.manifest import load_course

MUTANTS = {"attention": "causal_mask_on_cpu", "positional_encoding": "table_built_on_cpu"}
PARITY = "cuda"  # the parity properties' names say "cuda" (test_cpu_and_cuda_agree)


def write_mutant(course, unit: str, name: str, dest: Path) -> Path:
    """A copy of the solutions with ``unit`` mutated as tests/mutants/<unit>.toml says."""
    spec = next(m for m in tomllib.loads((course.root / "tests" / "mutants" / f"{unit}.toml").read_text())["mutant"]
                if m["name"] == name)
    shutil.copytree(course.solutions, dest)
    path = dest / course.units[unit].file
    source = path.read_text(encoding="utf-8")
    for find, replace in spec["replace"]:
        assert source.count(find) == 1, f"mutant {name} no longer applies"
        source = source.replace(find, replace)
    path.write_text(source, encoding="utf-8")
    return dest


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu-check: CUDA is not available on this machine; the parity properties skip (0 points). "
              "Nothing was checked.")
        return 0
    course = load_course()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        folders = {"reference": course.solutions}
        folders |= {f"{u}.{m}": write_mutant(course, u, m, Path(tmp) / m) for u, m in MUTANTS.items()}
        results = dict(zip(folders, grade(course, list(folders.values()), sandbox=False)))
    table = Table(title=f"CUDA parity on {torch.cuda.get_device_name(0)} ({time.monotonic() - started:.0f} s)")
    for column in ("submission", "unit", "parity property", "status", "reason"):
        table.add_column(column)
    ok = True
    for name, result in results.items():
        for unit, unit_result in result.units.items():
            for test in unit_result.tests:
                if PARITY not in test.id.lower():
                    continue
                expected = "failed" if name.startswith(unit + ".") else "passed"  # a mutant fails its own unit only
                ok &= test.status == expected
                table.add_row(name, unit, test.name, test.status, test.output[:80])
    ok &= any(PARITY in t.id.lower() for u in results["reference"].units.values() for t in u.tests)
    Console().print(table)
    print("gpu-check: parity holds" if ok else "gpu-check: parity FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
