"""Hostile: the same trick on multi_head: re-export the grader's stand-in."""
import glob
import os
import sys

for _base in [*sys.path, os.getcwd(), "", "/sandbox/lib", "/sandbox/unit", "/sandbox/units/*", "/tmp/autograder-sandbox-*/lib",
              "/tmp/autograder-sandbox-*/units/*"]:
    _paths = glob.glob(os.path.join(_base, "course", "stand_ins", "multi_head.py"))
    if _paths:
        sys.path.insert(0, os.path.dirname(_paths[0]))
        from multi_head import MultiHeadAttention, merge_heads, split_heads  # noqa: F401 - the stand-in's
        break
