"""A session's own PID namespace: the fork into it (only a child enters a PID namespace its
parent made or joined: ``into_child`` for the session's first process, ``waited_child`` for a
tmux client of the daemon's), and that first process, pid 1 there, which holds the start,
starts the session's program, and reaps until no process of the session is left.

A session with a PID namespace of its own (``namespace.Plan.own_pids``) sees, signals, traces
and reads the ``/proc`` of its own processes only, whatever Landlock the kernel offers. The
first process forked into a PID namespace is its init: the namespace ends, and every process in
it is killed, when it exits; orphans are given to it to reap. tmux cannot be that process (its
client exits once its server runs, and the server is a daemon that forks away from it), so the
forker's child is (``forker.py``): a fork of the forker, which imports nothing of the daemon's.

It holds the start as the shim it runs would (``heldchild.py``): it waits until the daemon
writes the word or closes the pipe on its stdin, without reading it, so that it is in the
session's scope before anything of the session starts; then it starts the shim, which reads the
word itself. It says how the shim ended as the last line of its stdout (``split_status``), since
it goes on running, then lets go of its stdout and stderr: the daemon reads them to their end.

It stays root (on the system daemon), so no process of the session, which all run as its
owner, can trace or signal it; a signal the scope is stopped with is caught and left to the
processes it is meant for, and once none is left the init ends too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
from typing import NoReturn

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
NAME = "hostagent-init"
STATUS = b"\0hostagent-status "  # the start of the init's line, which nothing else prints
# What systemd or a user may send all of a session's processes, which would otherwise end or
# stop the init (and so kill the rest at once, before they handle it).
_CAUGHT = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGPIPE,
    signal.SIGALRM,
    signal.SIGTERM,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
)


def waited_child() -> None:
    """Go on in a child, in the PID namespace this process joined for its children: this
    process waits for it and exits as it did (as nsenter --fork does), so whoever follows this
    one sees the child's end; the child dies with it."""
    parent = os.pidfd_open(os.getpid())  # its pid means nothing inside the namespace
    pid = os.fork()
    if pid:
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        os._exit(status if status >= 0 else 128 - status)
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(1)
    if select.select([parent], [], [], 0)[0]:  # it died before the line above
        os._exit(1)
    os.close(parent)


def into_child(report: int) -> None:
    """Go on in a child, its own process group, in the PID namespace this process made or
    joined for its children: this process says the child's pid on report and exits."""
    pid = os.fork()
    if pid:
        os.write(report, str(pid).encode())
        os._exit(0)
    os.close(report)
    os.setpgid(0, 0)


def split_status(out: bytes) -> tuple[bytes, int | None]:
    """The program's own output and the status the init said it ended with (None: no line,
    the init ended first)."""
    head, found, tail = out.rpartition(STATUS)
    if not found:
        return out, None
    number = tail.strip()
    return head, int(number) if number.lstrip(b"-").isdigit() else None


def serve(argv: list[str], env: dict[str, str], exec_failed: int) -> NoReturn:
    """pid 1's life: wait for the release, start argv, say how it ended, reap to the end."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(NAME)  # what ps and systemctl status show of it, rather than the forker's
    for signum in _CAUGHT:
        signal.signal(signum, lambda *_: None)  # caught, so an exec resets it
    poll = select.poll()
    poll.register(0, select.POLLIN)
    poll.poll()  # the word, or the pipe closed: the shim reads which
    null = os.open("/dev/null", os.O_RDWR)
    try:  # posix_spawn: no copy of this interpreter's pages on the create's path
        child = os.posix_spawnp(argv[0], argv, env, setsigdef=_CAUGHT)
    except OSError as e:
        os.write(2, f"hostagent: cannot start {argv[0]}: {e}\n".encode(errors="replace"))
        child, code = 0, exec_failed
    os.dup2(null, 0)
    if child:
        code = _reap(until=child)
    os.write(1, STATUS + f"{code}\n".encode())
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    if code != 0:  # tmux did not start: nothing of the session is left to wait for
        os._exit(code if 0 < code < 256 else 1)
    _reap(until=0)
    os._exit(0)


def _reap(until: int) -> int:
    """Reap every child that ends until until has (its status, negative for a signal), or
    with until 0, until no child is left."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if until and pid == until:
            return os.waitstatus_to_exitcode(status)
