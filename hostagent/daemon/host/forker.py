"""The forker: a small process of the daemon's that forks every session's first process.

Each session's first process makes its sandbox, or at least what keeps it apart from its
siblings, between fork and exec (``namespace.py``). That rules out vfork, and a fork of the
daemon copies its page tables: about 4 ms of the daemon's one thread at 90 MB resident, on
every create. The forker is a fresh interpreter that imports ``namespace.py`` and the standard
library, nothing else of the daemon's, so its forks cost a fraction of that, and the daemon's
thread only sends a request and reads an answer.

It speaks with the daemon alone, over one end of a ``SOCK_SEQPACKET`` socket pair the daemon
made, one datagram a message, each a pickle (the socket is the daemon's own, so nothing unpickled
comes from anyone else):

- the daemon's request: a ``Request``, the child's stdin, stdout and stderr beside it as
  descriptors;
- the answer: ``("started", pid)`` with a pidfd of the child beside it, or ``("failed", why)``;
  a child whose plan gives it a PID namespace of its own is that namespace's first process
  (``pidone.py``): as root the forker forks it straight into the namespace; as the owner its
  child forks it there and exits, the pid said is that one's, and the forker, a child
  subreaper, reaps it;
- ``("exited", pid, status)`` when a child it forked ends (a negative status: the signal that
  ended it), since the forker, not the daemon, is the one to reap it.

It runs until the daemon closes its end. Its children keep running when it ends: they are in
their sessions' scopes by then, or a create that will find them gone.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import os
import pickle
import selectors
import signal
import socket
from dataclasses import dataclass

from hostagent.daemon.host import enclosure, namespace, pidone

MESSAGE_MAX = 1 << 20  # a request: the argv, environment and plan of one session
EXEC_FAILED = 127  # the child's status when its program could not be executed (as sh's)
_PR_SET_CHILD_SUBREAPER = 36
_REPORT_MAX = 32  # a pid in decimal


@dataclass(frozen=True)
class Request:
    """One child to fork: what it execs, in which environment, from which directory, in
    which sandbox (None: none), or inside which session (a tmux client of the daemon's)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    plan: namespace.Plan | None
    inside: enclosure.Enclosure | None = None


def descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The descriptors that came with a message, in their order."""
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def serve(fd: int) -> None:
    """The forker's loop, on its end of the socket pair: fork what is asked, say how each
    child ended, and return once the daemon has closed its end."""
    sock = socket.socket(fileno=fd)
    if os.geteuid() != 0:
        # As the owner, a session's PID namespace's first process is its child's child (made
        # in the user namespace the child makes first): made the forker's to reap at once.
        namespace.libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is sock:
                message, ancillary, _, _ = sock.recvmsg(MESSAGE_MAX, socket.CMSG_SPACE(3 * 4))
                if not message:
                    return
                _fork(sock, pickle.loads(message), descriptors(ancillary))
            else:
                _drain(wake_read)
        _reap(sock)


def _fork(sock: socket.socket, request: Request, fds: list[int]) -> None:
    report = (-1, -1)
    try:
        if request.plan is not None and request.plan.own_pids:
            if os.geteuid() == 0:
                pid = _fork_first_process()
            else:
                report = os.pipe2(os.O_CLOEXEC)  # it forks into its PID namespace and exits
                pid = os.fork()
        else:
            pid = os.fork()
    except OSError as e:
        answer: tuple[object, ...] = ("failed", f"fork: {e.strerror}")
        sock.sendmsg([pickle.dumps(answer)])
    else:
        if pid == 0:
            _child(request, fds if report[1] < 0 else [*fds, report[1]])  # never returns
        if report[0] >= 0:
            os.close(report[1])
            report = (report[0], -1)
            pid = _first_process(pid, report[0])
        # Its own group before the answer, as the child makes it too: whichever comes first.
        with contextlib.suppress(OSError):  # EACCES: it has already exec'd, in its group
            os.setpgid(pid, pid)
        pidfd = os.pidfd_open(pid)
        try:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pidfd]))]
            sock.sendmsg([pickle.dumps(("started", pid))], rights)
        finally:
            os.close(pidfd)
    finally:
        for fd in (*fds, *(r for r in report if r >= 0)):
            os.close(fd)


def _fork_first_process() -> int:
    """fork() into a new PID namespace, the child its first process: as root, the forker makes
    the namespace for its next child itself and takes its own back for the ones after, so no
    child of its forks another and exits on the way (a few milliseconds on every create)."""
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if namespace.libc.unshare(namespace.CLONE_NEWPID) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"unshare(CLONE_NEWPID): {os.strerror(error)}")
        try:
            return os.fork()
        finally:
            if os.getpid() != 1 and namespace.libc.setns(own, namespace.CLONE_NEWPID) != 0:
                error = ctypes.get_errno()  # the forker's next children would share this one
                os.write(2, f"hostagent forker: setns: {os.strerror(error)}\n".encode())
                os._exit(1)
    finally:
        os.close(own)


def _first_process(child: int, report: int) -> int:
    """The pid of the process the child forked to go on in a PID namespace, as the child says
    it (in one write, so one read has it all); the child's own when it said none (it failed
    first, and its status says so). The child's exit is not waited for (its memory is freed
    before its end of the pipe closes): it gives its own child to the forker, a subreaper, and
    is reaped with the rest."""
    said = os.read(report, _REPORT_MAX)
    return int(said) if said.isdigit() else child


def _child(request: Request, fds: list[int]) -> None:
    """In the forked child: its own process group, its three descriptors and no others, the
    signals as a new program expects them, its sandbox, then its program."""
    try:
        signal.set_wakeup_fd(-1)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        for signum in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        os.setpgid(0, 0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(len(fds), os.sysconf("SC_OPEN_MAX"))
        os.chdir(request.cwd)
        if request.plan is not None:
            namespace.preexec(request.plan, report=3)()
            if request.plan.own_pids:  # here in the namespace's first process alone
                pidone.serve(request.argv, request.env, EXEC_FAILED)
        argv = request.argv
        if request.inside is not None:
            reached = enclosure.enter(request.inside)
            argv = enclosure.named(argv, request.inside.socket, reached)
        os.execvpe(argv[0], argv, request.env)
    except BaseException as e:  # nothing may return into the forker's loop
        message = f"hostagent: cannot start {request.argv[0]}: {e}\n"
        os.write(2, message.encode(errors="replace"))
    os._exit(EXEC_FAILED)


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 512):
            pass


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.sendmsg([pickle.dumps(("exited", pid, os.waitstatus_to_exitcode(status)))])
