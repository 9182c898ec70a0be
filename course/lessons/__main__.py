"""python -m course.lessons OUT_DIR [--lang en]: write every lesson as .py (jupytext) and .ipynb."""
import argparse
import sys
from pathlib import Path

from course.lessons import languages, write_all

parser = argparse.ArgumentParser(prog="python -m course.lessons", description=__doc__)
parser.add_argument("out_dir", type=Path)
parser.add_argument("--lang", default="en", choices=languages())
args = parser.parse_args()
for path in write_all(args.out_dir, args.lang):
    print(f"wrote {path}")
sys.exit(0)
