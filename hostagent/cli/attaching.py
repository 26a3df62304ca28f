"""The attach's tmux client, kept from doing what the session's server tells it to.

A tmux client is its server's to command: ``detach-client -E CMD`` makes it exec CMD
(MSG_EXEC), ``lock-client`` run the lock command (MSG_LOCK, through system()), ``detach-client
-P`` send its parent SIGHUP, and any server (one the agent put in place of the session's socket)
can answer a client with MSG_SHELL (exec a program) or have it open, read and write a file by
path. The session commands its server: the agent runs in it and can ``set-hook client-attached``
anything. Its owner's terminal, attached with a plain ``tmux -S … attach``, would run CMD as
her, outside the sandbox.

So ``hostagentctl attach`` runs its client in a Landlock domain of its own, made just before it
execs tmux: it may execute tmux and its loader and nothing else, read only the system's trees
(``/usr``, ``/etc``, the libraries: what any session can read), write only its terminal and
``/dev/null``, open no TCP connection, and (Landlock ABI 6) signal no process outside itself.
The client works (the socket is not a path Landlock governs, the terminal was open before);
whatever the server asks beyond that fails. tmux itself, executed again with ``-c``, finds no
server to ask (its socket directory is made unusable) and is in the same domain.

Without Landlock the attach is refused, with the reason, rather than made unconfined.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import struct

# Landlock's file system rights (linux/landlock.h), and the ABI that brought each one.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_ABI1_ALL = (1 << 13) - 1  # execute .. make_sym
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
_SYS = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# What any session can read: the system's programs, libraries, data and configuration.
SYSTEM_TREES = ("/usr", "/lib", "/lib64", "/lib32", "/etc")
# tmux -c CMD (an exec the server names tmux for) looks for its server here, and finds none.
NO_SERVER_DIR = "/nonexistent/hostagent-attach"


class AttachRefused(Exception):
    """The client cannot be confined on this host; the message says what to do instead."""


def handled(abi: int) -> int:
    """Every file system right this ABI knows: all of them are denied but where a rule allows."""
    rights = _ABI1_ALL
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def rules(tmux: str, loader: str | None, terminal: str | None, abi: int) -> list[tuple[str, int]]:
    """(path, rights) the client is allowed: tmux and its loader run, the system's trees are
    read, its terminal and /dev/null are read and written (and, from ABI 5, given ioctls)."""
    device = READ_FILE | WRITE_FILE | (IOCTL_DEV if abi >= 5 else 0)
    allowed = [(tmux, EXECUTE | READ_FILE)]
    if loader:
        allowed.append((loader, EXECUTE | READ_FILE))
    allowed += [(tree, READ_FILE | READ_DIR) for tree in SYSTEM_TREES]
    allowed += [(path, device) for path in ("/dev/null", terminal) if path]
    return allowed


def elf_interpreter(head: bytes) -> str | None:
    """The program interpreter (PT_INTERP) an ELF file names, from its first bytes; None for
    one that names none (static) or that is not ELF."""
    if (
        head[:4] != b"\x7fELF"
        or head[4:5] not in (b"\x01", b"\x02")
        or head[5:6]
        not in (
            b"\x01",
            b"\x02",
        )
    ):
        return None
    wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
    word = "Q" if wide else "I"
    # e_phoff, then e_phentsize and e_phnum; in a header, p_offset and p_filesz.
    phoff = struct.unpack_from(order + word, head, 0x20 if wide else 0x1C)[0]
    phentsize, phnum = struct.unpack_from(order + "HH", head, 0x36 if wide else 0x2A)
    offset_at, size_at = (8, 32) if wide else (4, 16)
    for i in range(phnum):
        at = phoff + i * phentsize
        if at + phentsize > len(head):
            return None
        if struct.unpack_from(order + "I", head, at)[0] != 3:  # PT_INTERP
            continue
        offset = struct.unpack_from(order + word, head, at + offset_at)[0]
        size = struct.unpack_from(order + word, head, at + size_at)[0]
        name = head[offset : offset + size].split(b"\0")[0]
        return name.decode(errors="replace") if name else None
    return None


def client_env(env: dict[str, str]) -> dict[str, str]:
    """The client's environment: without TMUX (a tmux it is made to exec again would find the
    caller's own server) and with a socket directory that cannot be made."""
    kept = {k: v for k, v in env.items() if k not in ("TMUX", "TMUX_PANE")}
    kept["TMUX_TMPDIR"] = NO_SERVER_DIR
    return kept


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")
    return result


def landlock_abi() -> int:
    return max(0, int(_libc.syscall(_SYS["create_ruleset"], None, 0, 1)))


def confine(tmux: str) -> None:
    """This process (about to exec tmux) put in the attach's domain; AttachRefused when this
    kernel has no Landlock."""
    abi = landlock_abi()
    if abi < 1:
        raise AttachRefused(
            "this kernel has no Landlock, so the attaching tmux client cannot be kept from "
            "running what the session's tmux server tells it to; not attaching"
        )
    with open(tmux, "rb") as f:
        loader = elf_interpreter(f.read(4096))
    try:
        terminal: str | None = os.ttyname(0)
    except OSError:
        terminal = None
    attr = _RulesetAttr(handled(abi), _NET_BIND_TCP | _NET_CONNECT_TCP, 0)
    size = 8 if abi < 4 else 16
    if abi >= 6:
        attr.scoped, size = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL, 24
    ruleset = _check(_libc.syscall(_SYS["create_ruleset"], ctypes.byref(attr), size, 0), "landlock")
    try:
        for path, rights in rules(tmux, loader, terminal, abi):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a tree this system does not have
            try:
                directory = os.path.isdir(f"/proc/self/fd/{fd}")
                rule = _PathBeneath(rights if directory else rights & ~READ_DIR, fd)
                _check(
                    _libc.syscall(
                        _SYS["add_rule"], ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0
                    ),
                    f"landlock_add_rule({path})",
                )
            finally:
                os.close(fd)
        _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        _check(_libc.syscall(_SYS["restrict_self"], ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def exec_confined(argv: list[str]) -> None:
    """Exec argv (a tmux attach) in the attach's domain, from /, in client_env: never
    returns; AttachRefused or OSError when it cannot."""
    tmux = os.path.realpath(shutil.which(argv[0]) or argv[0])
    confine(tmux)
    os.chdir("/")  # a program the server names is never looked up where the agent can write
    os.execve(tmux, argv, client_env(dict(os.environ)))
