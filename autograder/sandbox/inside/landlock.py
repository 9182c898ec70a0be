"""Landlock: what a worker without namespaces may open, set by the worker on itself.

In container and plain modes there is no mount namespace, so a worker could
read every file its uid can: a world-readable copy of the answers anywhere on
the machine (a second checkout, a course folder in /tmp). Landlock (Linux
5.13+) needs neither root nor namespaces: the worker, before it runs student
code, restricts itself to reading the folders the trusted side lists
(:func:`autograder.sandbox.visible.readable`) and to writing its own box.
From ABI 4 it also refuses every TCP bind and connect, and from ABI 6 it
cannot signal, nor reach an abstract Unix socket of, a process outside its
own domain. A restriction is permanent and passes to every child.

Rules only ever add access, beneath a folder; nothing can be taken back below
one. So a folder holding a site-packages is listed entry by entry by the
trusted side, never allowed whole.
"""
from __future__ import annotations

import ctypes
import os
import stat

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and arm64 (the generic table)
CREATE_RULESET_VERSION, RULE_PATH_BENEATH = 1, 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_ALL = 1 << 4, 1 << 5, 0x7F << 6  # make char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2  # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE  # the only rights a rule on a file may carry

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is off, missing, or refused by seccomp."""
    version = _libc.syscall(ctypes.c_long(CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _handled_fs(version: int) -> int:
    rights = READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_ALL
    return rights | (REFER if version >= 2 else 0) | (TRUNCATE if version >= 3 else 0)


def restrict(read: list[str], write: list[str], list_only: list[str]) -> int:
    """Allow only reading ``read``, listing ``list_only`` and everything within ``write``; returns the ABI.

    Paths that do not exist are skipped (a worker may lack an optional device).
    No-new-privileges must already be set. Raises OSError if Landlock refuses.
    """
    version = abi()
    if version < 1:
        raise OSError("Landlock is not available")
    handled = _handled_fs(version)
    attr = _RulesetAttr(handled, NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0)
    size = 8 if version < 4 else 16 if version < 6 else 24  # the struct as this ABI knows it
    ruleset = _libc.syscall(ctypes.c_long(CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for paths, rights in ((read, READ), (list_only, READ_DIR), (write, handled)):
            for path in paths:
                _allow(int(ruleset), path, rights & handled)
        if _libc.syscall(ctypes.c_long(RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return version


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_RIGHTS
            if not rights:
                return
        rule = _PathBeneathAttr(rights, fd)
        if _libc.syscall(ctypes.c_long(ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH),
                         ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)
