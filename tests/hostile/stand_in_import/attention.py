"""Hostile: no work at all; put the grader's own stand-ins folder on sys.path and
re-export its version of this unit (no construct the static scan refuses)."""
import glob
import os
import sys

PLACES = ["", "/sandbox/lib", "/sandbox/unit", "/sandbox/units/*", "/tmp/autograder-sandbox-*/lib", "/tmp/autograder-sandbox-*/units/*"]


def _stand_ins(unit):
    for base in [*sys.path, os.getcwd(), *PLACES]:
        for path in glob.glob(os.path.join(base, "course", "stand_ins", f"{unit}.py")):
            return os.path.dirname(path)
    return None


_folder = _stand_ins("attention")
if _folder:
    sys.path.insert(0, _folder)
    from attention import causal_mask, scaled_dot_product_attention, softmax  # noqa: F401 - the stand-in's
