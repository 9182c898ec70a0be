"""python -m course.lessons OUT_DIR [--lang en]: write every lesson as .py (jupytext) and .ipynb."""
import argparse
import sys
from pathlib import Path

from autograder.authoring.lesson import languages
from course.lessons import lesson_course, write_all

parser = argparse.ArgumentParser(prog="python -m course.lessons", description=__doc__)
parser.add_argument("out_dir", type=Path)
parser.add_argument("--lang", default=lesson_course().language, choices=languages(lesson_course()))
args = parser.parse_args()
for path in write_all(args.out_dir, args.lang):
    print(f"wrote {path}")
sys.exit(0)
