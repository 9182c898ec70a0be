"""English where a Chinese student should see none: the rule test_zh_everywhere.py reads the command
line's words with, and test_lesson_notebooks.py the outputs and plot labels of the zh bundle's
notebooks.

:func:`english` finds catalogued English (each literal part of a translated msgid that holds two words
of prose or more and that its translation does not keep), an English status mark, or a run of prose.
:data:`RECORD_PLOT_TEXTS` is a cell's code that appends every visible text of every figure saved to a
file, one JSON string a line (a demo's plot, as the notebook draws it).
"""
from __future__ import annotations

import re

from conftest import ROOT
from autograder.authoring import catalogue
from autograder.core import i18n
from autograder.core.manifest import load_course

CJK = re.compile(r"[\u3400-\u9fff]")
# English prose: three words of letters or more in a row, none part of a name, a call, a path or code.
PROSE = re.compile(r"(?<![\w./'\"=\-])[A-Za-z]{2,}(?: [A-Za-z]{2,}){2,}(?![\w(/'\"=\-])")
# What a status line starts with in English (too short to be told by its words alone).
ENGLISH_MARKS = ("passed: ", "warning: ", "Hint: ", "not run yet", "not implemented yet", "counterexample", "FAILED")

RECORD_PLOT_TEXTS = """
import json as _json, matplotlib.figure as _figure, matplotlib.text as _text
_savefig = _figure.Figure.savefig
def _recorded(fig, *args, **kwargs):
    with open({path!r}, "a", encoding="utf-8") as out:
        for t in fig.findobj(_text.Text):
            if t.get_visible() and t.get_text().strip():
                out.write(_json.dumps(t.get_text(), ensure_ascii=False) + "\\n")
    return _savefig(fig, *args, **kwargs)
_figure.Figure.savefig = _recorded
"""


def fragments() -> list[str]:
    """The English the Chinese catalogues translate, longest first."""
    found = set()
    for domain, locale, _messages in catalogue.domains(load_course(ROOT)):
        for message in catalogue.read(i18n.catalogue_path(locale, "zh", domain)):
            if not (message.id and message.string and CJK.search(message.string)):
                continue
            for part in i18n.FIELD.split(message.id)[::4]:
                part = part.strip(" :;,.()")
                if len(catalogue.PROSE_WORD.findall(part)) >= 2 and part not in message.string:
                    found.add(part)
    return sorted(found, key=len, reverse=True)


FRAGMENTS = fragments()


def english(text: str) -> list[str]:
    """The English in ``text``: catalogued English, an English status mark, a run of prose."""
    found = [f for f in FRAGMENTS if f in text] + [m for m in ENGLISH_MARKS if m in text]
    return found + [run for line in text.splitlines() for run in PROSE.findall(line)]
