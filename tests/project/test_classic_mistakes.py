"""The classic mistakes, told by ``check`` (issue 58).

A bundle student makes nine classic mistakes one at a time (the catalogue entries marked
``classic = true``: the missing 1/sqrt(d_k), a mask's polarity reversed, softmax over the wrong
dim, heads merged without the transpose, RoPE paired the other way, LayerNorm's unbiased variance,
online softmax without the rescale, a KV cache that forgets its offset, LSTM gates in the wrong
order). Each one, played through the bundle's own ``check`` in both languages, gets its hint: the
public tests' advice, in the bundle's language.
"""
from __future__ import annotations

import json
import shutil

import pytest

import mutants
from conftest import ROOT
from student_bundle import COMMAND, LANGS, MANIFEST, run
from hint_texts import written_hints
from autograder.authoring.catalogue import read
from autograder.core import i18n
from autograder.core.manifest import load_course

pytestmark = pytest.mark.xdist_group("bundle")
COURSE = load_course(ROOT)
CLASSIC = [(unit, m) for unit in COURSE.units if (mutants.MUTANTS / f"{unit}.toml").is_file()
           for m in mutants.load(unit) if m.get("classic")]


def advice(unit: str, declared: str) -> str:
    """The public tests' advice text (the English msgid) that ``declared`` is a part of."""
    texts = [t for t in written_hints(ROOT / "tests" / "public" / f"test_{unit}_public.py") if declared in t]
    assert len(texts) == 1, f"{unit}: the public tests write {len(texts)} hints holding {declared!r}, not one"
    return texts[0]


def in_language(lang: str, text: str) -> str:
    """``text`` as the course's catalogue writes it in ``lang`` (the part before a hole, for an f-string)."""
    if lang != "en":
        message = read(i18n.catalogue_path(ROOT / MANIFEST["paths"]["locale"], lang, i18n.COURSE_DOMAIN)).get(text)
        assert message is not None and message.string, f"{text!r} has no {lang} translation"
        text = message.string
    return text.split("…")[0]


def test_there_are_nine_and_each_declares_its_hint():
    assert len(CLASSIC) == 9, [f"{u}/{m['name']}" for u, m in CLASSIC]
    assert all(m.get("hints") for _, m in CLASSIC), [m["name"] for _, m in CLASSIC if not m.get("hints")]


@pytest.mark.parametrize("lang", LANGS)
def test_check_tells_each_classic_mistake(lang, student_bundles):
    bundle = student_bundles[lang]
    silent = []
    for unit, mutant in CLASSIC:
        spec = COURSE.units[unit]
        folder = bundle["top"] / f"classic-{lang}-{mutant['name']}"
        shutil.rmtree(folder, ignore_errors=True)
        mutants.write(spec.file, mutant, folder)
        proc = run(bundle["bin"] / COMMAND, "check", unit, "--path", folder, "--format", "json", "--lang", lang,
                   cwd=bundle["root"], check=False)
        report = json.loads(proc.stdout)["units"][unit]
        outputs = " ".join(t["output"] or "" for t in report["tests"] if t["status"] == "failed")
        wanted = [in_language(lang, advice(unit, d)) for d in mutant["hints"]]
        if report["score"] >= report["max_score"] or not any(w in outputs for w in wanted):
            silent.append(f"{unit}/{mutant['name']} ({report['score']}/{report['max_score']}): wanted {wanted}; "
                          f"got {outputs[:600]!r}")
    assert not silent, "\n".join(silent)
