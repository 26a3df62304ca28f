"""Where the daemon's tmux clients run: inside the session they talk to.

A tmux client does what its server tells it. A server can make a client exec a program of its
choosing (MSG_SHELL, answered to any client; ``detach-client -E`` to an attached one) and open,
read and write files by path in the client's name (MSG_READ_OPEN, MSG_WRITE_OPEN: ``load-buffer``
and ``save-buffer`` of a client's file). The session controls its server: the agent runs in it
and can ``set-hook`` anything, and its socket is in the session's own directory, where the agent
can put a server of its own in its place. So a client the daemon ran as the owner, outside the
session, was a way out: a program run as the owner, outside the sandbox, in hostagent.service.

The daemon does not try to tell a genuine server from another, since the genuine one is the
session's to command as well. Its client runs where whatever it is made to do is no more than
the agent could do itself: in the session's cgroup (its caps, and gone with it), its mount
namespace (and user namespace, on the user daemon), a Landlock domain and no new privileges;
then as the owner. The forker's child (forker.py) enters it between fork and exec, from a
pidfd of a process of the session's scope, so a pid reused meanwhile is never entered.

Only the standard library and namespace.py are imported: the forker imports this.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
from dataclasses import dataclass

from hostagent.daemon.host import namespace

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_PR_SET_NO_NEW_PRIVS = 38
CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class Enclosure:
    """A session to run a client in: a process of its scope (its tmux server, as the daemon
    recorded it) and the scope, which that process must still be in when it is entered."""

    pid: int
    unit: str
    landlock_abi: int


def unified_cgroup(text: str) -> str:
    """The unified hierarchy's path in a /proc/PID/cgroup text ("" when it has none)."""
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            return path
    return ""


def in_unit(cgroup: str, unit: str) -> bool:
    """Is a process whose cgroup path is cgroup in unit (its own group, or one below it)?"""
    return bool(unit) and unit in cgroup.split("/")


def namespaces_to_join(ours: dict[str, int], theirs: dict[str, int]) -> int:
    """setns(2)'s flags for the namespaces of theirs that are not ours (inode numbers by
    name): a user namespace is joined with the mount namespace it owns, and never when it is
    our own already (setns refuses that)."""
    flags = 0
    if theirs["mnt"] != ours["mnt"]:
        flags |= _CLONE_NEWNS
    if theirs["user"] != ours["user"]:
        flags |= _CLONE_NEWUSER
    return flags


def _inodes(pid: int | str) -> dict[str, int]:
    return {name: os.stat(f"/proc/{pid}/ns/{name}").st_ino for name in ("mnt", "user")}


def enter(enclosure: Enclosure) -> None:
    """In the forked child, before it execs (as root on the system daemon, as the owner on
    the user daemon): into the session's cgroup and namespaces, a Landlock domain, no new
    privileges. OSError when the session's process is not there to enter."""
    pid = enclosure.pid
    pidfd = os.pidfd_open(pid)
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            cgroup = unified_cgroup(f.read())
        theirs = _inodes(pid)
        if not in_unit(cgroup, enclosure.unit):
            raise OSError(errno.ESRCH, f"no process of {enclosure.unit}", str(pid))
        # Still the process the pidfd holds: the pid read from /proc was not reused meanwhile.
        signal.pidfd_send_signal(pidfd, 0)
        procs = os.open(f"{CGROUP_ROOT}{cgroup}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(procs, b"0\n")
        finally:
            os.close(procs)
        flags = namespaces_to_join(_inodes("self"), theirs)
        if flags and namespace.libc.setns(pidfd, flags) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns: {os.strerror(error)}", str(pid))
    finally:
        os.close(pidfd)
    os.chdir("/")
    if namespace.libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")
    if enclosure.landlock_abi:
        namespace.landlock_domain(enclosure.landlock_abi)
