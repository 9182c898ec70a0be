"""The trust suite (issue 42) as data: tests/hostile/trust/attacks.toml, each attack a patch of one
unit's reference solution (the find/replace format of tests/mutants/*.toml, as the removal suite's).

:func:`materialize` (the removal suite's: the same format) writes an attack into a folder of its own
holding only that unit's file, so its siblings are the course's stand-ins when it is graded. To grade
one by hand: ``python tests/project/trust.py DIR`` writes every attack under DIR (``DIR/<name>/``), then
``attn-course grade DIR/<name> --unit <unit> --timeout 3``.
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

if __name__ == "__main__":  # run as a script: the test helpers' imports, as under pytest
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

from conftest import ROOT
from removal import materialize, source

TRUST = ROOT / "tests" / "hostile" / "trust"

__all__ = ["ATTACKS", "BY_NAME", "TRUST", "load", "materialize", "source"]


def load() -> list[dict]:
    return tomllib.loads((TRUST / "attacks.toml").read_text(encoding="utf-8"))["attack"]


ATTACKS = load()
BY_NAME = {a["name"]: a for a in ATTACKS}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/project/trust.py DIR  (writes DIR/<attack>/<unit file> for every attack)")
    for attack in ATTACKS:
        print(materialize(attack, Path(sys.argv[1])))
