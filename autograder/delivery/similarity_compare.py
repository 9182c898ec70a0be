"""The comparison behind :mod:`autograder.delivery.similarity`: copydetect's winnowed fingerprints
of every unit file, each pair of one unit compared, and copydetect's own HTML report.

Run as a child interpreter (``python -m autograder.delivery.similarity_compare JOB.json
PAIRS.json``) with string hashes fixed: copydetect hashes k-grams with Python's ``hash``, which is
salted per process, so only then does the same class give the same numbers on every run and machine.
"""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

NOISE, GUARANTEE = 25, 30  # copydetect's defaults: matches shorter than 25 filtered characters are noise
# The HTML shows at most this many pairs (the most similar; the CSV has all): each holds both files
# whole, so a class of 200 with many flagged pairs would otherwise be hundreds of MiB.
HTML_PAIRS = 200


def _label(student: str, unit_file: str, taken: set[str]) -> str:
    """The report's name for a file: copydetect writes some names into its HTML unescaped."""
    plain = "".join("_" if ch in "<>&\"'/\\" else ch for ch in student)
    label, n = f"{plain}/{unit_file}", 1
    while label in taken:
        n += 1
        label = f"{plain}~{n}/{unit_file}"
    taken.add(label)
    return label


def rank(a_to_b: float, b_to_a: float, tokens: int) -> tuple:
    """The order of the report: the larger share first, then the smaller, then the longer overlap."""
    return (-max(a_to_b, b_to_a), -min(a_to_b, b_to_a), -tokens)


def compare(job: dict) -> list[list]:
    """Run copydetect over ``job`` (``entries``: [unit, student, unit file, text]; ``boilerplate``:
    unit -> texts; ``threshold``; ``html``; ``most``: at most this many pairs in the HTML) and write
    its HTML report; returns [i, j, i->j, j->i, tokens, shown] for each pair i < j of entries of one
    unit. Needs fixed string hashes to be reproducible."""
    import numpy as np
    from copydetect import CodeFingerprint, CopyDetector  # type: ignore[import-untyped]

    class Capped(CopyDetector):
        """copydetect's report, listing only the pairs in ``shown`` (its plots and counts keep every pair)."""

        shown: list[tuple[int, int]] = []
        similarity_matrix: Any  # copydetect's: [test file, reference file] -> (its share, the other's); -1 if not compared

        def get_copied_code_list(self):
            every = self.similarity_matrix
            self.similarity_matrix = np.full_like(every, -1)
            for i, j in self.shown:
                self.similarity_matrix[i, j], self.similarity_matrix[j, i] = every[i, j], every[j, i]
            try:
                return super().get_copied_code_list()
            finally:
                self.similarity_matrix = every

    window = GUARANTEE - NOISE + 1
    excluded = {}
    for unit, texts in job["boilerplate"].items():  # as copydetect's own boilerplate: every k-gram (window 1)
        hashes = [h for t in texts for h in CodeFingerprint(f"boilerplate/{unit}.py", NOISE, 1, language="python",
                                                            fp=io.StringIO(t)).hashes]
        excluded[unit] = np.unique(np.array(hashes, dtype=np.int64))
    detector = Capped(extensions=["py"], noise_t=NOISE, guarantee_t=GUARANTEE, display_t=job["threshold"],
                      same_name_only=True, autoopen=False, silent=True, out_file=job["html"])
    labels: list[str] = []
    taken: set[str] = set()
    for unit, student, unit_file, text in job["entries"]:
        label = _label(student, unit_file, taken)
        labels.append(label)
        # Fingerprinted from the text (nothing read from disk), each against its own unit's boilerplate.
        detector.file_data[label] = CodeFingerprint(label, NOISE, window, excluded[unit], language="python",
                                                    fp=io.StringIO(text))
        detector.add_file(label)
    if len(labels) < 2:
        return []
    detector.run()
    sim, overlap = detector.similarity_matrix, detector.token_overlap_matrix
    by_unit: dict[str, list[int]] = {}
    for n, entry in enumerate(job["entries"]):
        by_unit.setdefault(entry[0], []).append(n)
    pairs: list[tuple[int, int, float, float, int]] = sorted(
        (i, j, float(sim[i, j, 0]), float(sim[i, j, 1]), int(overlap[i, j]))
        for group in by_unit.values() for k, i in enumerate(group) for j in group[k + 1:] if overlap[i, j] >= 0)
    above = sorted((p for p in pairs if max(p[2], p[3]) > job["threshold"]), key=lambda p: (rank(*p[2:]), p[:2]))
    detector.shown = [(p[0], p[1]) for p in above[:max(0, job.get("most", HTML_PAIRS))]]
    detector.generate_html_report()
    shown = set(detector.shown)
    return [[*p, (p[0], p[1]) in shown] for p in pairs]


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(compare(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))),
                                 encoding="utf-8")
