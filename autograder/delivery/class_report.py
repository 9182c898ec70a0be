"""One class report for every path: what to re-teach on Monday, whichever platform graded.

From the results of a class (the grade's own results, as ``grade --format json``, the batch's
per-student files and nbgrader's re-scoring write them; or the results.json files Gradescope
and PrairieLearn keep), it writes

- ``class_report.md``: the score distribution (tenths of the maximum) and the median (the true
  one: the mean of the two middle scores of an even count), both after the late penalty where
  one was taken (the report says so, with the median before it), each property's failure rate
  over the students it ran for (worst first; the informational checks worth 0 points, which
  fail with their unit whenever a file is missing, are left out), and the hints that fired most;
- ``class_report.png``: the same distribution and the worst properties, drawn with matplotlib;
- ``class_report.json``: the numbers both are drawn from.

A hint is the advice a failure message carries after ``Hint: `` (up to the counterexample the
grader appends): the course's suites write it so; a course without hints gets an empty table.
Every text a student controls goes through :func:`~autograder.delivery.formats.markdown_text`.
"""
from __future__ import annotations

import functools
import json
import re
import statistics as stats_of
from collections import Counter
from pathlib import Path

from autograder.core.i18n import N_, renderings
from autograder.delivery.atomic import atomic_write
from autograder.delivery.formats import markdown_text

# The engine's words around a hint in a failure message, whichever language it was written in.
HINT_START = N_(". Hint: {advice}")
HINT_ENDS = (N_("{text} (counterexample: {example})"), N_("reproduce: {command}"), N_("the call: {call}"))
WORST = 15  # properties and hints listed


@functools.cache
def hint_pattern() -> re.Pattern[str]:
    """What finds a hint in a failure message: the advice after ``Hint: `` up to the counterexample,
    the reproduce line or the call the grader appends, in English or any catalogued language."""
    def before(message: str, field: str) -> list[str]:  # each rendering's words up to ``field``
        return [r.split(field)[0] for r in renderings(message)]

    starts = [s.lstrip(". \u3002") for s in before(HINT_START, "{advice}")]  # "Hint: ", not ". Hint: "
    ends = ([r.split("{text}")[1].rstrip() for r in before(HINT_ENDS[0], "{example}")]
            + ["\n" + s for s in before(HINT_ENDS[1], "{command}") + before(HINT_ENDS[2], "{call}")])
    escaped = "|".join(map(re.escape, starts)), "|".join(map(re.escape, ends))
    return re.compile(f"(?:{escaped[0]})(.+?)(?={escaped[1]}|\\Z)", re.S)


def from_result(result: dict, late: dict | None = None) -> dict:
    """A student's record from a grade result (``GradeResult.to_dict()``): its score after the late
    penalty of ``late`` (a batch record's ``late`` section: unit -> its ``score`` after the penalty)
    where one was taken, the score before it as ``raw_score``. A property worth 0 points is left
    out: it is informational, and it fails with its unit (a missing file, a syntax error)."""
    tests = [{"property": f"{name}: {t['name']}", "failed": t["status"] == "failed", "output": t.get("output") or ""}
             for name, unit in result.get("units", {}).items() for t in unit["tests"]
             if t["status"] != "skipped" and t.get("max_score", 1) > 0]
    raw = result.get("score", 0.0)
    priced = (late or {}).get("units", {})
    score = raw
    if priced:
        score = round(sum(priced[name]["score"] if name in priced else unit.get("score", 0.0)
                          for name, unit in result.get("units", {}).items()), 4)
    return {"score": score, "raw_score": raw, "max_score": result.get("max_score", 0.0), "tests": tests}


def from_platform(data: dict) -> dict | None:
    """A student's record from a Gradescope or PrairieLearn results.json (None: not graded). Its
    score is the platform's, after any late penalty (Gradescope's results keep the one before it
    in ``extra_data``); a test worth 0 points is left out."""
    if "gradable" in data:  # PrairieLearn: points per test, the score a fraction
        if not data["gradable"]:
            return None
        tests = [{"property": t["name"], "failed": t["points"] < t["max_points"], "output": t.get("message") or ""}
                 for t in data.get("tests", []) if t["max_points"] > 0]
        maximum = sum(t["max_points"] for t in data.get("tests", []))
        return {"score": data.get("score", 0.0) * maximum, "max_score": maximum, "tests": tests}
    if not data.get("tests"):  # Gradescope's answer to an upload with nothing gradable
        return None
    tests = [{"property": t["name"], "failed": t.get("status") == "failed" or t["score"] < t["max_score"],
              "output": t.get("output") or ""} for t in data["tests"] if t["max_score"] > 0]
    score = data.get("score", 0.0)
    raw = ((data.get("extra_data") or {}).get("late") or {}).get("raw_score", score)
    return {"score": score, "raw_score": raw, "max_score": sum(t["max_score"] for t in data["tests"]),
            "tests": tests}


def title(base: str, units: list[str], every: list[str]) -> str:
    """``base (units)``, saying ``partial regrade`` when ``units`` are not all of ``every``: a
    report of some units only replaces the class's whole one."""
    if units and sorted(units) != sorted(every):
        return f"{base} (partial regrade: {', '.join(units)} only, not {len(every)} units)"
    return f"{base} ({', '.join(units)})" if units else base


def read(paths: list[Path]) -> tuple[list[dict], int]:
    """The records of every result found in ``paths`` (files, or folders searched for ``*.json``):
    a platform's results.json, a grade's JSON (one result or a list), a batch's student file.
    Returns (records, results not graded)."""
    records, not_graded = [], 0
    record: dict | None  # None: a platform's result of a student not graded
    files = [f for p in paths for f in (sorted(p.rglob("*.json")) if p.is_dir() else [p])]
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not a result (a summary, a half-written file): nothing to count
        for item in data if isinstance(data, list) else [data]:
            if not isinstance(item, dict):
                continue
            if "units" in item or isinstance(item.get("result"), dict):  # a grade's result, or a batch record
                record = from_result(item.get("result", item), item.get("late"))  # (a batch record's penalty)
            elif "tests" in item or "gradable" in item:
                record = from_platform(item)
            else:
                continue
            if record is None:
                not_graded += 1
            else:
                records.append(record)
    return records, not_graded


def statistics(records: list[dict], *, not_graded: int = 0, isolation: str | None = None) -> dict:
    """The class's numbers: distribution, failure rate per property, the hints that fired most;
    ``isolation``: the sandbox mode's notice of the grading (None in full mode)."""
    ran: Counter[str]  # property -> students it ran for
    failed: Counter[str]  # property -> students it failed for
    hints: Counter[str]  # hint -> students it was given to
    ran, failed, hints = Counter(), Counter(), Counter()
    for record in records:
        given = set()  # a hint counts once per student, however many properties gave it
        for test in record["tests"]:
            ran[test["property"]] += 1
            if test["failed"]:
                failed[test["property"]] += 1
                given |= {text.strip() for text in hint_pattern().findall(test["output"])}
        hints.update(given)
    bins = Counter(min(int(10 * r["score"] / r["max_score"]), 9) if r["max_score"] else 0 for r in records)

    def percent(record: dict, key: str) -> float:
        return 100 * record.get(key, record["score"]) / record["max_score"] if record["max_score"] else 0.0

    scores = [percent(r, "score") for r in records]
    before = [percent(r, "raw_score") for r in records]
    late = sum(r.get("raw_score", r["score"]) > r["score"] for r in records)
    rates = sorted(((failed[p] / ran[p], p) for p in ran if failed[p]), key=lambda rp: (-rp[0], rp[1]))
    return {
        "students": len(records) + not_graded,
        "graded": len(records),
        "not_graded": not_graded,
        "isolation_warning": isolation,
        "median_percent": round(stats_of.median(scores), 1) if scores else None,
        # The scores drawn are after the late penalty; the students it cost, and the median before it.
        "late_penalised": late,
        "median_percent_before_late_penalty": round(stats_of.median(before), 1) if before else None,
        "distribution": {f"{10 * b}-{10 * b + 10}%": bins.get(b, 0) for b in range(10)},
        "failure_rates": [{"property": p, "failed": failed[p], "ran": ran[p], "rate": round(r, 3)}
                          for r, p in rates[:WORST]],
        "hints": [{"hint": h, "students": n} for h, n in sorted(hints.items(), key=lambda hn: (-hn[1], hn[0]))[:WORST]],
    }


def markdown(stats: dict, title: str = "Class report") -> str:
    lines = [f"# {markdown_text(title)}: {stats['students']} students, {stats['not_graded']} not graded"
             + (f", median {stats['median_percent']:g}%" if stats["median_percent"] is not None else ""), "",
             *([markdown_text(stats["isolation_warning"]), ""] if stats.get("isolation_warning") else []),
             _late_line(stats), "",
             "![the distribution and the worst properties](class_report.png)", "",
             "| score | students |", "|---|---:|", *(f"| {k} | {v} |" for k, v in stats["distribution"].items()),
             "", "## Properties most failed", "", "| property | failed | of | rate |", "|---|---:|---:|---:|",
             *(f"| {markdown_text(f['property'])} | {f['failed']} | {f['ran']} | {100 * f['rate']:.0f}% |"
               for f in stats["failure_rates"]),
             "", "## Hints that fired most", "", "| hint | students |", "|---|---:|",
             *(f"| {markdown_text(h['hint'])} | {h['students']} |" for h in stats["hints"])]
    return "\n".join(lines) + "\n"


def _late_line(stats: dict) -> str:
    if stats.get("late_penalised"):
        return (f"Scores are after the late penalty: it cost {stats['late_penalised']} students points (the median "
                f"before it: {stats['median_percent_before_late_penalty']:g}%).")
    return "Scores are after any late penalty (none was taken)."


def plot(stats: dict, path: Path) -> None:
    """The distribution and the worst properties' failure rates, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=[1, 1.6])
    left.bar(list(stats["distribution"]), list(stats["distribution"].values()), color="#4c72b0")
    left.set(title="Scores (after the late penalty)", xlabel="share of the maximum", ylabel="students")
    left.yaxis.set_major_locator(MaxNLocator(integer=True))
    left.tick_params(axis="x", labelrotation=45)
    worst = stats["failure_rates"][:10][::-1]
    right.barh([_short(f["property"]) for f in worst], [100 * f["rate"] for f in worst], color="#dd8452")
    right.set(title="Properties most failed", xlabel="% of the students it ran for", xlim=(0, 100))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})  # (no version stamp: the same class, the same file)
    plt.close(fig)


def _short(text: str, width: int = 60) -> str:
    """A label: cut to ``width``, and no mathtext (matplotlib reads "$...$" as TeX)."""
    return (text if len(text) <= width else text[: width - 1] + "…").replace("$", r"\$")


def write(out: Path, records: list[dict], *, not_graded: int = 0, title: str = "Class report",
          isolation: str | None = None) -> dict:
    """class_report.md, .png and .json in ``out``; returns the numbers."""
    stats = statistics(records, not_graded=not_graded, isolation=isolation)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "class_report.json", json.dumps(stats, indent=2, ensure_ascii=False))
    atomic_write(out / "class_report.md", markdown(stats, title))
    plot(stats, out / "class_report.png")
    return stats
