"""Every number a lesson quotes from a demo is the demo's own output.

A lesson writes such a number as ``{{ demo.key }}``; the lessons fill it in from
``course/lessons/measured.json``, which ``python course/make_plots.py OUT --record`` writes from
each demo's ``quotes(result)`` (the reference at full size) and, for times on a machine, from the
range of its ``timings(result)`` over several runs. Here every placeholder must resolve, both
languages must quote the same numbers, and each demo, run again at full size, must give exactly
the numbers the record holds (times: the same keys, and a range that is the record's own runs).
The reruns take the full size of every demo: about three minutes on one core, two of them the
two demos that train a model (seq2seq, capstone), which ``make test-full`` reruns (a trained
accuracy is also the number likeliest to move on another CPU); ``make test`` reruns the others.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autograder.authoring.lesson import languages  # noqa: E402
from course import lessons, make_plots  # noqa: E402
from course.demos import DEMOS, run_demo  # noqa: E402

UNITS = list(lessons.lesson_course().units)
RECORD = json.loads(lessons.MEASURED.read_text(encoding="utf-8"))
TRAINED = {"seq2seq", "capstone"}  # minutes at full size: rerun by `make test-full`
FULL = os.environ.get("AUTOGRADER_TEST_FULL") == "1"


def placeholders(unit: str, lang: str) -> list[tuple[str, str]]:
    source = lessons.lesson_path(unit, lang).read_text(encoding="utf-8")
    return [(m["demo"], m["key"]) for m in lessons.QUOTE.finditer(source)]


def test_the_record_is_the_reference_at_full_size():
    assert RECORD["size"] == "full" and RECORD["source"] == "solutions" and RECORD["runs"] >= 3
    assert set(RECORD["quotes"]) == set(DEMOS), "the record should hold every demo (make_plots.py --record)"


@pytest.mark.parametrize("unit", UNITS)
def test_every_quoted_number_is_in_the_record(unit):
    """Every ``{{ demo.key }}`` of every language names a number the record holds, of a demo
    of the lesson's own unit or an earlier one, and every language quotes the same ones."""
    quoted = {}
    for lang in languages(lessons.lesson_course()):
        found = placeholders(unit, lang)
        for demo, key in found:
            assert demo in DEMOS, f"{lang}/{unit}.md quotes {{{{ {demo}.{key} }}}}: no demo {demo!r}"
            assert UNITS.index(DEMOS[demo].UNIT) <= UNITS.index(unit), f"{lang}/{unit}.md quotes a later unit's demo"
            assert key in RECORD["quotes"][demo], f"{lang}/{unit}.md: measured.json has no {demo}.{key}"
        quoted[lang] = sorted(set(found))
    assert all(q == quoted["en"] for q in quoted.values()), f"{unit}: the languages quote different numbers: {quoted}"


@pytest.mark.parametrize("unit", UNITS)
def test_the_rendered_lessons_hold_no_placeholder(unit):
    for lang in languages(lessons.lesson_course()):
        for kind, text in lessons.parse(lessons.lesson_path(unit, lang).read_text(encoding="utf-8")):
            assert kind != "markdown" or "{{" not in text, f"{lang}/{unit}: a placeholder was left: {text[:200]}"


def test_an_unknown_quote_is_refused_by_name():
    with pytest.raises(ValueError, match=r"no 'nothing' for seq2seq"):
        lessons.fill("{{ seq2seq.nothing }}")
    with pytest.raises(ValueError, match=r"no demo 'nodemo'"):
        lessons.fill("{{ nodemo.x }}")


def test_a_quoted_range_is_the_runs_range():
    assert make_plots.quoted_range([5.14, 6.8, 5.9], "{:.1f}") == "5.1–6.8"
    assert make_plots.quoted_range([0.31, 0.33], "{:.1f}") == "0.3"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.skipif(
    n in TRAINED and not FULL, reason="trains a model for minutes: AUTOGRADER_TEST_FULL=1 (make test-full) reruns it"))
    for n in DEMOS])
def test_a_demo_gives_the_numbers_the_lessons_quote(name, tmp_path):
    """The demo at full size, from the reference: its quotes are the record's, to the digit; its
    timings have the record's keys, each quoted as the range of the record's runs."""
    result = json.loads(json.dumps(run_demo(name, tmp_path, size="full"), default=str))
    module = DEMOS[name]
    timed = RECORD["timed"].get(name, {})
    quoted = {k: v for k, v in RECORD["quotes"][name].items() if k not in timed}
    assert module.quotes(result) == quoted, f"{name}: rerun the record (make_plots.py --record)"
    if hasattr(module, "timings"):
        assert set(module.timings(result)) == set(timed)
        for key, entry in timed.items():
            assert len(entry["values"]) == RECORD["runs"]
            assert RECORD["quotes"][name][key] == make_plots.quoted_range(entry["values"], entry["format"])
    else:
        assert not timed
