"""Rebuild the attention viewer's weights (``weights/pronoun_model.safetensors``).

    python -m course.demos.train_pronoun_model [--out FILE] [--steps N] [--source solutions|FOLDER]

Trains the pronoun model of ``pronoun_model.py`` from its fixed seed with one torch
thread, so the same torch rebuilds the same weights on the same kind of CPU (on another,
MKL's and ATen's vector paths round differently, and 1000 steps move the weights:
``tests/project/test_viz.py`` checks that a rebuild answers as the shipped file does), and
prints the time it took, the accuracies on fresh sentences and the size of the file.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from course.demos import load_units  # noqa: E402
from course.demos.pronoun_model import STEPS, WEIGHTS, save_weights, train_pronoun_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--source", default="solutions", help="where MultiHeadAttention comes from")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    trained = train_pronoun_model(load_units(args.source), steps=args.steps)
    seconds = time.perf_counter() - start
    path = save_weights(trained, args.out)
    print(f"trained {trained.steps} steps in {seconds:.1f} s: antecedent named {trained.accuracy:.1%}, "
          f"most attended {trained.attention_accuracy:.1%} of fresh pronouns; "
          f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
