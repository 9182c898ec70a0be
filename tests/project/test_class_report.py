"""One class report for every path (issue 46, item 3): the same class, graded once, read back
from each path's own results (the grade's JSON, the batch's student files, Gradescope's and
PrairieLearn's results.json) gives the same numbers; the CLI writes the Markdown and the plot."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, attn_course
from autograder.core.manifest import load_course
from autograder.core.results import GradeResult
from autograder.delivery import class_report
from autograder.delivery.formats import markdown_text
from autograder.delivery.gradescope import Gradescope
from autograder.delivery.prairielearn import PrairieLearn

COURSE = load_course(ROOT)
UNIT = "attention"
HINT = "the scale is 1/sqrt(E), not 1/E."


def _result(name: str, failing: dict[str, str]) -> GradeResult:
    """A student whose properties in ``failing`` fail with that output (the others pass)."""
    tests = [{"id": f"t::{p}", "name": p, "score": 0.0 if p in failing else 1.0, "max_score": 1.0,
              "status": "failed" if p in failing else "passed", "output": failing.get(p, "")}
             for p in ("p1", "p2", "p3")]
    return GradeResult.from_dict({"submission": name, "units": {UNIT: {
        "title": "Attention", "status": "graded", "message": "", "tests": tests}}})


CLASS = [
    _result("ann", {}),
    _result("bob", {"p1": f"weights differ. Hint: {HINT} (counterexample: L=1)",
                    "p2": f"output differs. Hint: {HINT}\nreproduce: attn-course repro ..."}),
    _result("cat", {"p1": "weights differ (counterexample: L=2)"}),
]


def _expect(stats: dict) -> None:
    assert (stats["students"], stats["graded"], stats["not_graded"]) == (3, 3, 0)
    assert stats["distribution"]["90-100%"] == 1 and stats["distribution"]["30-40%"] == 1
    assert stats["distribution"]["60-70%"] == 1
    rates = {f["property"].split(": ", 1)[1]: (f["failed"], f["ran"]) for f in stats["failure_rates"]}
    assert rates == {"p1": (2, 3), "p2": (1, 3)}, rates
    assert stats["hints"] == [{"hint": HINT, "students": 1}], "a hint counts once per student"


@pytest.mark.parametrize("path", ["grade", "batch", "gradescope", "prairielearn"])
def test_every_path_gives_the_same_numbers(tmp_path, path):
    if path == "grade":
        (tmp_path / "report.json").write_text(json.dumps([r.to_dict() for r in CLASS]))
    elif path == "batch":
        for result in CLASS:
            (tmp_path / f"{result.submission}.json").write_text(json.dumps({"student": result.submission,
                                                                            "result": result.to_dict()}))
    else:
        platform = Gradescope() if path == "gradescope" else PrairieLearn()
        for result in CLASS:
            data = platform.results(result, COURSE, seconds=1.0)
            (tmp_path / result.submission / "results").mkdir(parents=True)
            (tmp_path / result.submission / "results" / "results.json").write_text(json.dumps(data))
    records, not_graded = class_report.read([tmp_path])
    _expect(class_report.statistics(records, not_graded=not_graded))


def test_an_upload_with_nothing_gradable_counts_as_not_graded(tmp_path):
    (tmp_path / "gs.json").write_text(json.dumps({"score": 0.0, "output": "no unit files", "tests": []}))
    (tmp_path / "pl.json").write_text(json.dumps({"gradable": False, "format_errors": ["x"], "tests": []}))
    (tmp_path / "summary.json").write_text(json.dumps({"students": 2}))  # not a result: ignored
    records, not_graded = class_report.read([tmp_path])
    assert (records, not_graded) == ([], 2)


def test_the_cli_writes_markdown_and_a_plot(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps([r.to_dict() for r in CLASS]))
    out = tmp_path / "out"
    proc = attn_course("class-report", str(tmp_path / "report.json"), "-o", str(out))
    assert "3 students" in proc.stdout
    text = (out / "class_report.md").read_text(encoding="utf-8")
    assert "| 90-100% | 1 |" in text and "67%" in text and "1/sqrt\\(E\\)" in text
    assert (out / "class_report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _expect(json.loads((out / "class_report.json").read_text(encoding="utf-8")))
    missing = attn_course("class-report", str(tmp_path / "nowhere"), "-o", str(out), check=False)
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_hints_written_in_chinese_are_counted(tmp_path):
    """A Chinese course's results carry the engine's words in Chinese (``提示：``, ``（反例：``):
    the report still finds the hint, and the same hint twice counts once per student."""
    from autograder.core import i18n
    from autograder.testing.compare import with_hint

    i18n.choose("zh")
    try:
        advice = with_hint("权重不同", HINT)
        assert "提示" in advice, advice  # the catalogue renders the engine's words in Chinese
        chinese = i18n.translate_text(HINT)
        outputs = {"p1": i18n.gettext("{text} (counterexample: {example})").format(text=advice, example="L=1"),
                   "p2": advice + "\n" + i18n.gettext("reproduce: {command}").format(command="attn-course repro ...")}
    finally:
        i18n.choose(None)
    stats = class_report.statistics([class_report.from_result(_result("dan", outputs).to_dict())])
    assert stats["hints"] == [{"hint": chinese, "students": 1}], stats["hints"]


# -- issue 59: the report, right ----------------------------------------------------------------

def _scored(name: str, passed: int, total: int = 4, *, informational_failed: bool = False) -> dict:
    """A result with ``passed`` of ``total`` 1-point properties passed, and one 0-point check."""
    tests = [{"id": f"t::p{i}", "name": f"p{i}", "score": 1.0 if i < passed else 0.0, "max_score": 1.0,
              "status": "passed" if i < passed else "failed", "output": ""} for i in range(total)]
    tests.append({"id": "t::cpu_cuda", "name": "cpu_and_cuda_agree", "score": 0.0, "max_score": 0.0,
                  "status": "failed" if informational_failed else "passed", "output": "file not found"})
    return GradeResult.from_dict({"submission": name, "units": {UNIT: {
        "title": "Attention", "status": "graded", "message": "", "tests": tests}}}).to_dict()


def test_informational_checks_are_not_failure_rates():
    """A 0-point check fails with its unit when the file is missing: it is no property to re-teach."""
    stats = class_report.statistics([class_report.from_result(_scored("a", 0, informational_failed=True)),
                                     class_report.from_result(_scored("b", 4, informational_failed=True))])
    assert [f["property"] for f in stats["failure_rates"]] == [f"{UNIT}: p{i}" for i in range(4)]
    gradescope = Gradescope().results(GradeResult.from_dict(_scored("a", 0, informational_failed=True)), COURSE)
    record = class_report.from_platform(gradescope)
    assert record is not None and all("cpu_and_cuda" not in t["property"] for t in record["tests"])


def test_the_median_is_the_true_median():
    """Two students, 50% and 100%: the median is 75%, not the upper one."""
    two = [class_report.from_result(_scored("a", 2)), class_report.from_result(_scored("b", 4))]
    assert class_report.statistics(two)["median_percent"] == 75.0
    three = two + [class_report.from_result(_scored("c", 1))]
    assert class_report.statistics(three)["median_percent"] == 50.0


def test_scores_are_after_the_late_penalty_and_the_report_says_so(tmp_path):
    late = {"units": {UNIT: {"score": 2.0, "penalty": 2.0, "days_late": 1}}}  # 4 points, half taken
    records = [class_report.from_result(_scored("late", 4), late), class_report.from_result(_scored("ontime", 4))]
    assert (records[0]["score"], records[0]["raw_score"]) == (2.0, 4.0)
    stats = class_report.write(tmp_path, records)
    assert stats["distribution"]["50-60%"] == 1 and stats["distribution"]["90-100%"] == 1
    assert stats["late_penalised"] == 1 and stats["median_percent"] == 75.0
    assert stats["median_percent_before_late_penalty"] == 100.0
    text = (tmp_path / "class_report.md").read_text(encoding="utf-8")
    assert "Scores are after the late penalty: it cost 1 students points (the median before it: 100%)" in text
    on_time = class_report.write(tmp_path / "none", records[1:])
    assert on_time["late_penalised"] == 0
    assert "after any late penalty (none was taken)" in (tmp_path / "none" / "class_report.md").read_text()


def test_a_partial_regrade_says_so_in_its_title():
    every = list(COURSE.units)
    assert class_report.title("Class report", every, every) == f"Class report ({', '.join(every)})"
    partial = class_report.title("Class report (nbgrader)", [UNIT], every)
    assert partial == f"Class report (nbgrader) (partial regrade: {UNIT} only, not {len(every)} units)"
    text = class_report.markdown(class_report.statistics([]), partial)
    assert text.startswith(f"# {markdown_text(partial)}: 0 students")
