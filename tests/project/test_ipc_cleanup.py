"""Nothing a worker makes in IPC outlives it (issue 43, item 6), in full, container and plain mode.

tests/hostile/sysv_ipc leaves System V shared memory, a message queue and a semaphore set (each
given away to another owner); tests/hostile/posix_ipc leaves a POSIX message queue, a shared
memory object, a named semaphore and a folder tree 1,500 levels deep in /dev/shm. Both are graded
with the allow-list off (it refuses ctypes before anything runs), their names carrying a mark of
each run, and this process then looks for them by name. The decision per mode is
autograder/sandbox/ipc.py's docstring.

Objects made here on purpose belong to uids above the leased range (``UID_MAX`` and up): the
suite's other graders, in plain mode as root and in container mode with leased uids, remove what
their own workers' uids made, and must not take these.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT
from autograder.sandbox import ipc
from autograder.sandbox.resources import UID_MAX
from modes import NO_NAMESPACES, params, skip_reason
from test_sandbox import CORPUS_MARK, DRIVER, HOSTILE

CASES = ("sysv_ipc", "posix_ipc")
IPC_CREAT, IPC_SET, IPC_STAT, IPC_RMID = 0o1000, 1, 2, 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
_rt = ctypes.CDLL("librt.so.1", use_errno=True)
_rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
_rt.mq_unlink.argtypes = [ctypes.c_char_p]

# Landlock keeps a worker out of /dev/shm (it may write its own folder only). Refused here (its
# syscalls answer "not implemented"), the attack reaches /dev/shm, as where the kernel lacks Landlock.
NO_LANDLOCK = textwrap.dedent("""
    import ctypes, struct
    def _no_landlock():
        LD, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
        program = [(LD, 0, 0, 4), (JEQ, 0, 4, 0xC000003E), (LD, 0, 0, 0),  # x86_64 only
                   (JGE, 0, 2, 444), (JGE, 1, 0, 447), (RET, 0, 0, 0x00050000 | 38), (RET, 0, 0, 0x7FFF0000)]
        code = b"".join(struct.pack("HBBI", *op) for op in program)
        buffer = ctypes.create_string_buffer(code)
        fprog = struct.pack("HxxxxxxQ", len(program), ctypes.addressof(buffer))
        assert ctypes.CDLL(None).prctl(22, 2, ctypes.create_string_buffer(fprog), 0, 0) == 0  # (no-new-privileges: set)
    _no_landlock()
""")
# Which removals were given what the uid held when the worker started (plain mode's rule: its
# workers have the grader's uid, so only what is new is theirs). Recorded, not enforced: objects
# of that uid made on purpose could be taken by the suite's other plain-mode graders meanwhile.
RECORD_REMOVALS = textwrap.dedent("""
    import atexit, json, sys
    from autograder.sandbox import ipc
    _taken, _removals, _snapshot, _remove = ("test", "snapshot taken", 0), [], ipc.snapshot, ipc.remove
    ipc.snapshot = lambda uid: _snapshot(uid) | {_taken}  # (a kind no removal acts on)

    def _recording(uid, before=frozenset()):
        _removals.append(_taken in before)
        _remove(uid, before)

    ipc.remove = _recording
    atexit.register(lambda: print("removals:", json.dumps(_removals), file=sys.stderr))
""")
# A grader that cannot list POSIX queues (no /dev/mqueue, no fsopen): its workers may make none.
NO_QUEUE_LISTING = "from autograder.sandbox import ipc\nipc._queues = lambda: None\n"
OWN_UIDS = iter(range(UID_MAX + 1, UID_MAX + 100))  # (see the module's docstring)
_marks = iter(range(100))


def new_mark() -> str:
    """A name part (and System V key: nine digits, under 2**31) of this process's alone: other test
    processes may make the same objects at the same time."""
    return f"7{os.getpid() % 10**6:06d}{next(_marks):02d}"


def marked_copies(base: Path, mark: str) -> list[Path]:
    """The two cases copied into ``base``, their mark replaced by ``mark``."""
    folders = []
    for case in CASES:
        shutil.copytree(HOSTILE / case, base / case)
        source = base / case / "attention.py"
        source.write_text(source.read_text().replace(CORPUS_MARK, mark))
        folders.append(base / case)
    return folders


def grade(folders: list[Path], *, mode: str | None = None, prelude: str = "") -> dict:
    """Grade in a fresh interpreter with the allow-list off: test_sandbox.drive, after a prelude of ours."""
    spec = json.dumps({"paths": [str(p) for p in folders], "units": ["attention"], "timeout": 2.0, "sandbox": True,
                       "limits": {}, "watch": None, "mode": mode, "allow_list": False, "fork": False})
    proc = subprocess.run([sys.executable, "-c", prelude + DRIVER, spec], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(proc.stdout.splitlines()[-1])
    run["removals"] = [json.loads(line.split(" ", 1)[1]) for line in proc.stderr.splitlines() if line.startswith("removals:")]
    run["scores"] = {p.name: r["units"]["attention"]["score"] for p, r in zip(folders, run["results"])}
    return run


def _sysv_rows(kind: str, mark: str) -> list[int]:
    rows = [line.split() for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]]
    return [int(row[1]) for row in rows if row and int(row[0]) == int(mark)]


def left(mark: str) -> list[str]:
    """The objects named by ``mark`` in this (the host's) IPC namespace and /dev/shm."""
    found = [f"System V {kind}" for kind in ("shm", "msg", "sem") for _ in _sysv_rows(kind, mark)]
    queue = _rt.mq_open(f"/attn-mq-{mark}".encode(), os.O_RDONLY, 0, None)
    if queue >= 0:
        _rt.mq_close(queue)
        found.append(f"queue /attn-mq-{mark}")
    return found + sorted(f"/dev/shm/{name}" for name in os.listdir("/dev/shm") if mark in name)


def clear(mark: str) -> None:
    """Remove what ``mark`` names (what a test made, or what a failing grader left)."""
    for ident in _sysv_rows("shm", mark):
        _libc.shmctl(ident, IPC_RMID, None)
    for ident in _sysv_rows("msg", mark):
        _libc.msgctl(ident, IPC_RMID, None)
    for ident in _sysv_rows("sem", mark):
        _libc.semctl(ident, 0, IPC_RMID)
    _rt.mq_unlink(f"/attn-mq-{mark}".encode())
    for name in os.listdir("/dev/shm"):
        if mark in name:
            subprocess.run(["rm", "-rf", f"/dev/shm/{name}"], check=True)  # (1,500 levels deep: no rmtree)


def make_objects(mark: str) -> None:
    """One object of each kind, named by ``mark``."""
    _libc.shmget(int(mark), 4096, IPC_CREAT | 0o600)
    _libc.msgget(int(mark), IPC_CREAT | 0o600)
    _libc.semget(int(mark), 1, IPC_CREAT | 0o600)
    queue = _rt.mq_open(f"/attn-mq-{mark}".encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
    assert queue >= 0, os.strerror(ctypes.get_errno())
    _rt.mq_close(queue)
    Path(f"/dev/shm/attn-shm-{mark}").write_bytes(b"kept")


def as_uid(uid: int, action) -> None:
    """Run ``action`` in a forked child with ``uid`` (real, effective and saved), as a worker would."""
    pid = os.fork()
    if not pid:
        code = 1
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            action()
            code = 0
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: objects are made as uids of their own")


# -- graded in each mode ---------------------------------------------------------------------------

@pytest.fixture(scope="session", params=params("ipc"))
def mode_run(request, tmp_path_factory) -> dict:
    """Both cases graded in one mode: container and plain as test_sandbox.py's mode runs make them
    (plain forced on top of container), with Landlock off besides."""
    mode = request.param
    if why := skip_reason(mode):
        pytest.skip(why)
    mark = new_mark()
    folders = marked_copies(tmp_path_factory.mktemp(f"ipc-{mode}"), mark)
    try:
        run = grade(folders, mode="plain" if mode == "plain" else None,
                    prelude=("" if mode == "full" else NO_NAMESPACES + NO_LANDLOCK) + RECORD_REMOVALS)
        run["left"] = left(mark)
    finally:
        clear(mark)
    run["expected"] = mode
    return run


def test_each_mode_leaves_no_ipc_object(mode_run):
    assert mode_run["mode"] == mode_run["expected"]
    assert "Landlock" not in (mode_run["warning"] or ""), mode_run["warning"]
    assert mode_run["scores"] == dict.fromkeys(CASES, 0), mode_run["scores"]  # each softmax is wrong
    assert not mode_run["left"], mode_run["left"]


def test_only_plain_mode_keeps_what_was_there_before(mode_run):
    """Plain mode removes what is new since the worker started; container mode all of its leased uid's
    (and clears a uid when it leases it); full mode removes nothing per worker (nothing reaches the host)."""
    [removals] = mode_run["removals"]
    if mode_run["mode"] == "full":
        assert not any(removals), removals  # (a uid's lease clears it in every mode)
    else:
        assert removals and set(removals) == {mode_run["mode"] == "plain"}, removals


@pytest.mark.xdist_group("ipc-container")
def test_queues_no_one_can_list_cannot_be_made(tmp_path):
    """Where the grader cannot list POSIX queues, a worker may make none (RLIMIT_MSGQUEUE 0, which a
    worker without privileges cannot raise, though the case tries)."""
    if why := skip_reason("container"):
        pytest.skip(why)
    mark = new_mark()
    folders = marked_copies(tmp_path, mark)
    try:
        run = grade(folders[1:], prelude=NO_NAMESPACES + NO_QUEUE_LISTING)
        found = left(mark)
    finally:
        clear(mark)
    assert run["mode"] == "container" and run["scores"] == {"posix_ipc": 0}
    assert f"queue /attn-mq-{mark}" not in found, found


def test_the_attacks_are_real(tmp_path):
    """Run as a process of their own (not graded), the cases make every object the runs look for."""
    needs_root()
    mark = new_mark()
    folders = marked_copies(tmp_path, mark)
    try:
        for folder in folders:
            path = folder / "attention.py"  # (read here: the folder is this uid's alone)
            code = compile(path.read_text(), str(path), "exec")
            as_uid(next(OWN_UIDS), lambda: exec(code, {"__name__": folder.name}))
        found = left(mark)
    finally:
        clear(mark)
    assert found == ["System V shm", "System V msg", "System V sem", f"queue /attn-mq-{mark}",
                     f"/dev/shm/attn-dir-{mark}", f"/dev/shm/attn-shm-{mark}", f"/dev/shm/sem.attn-sem-{mark}"], found


# -- the trusted side's removal, on its own ----------------------------------------------------------

def test_remove_takes_what_the_uid_made_and_nothing_else(tmp_path):
    needs_root()
    worker, other = next(OWN_UIDS), next(OWN_UIDS)
    mark, other_mark = new_mark(), new_mark()
    target = tmp_path / "target"
    target.write_text("not the worker's")

    def worker_objects():
        make_objects(mark)
        os.symlink(target, f"/dev/shm/attn-link-{mark}")
        buffer = ctypes.create_string_buffer(512)
        ident = _libc.shmget(int(mark), 0, 0)
        assert _libc.shmctl(ident, IPC_STAT, buffer) == 0
        ctypes.c_uint32.from_buffer(buffer, 4).value = other  # given away: its creator is still the worker
        assert _libc.shmctl(ident, IPC_SET, buffer) == 0

    try:
        as_uid(worker, worker_objects)
        as_uid(other, lambda: make_objects(other_mark))
        assert len(left(mark)) == 6 and len(left(other_mark)) == 5, (left(mark), left(other_mark))
        ipc.remove(worker)
        assert left(mark) == [] and len(left(other_mark)) == 5, (left(mark), left(other_mark))
        assert target.read_text() == "not the worker's"
    finally:
        clear(mark)
        clear(other_mark)


def test_remove_keeps_what_was_there_before():
    """Plain mode's rule: what the uid held when the worker started is not the worker's."""
    needs_root()
    uid = next(OWN_UIDS)
    mark, earlier = new_mark(), new_mark()
    try:
        as_uid(uid, lambda: make_objects(earlier))
        before = ipc.snapshot(uid)
        as_uid(uid, lambda: make_objects(mark))
        ipc.remove(uid, before)
        assert left(mark) == [] and len(left(earlier)) == 5, (left(mark), left(earlier))
    finally:
        clear(mark)
        clear(earlier)


# Without fsopen (Docker's profile refuses it; root has no CAP_SYS_ADMIN there), queues are found
# through the queues' file system mounted in the grader's mount namespace, as Docker mounts it at
# /dev/mqueue. Here: a mount namespace of its own, the file system mounted in a temporary folder.
MOUNTED_QUEUES = textwrap.dedent("""
    import ctypes, json, os, struct, sys
    folder, name, uid = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.unshare(0x00020000) == 0
    assert libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18), None) == 0  # private, recursively
    assert libc.mount(b"mqueue", folder.encode(), b"mqueue", 0, None) == 0
    LD, JEQ, RET = 0x20, 0x15, 0x06
    program = [(LD, 0, 0, 4), (JEQ, 0, 3, 0xC000003E), (LD, 0, 0, 0), (JEQ, 0, 1, 430),  # x86_64's fsopen
               (RET, 0, 0, 0x00050000 | 1), (RET, 0, 0, 0x7FFF0000)]
    code = b"".join(struct.pack("HBBI", *op) for op in program)
    buffer = ctypes.create_string_buffer(code)
    assert libc.prctl(38, 1, 0, 0, 0) == 0
    fprog = struct.pack("HxxxxxxQ", len(program), ctypes.addressof(buffer))
    assert libc.prctl(22, 2, ctypes.create_string_buffer(fprog), 0, 0) == 0
    from autograder.sandbox import ipc
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    pid = os.fork()
    if not pid:
        os.setresuid(uid, uid, uid)
        os._exit(0 if rt.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, None) >= 0 else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    found = sorted(o[1] for o in ipc.snapshot(uid) if o[0] == "queue")
    ipc.remove(uid)
    print(json.dumps({"found": found, "after": rt.mq_open(name, os.O_RDONLY, 0, None), "mounts": ipc._mqueue_mounts()}))
""")


def test_queues_are_found_through_a_mounted_queue_file_system(tmp_path):
    needs_root()
    name = f"/attn-mq-{new_mark()}"
    try:
        proc = subprocess.run([sys.executable, "-c", MOUNTED_QUEUES, str(tmp_path), name, str(next(OWN_UIDS))],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    finally:
        _rt.mq_unlink(name.encode())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == {"found": [name[1:]], "after": -1, "mounts": [str(tmp_path)]}, proc.stdout
