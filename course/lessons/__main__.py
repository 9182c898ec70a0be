"""python -m course.lessons OUT_DIR [--lang LANG]: write every lesson as .py (jupytext) and .ipynb.

LANG defaults to course.toml's language (in a student's bundle, the one it was released in).
"""
import argparse
import sys
from pathlib import Path

from course.lessons import check_language, default_language, languages, write_all

parser = argparse.ArgumentParser(prog="python -m course.lessons", description=__doc__.splitlines()[0])
parser.add_argument("out_dir", type=Path)
parser.add_argument("--lang", help=f"the lessons' language: {', '.join(languages()) or 'none here'} "
                                   f"(default {default_language()})")
args = parser.parse_args()
try:
    lang = check_language(args.lang)
    written = write_all(args.out_dir, lang)
except (ValueError, OSError) as error:  # one line, never a traceback: a language not here, a folder not writable
    print(f"{parser.prog}: {error}", file=sys.stderr)
    sys.exit(2)
for path in written:
    print(f"wrote {path}")
sys.exit(0)
