"""A class batch that one student cannot stop (issue 15): whatever one upload
does, every classmate is graded, and a stopped batch resumes.

The uploads are built by tests/hostile/batch/uploads.py.
"""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import ROOT, attn_course, grade_json
import hostile_cases
import mutants
from autograder.core.manifest import load_course
from autograder.delivery.batch import Student, _chunks, _Runner, discover
from autograder.grading.supervisor import GraderProcess
from autograder.sandbox.pool import Pool

sys.path.insert(0, str(ROOT / "tests" / "hostile" / "batch"))
import uploads  # noqa: E402

SOLUTION = (ROOT / "solutions" / "attention.py").read_text(encoding="utf-8")


def _honest(subs: Path, name: str) -> str:
    (subs / name).mkdir()
    (subs / name / "attention.py").write_text(SOLUTION, encoding="utf-8")
    return name


def _book(out: Path) -> dict[str, list[str]]:
    return {row[0]: row for row in csv.reader((out / "gradebook.csv").open(encoding="utf-8"))}


NEEDS_ATTENTION = 4  # grade-batch's exit code when an upload was refused or not graded


def _batch(subs: Path, out: Path, *extra: str, code: int = 0) -> subprocess.CompletedProcess:
    proc = attn_course("grade-batch", str(subs), "-o", str(out), "--unit", "attention", "--no-progress", *extra,
                       check=False)
    assert proc.returncode == code, f"exit {proc.returncode}, not {code}:\n{proc.stderr[-3000:]}"
    return proc


def test_no_upload_stops_or_poisons_the_batch(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    honest = [_honest(subs, "carol")]
    mutants.write("attention.py", next(m for m in mutants.load("attention") if m["name"] == "no_scale"), subs / "bob")
    hostile = [uploads.make_deep_zip(ROOT, subs), uploads.make_deep_folder(ROOT, subs),
               uploads.make_sparse_file(ROOT, subs), uploads.make_decode_crash(ROOT, subs),
               uploads.make_report_json(ROOT, subs)]
    zed, zed_zip = uploads.make_clash(ROOT, subs)
    alice, alice_zip = uploads.make_over_alice(ROOT, subs)
    started = time.monotonic()
    try:
        proc = _batch(subs, out, "-j", "2", code=NEEDS_ATTENTION)
    finally:
        # pytest's own clean-up of old tmp folders recurses, and would fail on the deep folder later.
        subprocess.run(["rm", "-rf", str(subs / "deep_folder")], check=True)
    book = _book(out)
    possible = float(book["Points Possible"][2])
    carol_record = json.loads((out / "students" / "carol.json").read_text())
    assert possible == carol_record["result"]["units"]["attention"]["max_score"] > 0
    # Every honest classmate is graded on their own code, full marks.
    for name in (*honest, "report.json", "sparse_file"):
        assert book[name][1] == "graded" and float(book[name][2]) == possible, (name, book[name])
    assert 0 < float(book["bob"][2]) < possible
    # A name is an identity: uploads that share one are refused, both, until the instructor maps them;
    # their cells are blank (only graded work gets a number).
    for name, uploads_of in ((zed, {zed, zed_zip}), (alice, {alice, alice_zip})):
        assert book[name][1].startswith("name clash") and book[name][2:] == ["", ""], book[name]
        assert f"share the name {name!r}" in proc.stderr
    refused = json.loads((out / "summary.json").read_text())["names_refused"]
    assert {r["name"]: set(r["uploads"]) for r in refused} == {zed: {zed, zed_zip}, alice: {alice, alice_zip}}
    # The hostile uploads cost only themselves, with a status that says why.
    assert "nested more than" in book["deep_zip"][1] and "nested more than" in book["deep_folder"][1]
    assert float(book["decode_crash"][2]) == 0
    assert set(book) == {"student", "Points Possible", "bob", "carol", *hostile, zed, alice}
    # Nothing a student or instructor receives names a temporary folder.
    for record in (out / "students").iterdir():
        text = record.read_text(encoding="utf-8")
        assert "/tmp" not in text and str(tmp_path) not in text, record.name
    assert all("\n" not in cell for row in book.values() for cell in row)
    assert time.monotonic() - started < 900


def test_a_chunk_out_of_time_costs_only_the_slow_student_and_is_graded_again(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    dora = _honest(subs, "dora")
    slow = uploads.make_slow(ROOT, subs)
    # One chunk of two; each student's budget is 10 s (the chunk's is one budget per student,
    # plus one for start-up; a student graded again alone has two): ample for honest grading of
    # one unit on a loaded machine (about 3 s), far less than the slow student's half second per
    # call takes (about 700 calls).
    _batch(subs, out, "-j", "1", "--student-budget", "10", code=NEEDS_ATTENTION)
    book = _book(out)
    assert book[dora][1] == "graded" and float(book[dora][2]) == float(book["Points Possible"][2])
    assert "time budget exhausted" in book[slow][1] and book[slow][2] == "", "not graded: blank, not 0"
    # A failure is never final: the next run grades the slow student again, and only them (a
    # short budget: what is checked is who is graded, not how the slow student ends again).
    _batch(subs, out, "-j", "1", "--student-budget", "5", code=NEEDS_ATTENTION)
    assert json.loads((out / "summary.json").read_text())["graded_now"] == 1
    book = _book(out)
    assert "time budget exhausted" in book[slow][1] and book[dora][1] == "graded", (book[slow], book[dora])


def _graders_of(pid: int) -> list[int]:
    """Grader processes the batch started (they run in sessions of their own): forked from it
    (its command line), or started as ``autograder.grading.serve``."""
    found, batch = [], Path(f"/proc/{pid}/cmdline").read_bytes()
    for entry in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        grader = cmd == batch or b"autograder.grading.serve" in cmd.split(b"\0")
        if grader and int(stat[1]) == pid and stat[0] != "Z":
            found.append(int(entry))
    return found


def test_a_grader_process_grades_its_next_chunk_as_a_fresh_one_would(tmp_path):
    """A batch thread's grader process grades chunk after chunk: what a hostile chunk did must
    not change the grades of the next (its uploads are from tests/hostile/: results forged on
    disk, a search of the loaded modules for a correct answer, processes left behind in
    sessions of their own)."""
    subs = tmp_path / "subs"
    hostile = [hostile_cases.write(n, tmp_path / "hostile") for n in ("forged_results", "sys_modules", "session_children")]
    mutants.write("attention.py", next(m for m in mutants.load("attention") if m["name"] == "no_scale"), subs / "bob")
    honest = subs / _honest(subs, "carol")
    server = subprocess.Popen([sys.executable, "-m", "autograder.grading.serve", "attention"], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    replies = []
    for i, chunk in enumerate((hostile, [subs / "bob", honest])):
        server.stdin.write(json.dumps({"folders": [str(p) for p in chunk], "report": str(tmp_path / f"{i}.json")}) + "\n")
        server.stdin.flush()
        replies.append(json.loads(server.stdout.readline()))
    server.stdin.close()
    assert server.wait(timeout=60) == 0 and replies == [{"ok": True}, {"ok": True}]
    first = json.loads((tmp_path / "0.json").read_text())
    assert [r["units"]["attention"]["score"] for r in first] == [0, 0, 0]
    warm = json.loads((tmp_path / "1.json").read_text())
    fresh = grade_json([subs / "bob", honest], ["attention"])
    assert warm == fresh and 0 < warm[0]["score"] < warm[1]["score"] == warm[1]["max_score"]


LATER_GRADES = """
import json, sys
from pathlib import Path
from autograder.grading import plugin
from autograder.core.manifest import load_course
from autograder.grading.grade import collect_suites, grade
skipped, ask = [], plugin.GradingPlugin.pytest_ignore_collect
def spy(self, collection_path, config):
    answer = ask(self, collection_path, config)
    skipped.append(collection_path.name) if answer else None
    return answer
plugin.GradingPlugin.pytest_ignore_collect = spy
course, folder = load_course(), Path(sys.argv[1])
collect_suites(course, ["attention"])  # as a batch does before it forks its grader processes
grades = []
for units in (["attention"], ["attention", "positional_encoding"], ["positional_encoding"]):
    skipped.clear()
    grades.append(grade(course, [folder], units=units)[0].to_dict())
    grades[-1]["skipped"] = sorted(skipped)
print(json.dumps(grades))
"""


def test_a_process_grades_other_units_after_one_as_a_fresh_one_would(tmp_path):
    """A process's later grades collect only the test modules of their units, as its first
    collection learnt them (autograder.grading.plugin): one that collected and graded one unit
    skips the others' modules, and still runs every test of the units it grades next."""
    bob = tmp_path / "bob"
    mutants.write("positional_encoding.py", mutants.load("positional_encoding")[0], bob)  # the rest: solutions
    proc = subprocess.run([sys.executable, "-c", LATER_GRADES, str(bob)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    later = json.loads(proc.stdout.splitlines()[-1])
    skipped = [set(r.pop("skipped")) for r in later]
    assert {"test_positional_encoding_properties.py", "test_multi_head_public.py"} <= skipped[0]
    assert not {n for n in skipped[0] | skipped[1] if n.startswith("test_attention")}
    assert not {n for n in skipped[1] | skipped[2] if n.startswith("test_positional")}
    assert "test_attention_properties.py" in skipped[2]
    fresh = [grade_json([bob], units)[0]
             for units in (["attention"], ["attention", "positional_encoding"], ["positional_encoding"])]
    for result in (*later, *fresh):
        result.pop("submission")
    assert later == fresh
    assert [sorted(r["units"]) for r in later] == [["attention"], ["attention", "positional_encoding"],
                                                   ["positional_encoding"]]
    assert 0 < later[1]["units"]["positional_encoding"]["score"] < later[1]["units"]["positional_encoding"]["max_score"]


def _pipes(pid: int) -> set[str]:
    return {target for fd in os.listdir(f"/proc/{pid}/fd")
            if (target := os.readlink(f"/proc/{pid}/fd/{fd}")).startswith("pipe:")}


def test_grader_processes_forked_one_after_another_hold_only_their_own_pipes(tmp_path):
    """The batch forks its grader processes one after another. A later one must not hold an
    earlier one's pipes: that one's end of input would never come (closed, it would be killed
    after 30 s instead of ending by itself). And a forked one grades as a fresh grade does."""
    subs = tmp_path / "subs"
    mutants.write("attention.py", next(m for m in mutants.load("attention") if m["name"] == "no_scale"), subs / "bob")
    honest = subs / _honest(subs, "carol")
    course = load_course(ROOT)
    pool = Pool(course)
    servers = []
    try:
        for _ in range(2):
            servers.append(GraderProcess.forked(course, ["attention"], pool, list(servers)))
        first, second = servers
        assert second.grade([subs / "bob", honest], tmp_path / "report.json", 300.0) is None  # (set up by now)
        ours = {f"pipe:[{os.fstat(f.fileno()).st_ino}]" for f in (first.proc.stdin, first.proc.stdout)}
        assert len(ours) == 2 and not ours & _pipes(second.proc.pid)
        started = time.monotonic()
        first.close()
        assert first.proc.returncode == 0 and time.monotonic() - started < 20
    finally:
        for server in servers:
            server.close()
        pool.close()
    forked = json.loads((tmp_path / "report.json").read_text())
    fresh = grade_json([subs / "bob", honest], ["attention"])
    assert forked == fresh and 0 < forked[0]["score"] < forked[1]["score"] == forked[1]["max_score"]


def test_a_zygote_that_ended_is_replaced_for_the_next_grader_process(tmp_path):
    """The batch's grader processes spawn their workers from one zygote, the batch's. One that
    ended (killed, say) must not fail every later chunk: the next grader process gets a fresh one."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    name = _honest(subs, "dora")
    runner = _Runner(load_course(ROOT), out, ["attention"], 300.0)
    try:
        runner.start_zygote()
        first = runner.session.pool
        first.proc.kill()
        first.proc.wait()
        runner.chunk(discover(subs)[0])
        assert runner.session.pool is not first and runner.session.pool.proc.poll() is None
    finally:
        runner.close()
        runner.release()
    record = json.loads((out / "students" / f"{name}.json").read_text())
    assert record["status"] == "graded", record["status"]
    assert record["result"]["score"] == record["result"]["max_score"] > 0


def test_ctrl_c_while_the_batch_holds_its_lock_does_not_hang(tmp_path):
    """SIGINT's handler (``stop``) runs in the main thread between two steps of whatever it was
    doing, such as starting the zygote under the runner's lock: it must not wait for itself."""
    runner = _Runner(load_course(ROOT), tmp_path, ["attention"], 300.0)

    def interrupted_while_starting() -> None:
        with runner._lock:  # as start_zygote holds it
            runner.stop()  # what the handler calls, in the same thread

    thread = threading.Thread(target=interrupted_while_starting, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and runner.stopping.is_set()


def test_ctrl_c_stops_cleanly_records_nothing_cut_short_and_resumes(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    names = [_honest(subs, n) for n in ("s1", "s2", "s3")]
    batch = subprocess.Popen([sys.executable, "-m", "autograder.cli", "grade-batch", str(subs), "-o", str(out),
                              "-j", "1", "--unit", "attention", "--no-progress"],
                             cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, graders = time.monotonic() + 120, []
    while not graders and time.monotonic() < deadline:
        found = _graders_of(batch.pid)
        if found:
            # A child between fork and exec (the zygote, a helper) looks like a forked grader for a
            # moment: only one still there a little later is a grader.
            time.sleep(0.3)
            graders = [pid for pid in _graders_of(batch.pid) if pid in found]
        time.sleep(0.05)
    assert graders, "the batch never started a grader"
    os.killpg(batch.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
    stopped = time.monotonic()
    _, err = batch.communicate(timeout=60)
    assert time.monotonic() - stopped < 15, "the batch took too long to stop"
    assert batch.returncode == 130, err
    assert "run the same command again" in err and "Traceback" not in err
    assert not list((out / "students").glob("*.json")) if (out / "students").exists() else True
    time.sleep(0.5)
    assert not [pid for pid in graders if Path(f"/proc/{pid}").exists()
                and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    _batch(subs, out)
    book = _book(out)
    assert all(book[n][1] == "graded" and float(book[n][2]) == float(book["Points Possible"][2]) for n in names)
    assert json.loads((out / "summary.json").read_text())["graded_now"] == 3


def test_two_jobs_use_two_processes_for_a_class_of_two_and_finish_together():
    two = [Student(n, Path(n), n) for n in ("a", "b")]
    assert [len(c) for c in _chunks(two, 2)] == [1, 1]
    eleven = [Student(str(i), Path(str(i)), str(i)) for i in range(11)]
    assert [len(c) for c in _chunks(eleven, 1)] == [5, 5, 1]
    # Several threads: full chunks while there is much to do, single students at the end.
    assert [len(c) for c in _chunks(eleven, 2)] == [3, 2, 2, 1, 1, 1, 1]
    fifty = [Student(str(i), Path(str(i)), str(i)) for i in range(50)]
    assert [len(c) for c in _chunks(fifty, 2)] == [5] * 7 + [4, 3, 2, 2, 1, 1, 1, 1]
    assert [s for c in _chunks(fifty, 2) for s in c] == fifty


def test_points_possible_holds_when_nobody_was_gradable(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    (subs / "dave.zip").write_bytes(b"not a zip")
    _batch(subs, out, code=NEEDS_ATTENTION)
    book = _book(out)
    assert "not a readable zip" in book["dave"][1]
    graded = grade_json([ROOT / "solutions"], ["attention"], "--no-sandbox")[0]
    assert float(book["Points Possible"][2]) == graded["units"]["attention"]["max_score"] > 0


def test_names_are_identities_that_no_upload_can_borrow(tmp_path):
    """Issue 43: a folder named after a classmate's upload, after the gradebook's own row or as a
    formula takes nothing; the instructor's --map settles a clash; Canvas rows come from the roster."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    alice, alice_zip = uploads.make_over_alice(ROOT, subs)  # alice/ is honest, alice.zip is not
    _honest(subs, "Points Possible")
    formula = _honest(subs, '=HYPERLINK("evil.example","64")')
    roster = tmp_path / "roster.csv"  # Canvas's gradebook export, with the uploads' names beside the IDs
    column = f"{load_course(ROOT).units['attention'].title} (52001)"
    with roster.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "folder", column],
                                      ["Smith, Alice", "1001", "s1", "", "A", "alice", ""],
                                      ["Doe, Dee", "1002", "s2", "", "A", formula, ""]])
    _batch(subs, out, "--csv", "canvas", "--roster", str(roster), code=NEEDS_ATTENTION)
    rows = list(csv.reader((out / "gradebook.csv").open(encoding="utf-8")))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column]
    assert [row[0] for row in rows] == ["Student", "    Points Possible", "Smith, Alice", "Doe, Dee"]
    assert rows[2][1] == "1001" and rows[2][5] == "", "a clash gives alice's row no one's score: blank"
    assert float(rows[3][5]) == float(rows[1][5]) > 0, "the formula folder is graded, its name made inert"
    summary = json.loads((out / "summary.json").read_text())
    refused = {r["name"]: r["reason"] for r in summary["names_refused"]}
    assert refused.keys() == {"alice", "Points Possible"} and "--map" in refused["alice"]
    assert summary["not_on_roster"] == ["Points Possible"]
    # The instructor maps each upload to its owner: alice's own folder is graded as hers.
    mapping = tmp_path / "map.csv"
    mapping.write_text(f"upload,student\n{alice},alice\n{alice_zip},mallory\nPoints Possible,pat\n", encoding="utf-8")
    _batch(subs, out, "--map", str(mapping))
    book = _book(out)
    assert float(book["alice"][2]) == float(book["Points Possible"][2]) > 0
    assert float(book["mallory"][2]) < float(book["alice"][2]) and book["pat"][1] == "graded"
    assert sum(row[0] == "Points Possible" for row in csv.reader((out / "gradebook.csv").open(encoding="utf-8"))) == 1
