"""The daemon's side of its forker (``forker.py``): the forker started when first needed and
again after it ends, a request sent and its answer read on the event loop, and each child it
forked followed as the held child needs it (``Forked``: pid, pipes, a pidfd, an exit status).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
from pathlib import Path

import hostagent
from hostagent.daemon.host.forker import MESSAGE_MAX, Request, descriptors

UNKNOWN_EXIT = 255  # the status of a forked child whose forker ended before it did
TOLD_WITHIN = 0.5  # after a child is gone, the forker's word of its status comes by then


class Forked:
    """A child the forker forked, as the held child uses it: its pid, its pipes, a pidfd to
    signal it by, and its exit status, which the forker reaps and tells."""

    def __init__(
        self, pid: int, pidfd: int, exited: asyncio.Future[int], stdout: int, stderr: int
    ) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._exited = exited
        self.stdout = open(stdout, "rb", buffering=0)  # noqa: SIM115  # closed by the held child
        self.stderr = open(stderr, "rb", buffering=0)  # noqa: SIM115

    def poll(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    def kill(self) -> None:
        if self._pidfd < 0:
            raise ProcessLookupError(self.pid)
        signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def forget(self) -> None:
        """Follow it no more (a PID namespace's first process, which lives as long as its
        session, followed from then on as the session's own): its pidfd closed."""
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    async def wait(self) -> int:
        """Its exit status, once it has exited: as the forker tells it, or UNKNOWN_EXIT if the
        forker ended before it could (the pidfd still says when the child is gone)."""
        if not self._exited.done() and self._pidfd >= 0:
            loop = asyncio.get_running_loop()
            settled: asyncio.Future[None] = loop.create_future()  # told, or the pidfd says gone
            self._exited.add_done_callback(lambda _: settle(settled))
            loop.add_reader(self._pidfd, settle, settled)
            try:
                await settled
            finally:
                loop.remove_reader(self._pidfd)
            if not self._exited.done():  # gone: the forker's word follows at once, if it runs
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._exited), TOLD_WITHIN)
        if self._pidfd >= 0 and self._exited.done():
            os.close(self._pidfd)
            self._pidfd = -1
        return self._exited.result() if self._exited.done() else UNKNOWN_EXIT


class Forker:
    """The daemon's side of its forker (forker.py): started at the first fork asked of it, and
    again after it has ended; one request in flight at a time."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = asyncio.Lock()
        self._answer: asyncio.Future[tuple[tuple[object, ...], list[int]]] | None = None
        self._exits: dict[int, asyncio.Future[int]] = {}

    async def fork(self, request: Request, stdin: int, stdout: int = -1) -> Forked:
        """The child forked with stdin, and pipes of its own for stdout (unless given one) and
        stderr; OSError when the forker cannot fork it."""
        out_read, out_write = os.pipe()  # at its end at once, when the child is given stdout
        err_read, err_write = os.pipe()
        try:
            async with self._lock:
                sock = self._sock or self._start()
                self._answer = asyncio.get_running_loop().create_future()
                pipes = array.array("i", [stdin, out_write if stdout < 0 else stdout, err_write])
                rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, pipes)]
                data = pickle.dumps(request)
                if len(data) > MESSAGE_MAX:
                    raise OSError(f"a request of {len(data)} bytes is over the forker's limit")
                try:
                    await _send(sock, data, rights)
                except OSError:  # the forker is gone, and its end of file not yet read
                    self._ended()
                    raise
                answer, fds = await self._answer
        except BaseException:
            os.close(out_read)
            os.close(err_read)
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        if answer[0] != "started" or not fds:
            for fd in (out_read, err_read, *fds):
                os.close(fd)
            raise OSError(f"the forker could not start the session: {answer[-1]}")
        pid = int(answer[1])  # type: ignore[call-overload]
        return Forked(pid, fds[0], answer[2], out_read, err_read)  # type: ignore[arg-type]

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            root = str(Path(hostagent.__file__).resolve().parent.parent)
            code = "import sys; sys.path.insert(0, sys.argv[1]); " + _SERVE
            self._process = subprocess.Popen(
                [sys.executable, "-S", "-c", code, root, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        ours.setblocking(False)
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable)
        self._sock = ours
        return ours

    def _readable(self) -> None:
        assert self._sock is not None
        while True:
            try:
                message, ancillary, _, _ = self._sock.recvmsg(4096, socket.CMSG_SPACE(4))
            except BlockingIOError:
                return
            except OSError:
                message, ancillary = b"", []
            fds = descriptors(ancillary)
            if not message:
                self._ended()
                return
            answer = pickle.loads(message)
            if answer[0] == "exited":
                exited = self._exits.pop(answer[1], None)
                if exited is not None and not exited.done():
                    exited.set_result(answer[2])
                continue
            if answer[0] == "started":  # its exit follows on this socket, never before
                # The future goes with the answer: a child that ends at once is told exited in
                # this same read, before fork() has resumed to look its future up.
                exited = self._exits[answer[1]] = asyncio.get_running_loop().create_future()
                answer = (*answer, exited)
            if self._answer is not None and not self._answer.done():
                self._answer.set_result((answer, fds))
            else:
                for fd in fds:
                    os.close(fd)

    def close(self) -> None:
        """End the forker (the daemon's end of the socket closed), and reap it."""
        if self._sock is not None:
            self._ended()

    def _ended(self) -> None:
        """The forker is gone: a request waiting fails, and the next starts a new one. The
        children it forked are init's now; each one's pidfd still says when it ends."""
        assert self._sock is not None
        asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=1)
            self._process = None
        if self._answer is not None and not self._answer.done():
            self._answer.set_result((("failed", "the forker ended"), []))
        self._exits.clear()


_SERVE = "from hostagent.daemon.host.forker import serve; serve(int(sys.argv[2]))"


async def _send(
    sock: socket.socket, data: bytes, rights: list[tuple[int, int, array.array[int]]]
) -> None:
    """One datagram, with descriptors, on a non-blocking socket: waits while it is full."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            sock.sendmsg([data], rights)
            return
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock.fileno(), settle, writable)
            try:
                await writable
            finally:
                loop.remove_writer(sock.fileno())


def settle(future: asyncio.Future[None]) -> None:
    """Resolve future, unless it already is (a reader or callback may fire twice)."""
    if not future.done():
        future.set_result(None)
