"""What /proc says about a process, and a pidfd to follow its exit: the one place the daemon
reads it.

A process's parent, name, state, cgroup and children are readable by anyone, so the daemon
needs no privilege for them; its command line, cwd and owner are read only where a scope with
no record is adopted. The cgroup file has one parser (``cgroup_path``) for the three layouts
systemd runs on. Reads use plain os calls: the containment guard reads a few thousand of these
files a minute, and a buffered text file costs several times more.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

MAX_TREE = 16384  # processes read from one root down, at most


@dataclass(frozen=True)
class Process:
    """A process as /proc showed it. cmdline, cwd and uid are read only when asked for
    (``read(pid, details=True)``); empty otherwise."""

    pid: int
    ppid: int
    comm: str
    cgroup: str  # the unified hierarchy's path (or name=systemd's, in the legacy layout)
    zombie: bool
    cmdline: list[str] = field(default_factory=list)
    cwd: str = ""
    uid: int = -1


def read_small(path: str) -> str | None:
    """A small /proc file's text, or None when it (or its process) is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat_fields(stat: str) -> tuple[str, list[str]]:
    """comm, and the fields after it (state first): comm is in parentheses and may itself
    hold spaces and parentheses."""
    return stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 :].split()


def leads_its_terminal(pid: int) -> bool:
    """Whether pid's process group is its terminal's foreground group: no job it started has
    been given the terminal. False when it is gone or has no terminal."""
    stat = read_small(f"/proc/{pid}/stat")
    if stat is None:
        return False
    fields = _stat_fields(stat)[1]  # state ppid pgrp session tty_nr tpgid ...
    return len(fields) > 5 and fields[5] != "-1" and fields[2] == fields[5]


def read(pid: int, details: bool = False) -> Process | None:
    """pid as /proc shows it now, or None when it is gone."""
    stat = read_small(f"/proc/{pid}/stat")
    cgroups = read_small(f"/proc/{pid}/cgroup")
    if stat is None or cgroups is None:
        return None
    comm, fields = _stat_fields(stat)
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    proc = Process(pid, int(fields[1]), comm, cgroup_path(cgroups), fields[0] == "Z")
    if not details:
        return proc
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
        cwd = os.readlink(f"/proc/{pid}/cwd")
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    return Process(proc.pid, proc.ppid, proc.comm, proc.cgroup, proc.zombie, cmdline, cwd, uid)


def cgroup_path(text: str | Iterable[str]) -> str:
    """The cgroup systemd tracks a process in, from its /proc/PID/cgroup: the unified
    hierarchy's ("0::"), which systemd keeps in the unified and hybrid layouts alike (a
    container may also list the host's v1 hierarchies, all at "/"); name=systemd's in the
    legacy layout, which has no "0::" or has everything at its root."""
    lines = text.splitlines() if isinstance(text, str) else text
    unified = legacy = ""
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            unified = path
        elif controllers == "name=systemd":
            legacy = path
    return unified if unified not in ("", "/") else legacy or unified


def cgroup_of(pid: int) -> str:
    """pid's cgroup path (cgroup_path), or "" when it is gone."""
    text = read_small(f"/proc/{pid}/cgroup")
    return cgroup_path(text) if text is not None else ""


def started(pid: int) -> int | None:
    """When pid's process started, in clock ticks since boot (stat's 22nd field); None when
    it is gone."""
    text = read_small(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = _stat_fields(text)[1]
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def pidfd_pid(pidfd: int) -> int | None:
    """The pid a pidfd's process has in this PID namespace (fdinfo's Pid): -1 once it has
    exited, 0 when it is outside the namespace; None when the kernel does not say."""
    text = read_small(f"/proc/self/fdinfo/{pidfd}")
    for line in (text or "").splitlines():
        if line.startswith("Pid:"):
            value = line[4:].strip()
            return int(value) if value.lstrip("-").isdigit() else None
    return None


def children_of(pid: int) -> list[int]:
    """pid's children, as the kernel lists them for each of its threads."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in threads:
        text = read_small(f"/proc/{pid}/task/{tid}/children")
        if text is not None:
            found += [int(child) for child in text.split() if child.isdigit()]
    return found


def family(root: int) -> list[int]:
    """root's pid and its descendants', read from root down through the kernel's children
    lists (at most MAX_TREE: the scope's TasksMax bounds a real one)."""
    seen: set[int] = set()
    order: list[int] = []
    todo = [root]
    while todo and len(order) < MAX_TREE:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            order.append(pid)
            todo += children_of(pid)
    return order


def ns_pid(pid: int) -> int:
    """pid's number in the PID namespace it was made in (its own session's, if it has one):
    the last of /proc/PID/status's NSpid; 0 when it is gone."""
    for line in (read_small(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("NSpid:"):
            numbers = line.split()[1:]
            return int(numbers[-1]) if numbers and numbers[-1].isdigit() else 0
    return 0


def apart(pid: int) -> bool:
    """Is pid in a PID namespace of its own (below this one)?"""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") != _own_pid_namespace()
    except OSError:
        return False


@functools.cache  # this process's never changes
def _own_pid_namespace() -> str:
    return os.readlink("/proc/self/ns/pid")


def numbered(root: int, number: int) -> int:
    """The pid, as this namespace numbers it, of the process under root (root included) that
    root's own PID namespace numbers number: what a session's tmux reports, as the daemon
    sees it. number itself when root shares this namespace; 0 when there is none."""
    if not apart(root):
        return number
    level, seen = [root], 0
    while level and seen < MAX_TREE:  # nearest first: a pane is its server's child
        for pid in level:
            if ns_pid(pid) == number:
                return pid
        seen += len(level)
        level = [child for pid in level for child in children_of(pid)]
    return 0


def numbered_among(pids: Iterable[int], number: int) -> int:
    """numbered, among a scope's pids: one in a PID namespace of its own numbered number,
    else number itself when it is one of them; 0 when neither."""
    pids = list(pids)
    found = next((p for p in pids if apart(p) and ns_pid(p) == number), 0)
    return found or (number if number in pids else 0)


def exit_status(pid: int) -> int | None:
    """The wait status of pid when it is a zombie nobody reaped (/proc's exit_code)."""
    stat = read_small(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = _stat_fields(stat)[1]
    return int(fields[49]) if len(fields) > 49 and fields[0] == "Z" else None


def follow(pid: int, on_exit: Callable[[], None]) -> Callable[[], None] | None:
    """Call on_exit once when pid exits (a pidfd on the event loop); a function that stops
    following, or None when pid is gone already."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    loop = asyncio.get_running_loop()
    open_fd = [fd]  # closed once, however often stop is called

    def stop() -> None:
        if open_fd:
            loop.remove_reader(open_fd[0])
            os.close(open_fd.pop())

    def exited() -> None:
        stop()
        on_exit()

    loop.add_reader(fd, exited)
    return stop


def runs(uid: int, comm: str) -> bool:
    """Whether a process of uid's named comm (as the kernel keeps it: 15 bytes) runs on the
    host, in any session or none."""
    name = comm[:15]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
        except OSError:
            continue
        if (read_small(f"/proc/{entry}/comm") or "").rstrip("\n") == name:
            return True
    return False
