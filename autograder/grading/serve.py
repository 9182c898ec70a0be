"""A grader process that grades one chunk of submissions after another (for a class batch).

Starting a grader costs more than grading a student with it: its imports (torch,
pytest, hypothesis) and its first grade take about 2.5 CPU-seconds, a zygote
about 1.3 more, one student of one unit about 1 to 2. A batch job
(:mod:`autograder.delivery.batch`) therefore keeps one of these processes and
sends it chunk after chunk; the process spawns its workers from the batch's
zygote, named by ``AUTOGRADER_SANDBOX_ATTACH`` (started alone, it starts its own).
The batch forks its first ones (:mod:`.forking`: they inherit its imports and run
:func:`main`) and starts a replacement as a fresh interpreter::

    python -m autograder.grading.serve [UNIT ...]    # the course from AUTOGRADER_COURSE_ROOT / the cwd

Each line on stdin is a request, ``{"folders": [...], "report": PATH}``: the
folders are graded together, exactly as ``grade --jobs 1 --format json`` grades
them (same function, same defaults), the results are written to ``report`` as a
JSON list, and one line answers on stdout: ``{"ok": true}``, or ``{"error": MESSAGE}``
when the grader failed (:mod:`.serve_channel`, the batch's codec too). A failure ends the process, so nothing of a failed
grade reaches the next chunk: the batch starts a fresh one (and a fresh zygote
if its own ended). End of input ends it cleanly (its workers stopped; started
alone, its zygote too and its folders removed).

Each grade is its own pytest session, and hypothesis derandomizes each test
alone, so a chunk's results do not depend on what this process graded before
(``tests/project/test_batch_hostile.py`` compares them with fresh grades).
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

from autograder.core.manifest import Course, load_course
from autograder.grading import serve_channel as channel
from autograder.core.errors import GraderError
from autograder.grading.session import GradingSession


def main(units: list[str], course: Course | None = None, parent: int = 0) -> int:
    """Serve requests from stdin until its end; ``course`` (default: :func:`load_course`'s),
    and ``parent``: a process to end with (0: none)."""
    # Replies get a descriptor of their own: whatever else writes to stdout (a library's
    # warning printed by C code) cannot break a reply line.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    _die_with(parent)
    course = course or load_course()
    try:
        # The batch's zygote, or our own; the batch reports the mode, so nothing is printed here.
        with GradingSession(course, announce=False) as session:
            session.load_grader()  # while no request waits
            for line in sys.stdin:
                request = channel.decode_request(line)  # a malformed line ends the process, saying why
                try:
                    results = session.grade(list(request.folders), units or None)
                except GraderError as error:
                    return _reply(replies, channel.Failed(str(error)))
                request.report.write_text(json.dumps([r.to_dict() for r in results], ensure_ascii=False),
                                          encoding="utf-8")
                _reply(replies, channel.Graded())
            return 0
    except GraderError as error:  # the sandbox could not start
        return _reply(replies, channel.Failed(str(error)))


def _reply(replies, message: channel.Graded | channel.Failed) -> int:
    replies.write(channel.encode(message).decode())
    replies.flush()
    return 0 if isinstance(message, channel.Graded) else 3


def _die_with(parent: int) -> None:
    """End with the batch that started us, even when it was SIGKILLed (no input's end then
    reaches a grade in progress)."""
    if parent:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the line above
            os._exit(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], parent=int(os.environ.get("AUTOGRADER_SERVE_PARENT", "0"))))
