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
import stat
from dataclasses import dataclass

from hostagent.daemon.host import namespace, pidone

_CLONE_NEWNS, _CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_PR_SET_NO_NEW_PRIVS = 38
CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class Enclosure:
    """A session to run a client in: a process of its scope (its tmux server, as the daemon
    recorded it) and the scope, which that process must still be in when it is entered."""

    pid: int
    unit: str
    landlock_abi: int
    socket: str = ""  # the tmux socket the client names, reached as the daemon sees it


def hierarchies(text: str) -> dict[str, str]:
    """A /proc/PID/cgroup text as {hierarchy: path}: "0" for the unified one, else its
    controllers ("pids", "cpu,cpuacct", "name=systemd")."""
    found = {}
    for line in text.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if path:
            found[controllers or number] = path
    return found


def tracking(groups: dict[str, str]) -> str:
    """The path systemd tracks a unit's processes by: the unified hierarchy's (unified and
    hybrid layouts), else name=systemd's (legacy, or a unified one left at the root)."""
    unified = groups.get("0", "")
    return unified if unified not in ("", "/") else groups.get("name=systemd", unified)


def procs_files(ours: dict[str, str], theirs: dict[str, str], unified_root: str) -> list[str]:
    """The cgroup.procs files to write to join theirs from ours: each hierarchy where the
    two differ, the one systemd tracks by first (in a v1 layout, each is mounted by its name;
    the unified one at unified_root)."""
    files = []
    first = "0" if theirs.get("0", "/") != "/" else "name=systemd"
    for key in sorted(theirs, key=lambda k: (k != first, k not in ("0", "name=systemd"))):
        if theirs[key] == ours.get(key):
            continue
        root = unified_root if key == "0" else f"{CGROUP_ROOT}/{key.removeprefix('name=')}"
        files.append(f"{root}{theirs[key]}/cgroup.procs")
    return files


def in_unit(cgroup: str, unit: str) -> bool:
    """Is a process whose cgroup path is cgroup in unit (its own group, or one below it)?"""
    return bool(unit) and unit in cgroup.split("/")


def namespaces_to_join(ours: dict[str, int], theirs: dict[str, int]) -> int:
    """setns(2)'s flags for the namespaces of theirs that are not ours (inode numbers by
    name): a user namespace is joined with the mount namespace it owns, and never when it is
    our own already (setns refuses that); a PID namespace, for the children made after."""
    flags = 0
    if theirs["mnt"] != ours["mnt"]:
        flags |= _CLONE_NEWNS
    if theirs["user"] != ours["user"]:
        flags |= _CLONE_NEWUSER
    if theirs.get("pid", 0) != ours.get("pid", 0):
        flags |= CLONE_NEWPID
    return flags


def _inodes(pid: int | str) -> dict[str, int]:
    return {name: os.stat(f"/proc/{pid}/ns/{name}").st_ino for name in ("mnt", "user", "pid")}


def enter(enclosure: Enclosure) -> str:
    """In the forked child, before it execs (as root on the system daemon, as the owner on
    the user daemon): into the session's cgroup and namespaces, a Landlock domain, no new
    privileges; the path the client is to name the socket by. In a session with a PID
    namespace of its own, only a child joins it (inside, /proc/self is there only for a
    process of the namespace): this process forks, waits for the child and ends as it ended,
    and the child goes on. OSError when the session's process is not there to enter."""
    pid = enclosure.pid
    pidfd = os.pidfd_open(pid)
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            theirs = hierarchies(f.read())
        namespaces = _inodes(pid)
        if not in_unit(tracking(theirs), enclosure.unit):
            raise OSError(errno.ESRCH, f"no process of {enclosure.unit}", str(pid))
        # Still the process the pidfd holds: the pid read from /proc was not reused meanwhile.
        signal.pidfd_send_signal(pidfd, 0)
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            ours = hierarchies(f.read())
        # pids.max refuses forks, not a move: a client is never moved into a full cgroup.
        if at_limit(_task_counts(theirs, _unified_root())):
            raise OSError(errno.EAGAIN, f"{enclosure.unit} is at its limit of tasks")
        for i, procs in enumerate(procs_files(ours, theirs, _unified_root())):
            try:
                _write(procs, b"0\n")
            except OSError:
                if i == 0:  # the hierarchy systemd tracks by; a v1 controller's may be absent
                    raise
        socket = _reach(enclosure.socket) if enclosure.socket else ""
        flags = namespaces_to_join(_inodes("self"), namespaces)
        if flags and namespace.libc.setns(pidfd, flags) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns: {os.strerror(error)}", str(pid))
    finally:
        os.close(pidfd)
    os.chdir("/")
    if flags & CLONE_NEWPID:
        pidone.waited_child()
    if namespace.libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")
    if enclosure.landlock_abi:
        namespace.landlock_domain(enclosure.landlock_abi)
    return socket


def at_limit(counts: list[tuple[str, str]]) -> bool:
    """Is any cgroup of (pids.current, pids.max) pairs (the session's and those above it)
    full?"""
    return any(limit.strip() != "max" and int(current) >= int(limit) for current, limit in counts)


def _task_counts(theirs: dict[str, str], unified_root: str) -> list[tuple[str, str]]:
    root, path = (
        (f"{CGROUP_ROOT}/pids", theirs["pids"])
        if "pids" in theirs
        else (unified_root, theirs.get("0", ""))
    )
    counts = []
    while path not in ("", "/"):
        try:
            with open(f"{root}{path}/pids.current") as c, open(f"{root}{path}/pids.max") as m:
                counts.append((c.read(), m.read()))
        except OSError:
            pass  # no pids controller there
        path = path.rpartition("/")[0]
    return counts


def _unified_root() -> str:
    hybrid = f"{CGROUP_ROOT}/unified"
    return hybrid if os.path.exists(f"{hybrid}/cgroup.procs") else CGROUP_ROOT


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _reach(path: str) -> str:
    """/proc/self/fd/N for the socket at path, opened here (O_PATH, kept across the exec),
    following no link on the way: the session's mount namespace may not show it (a session
    an older hostagent started has it beside its directory, under the veil), and the owner's
    directories are the owner's to fill with links."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [p for p in path.split("/") if p]:
            step = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = step
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise OSError(errno.ENOTSOCK, "is not a socket", path)
        os.set_inheritable(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return f"/proc/self/fd/{fd}"


def named(argv: list[str], socket: str, reached: str) -> list[str]:
    """argv with its -S socket named as reached (unchanged without one)."""
    if not socket or not reached:
        return argv
    for i in range(len(argv) - 1):
        if argv[i] == "-S" and argv[i + 1] == socket:
            return [*argv[: i + 1], reached, *argv[i + 2 :]]
    return argv
