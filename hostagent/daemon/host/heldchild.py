"""Starting a session's tmux server as a held child, so it is in its scope before it runs.

The child is a tiny shell shim that, already running as the owner, changes into the session's
cwd and blocks reading a pipe on its stdin. The daemon moves it into a new scope, waits for
systemd's job to finish, and only then writes to the pipe: the shim execs tmux, and every
process of the session starts inside the scope. Closing the pipe without a word makes the shim
exit instead.

A shim whose session has a sandbox, or is kept apart from its siblings, is forked by the
daemon's forker (``forker.py``), which makes that sandbox between its fork and the exec; one
with nothing to make between them is started with subprocess.Popen, which uses vfork. A
session with a PID namespace of its own is held by that namespace's first process instead
(``pidone.py``), which runs the shim once released, says how it ended and goes on running. Either is
followed on the event loop (its pipes and a pidfd) rather than through asyncio's subprocess
transports: it is on every create's path, and the transports' setup (a protocol, a transport
per pipe, the child watcher, the steps between them) cost more than the shim's own start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess

from hostagent.daemon.host import namespace, pidone
from hostagent.daemon.host.forker import EXEC_FAILED, Request
from hostagent.daemon.host.forking import Forked, Forker, settle
from hostagent.daemon.host.owner import HELD_EXEC, SHIM_CANCELLED, as_owner
from hostagent.identity import Owner

# $1 cwd, then the command.
_SHIM = 'cd -- "$1" || exit 125; shift; ' + HELD_EXEC
# tmux prints two pids or a line of error: past this much the rest is dropped, so a shim its
# owner replaced with something chatty cannot grow the daemon.
OUTPUT_MAX = 64 * 1024
EXIT_GRACE = 0.5  # for a child whose scope failed to say whether it is gone


class HeldChild:
    """The shim, running as owner, blocked until released."""

    def __init__(
        self, proc: subprocess.Popen[bytes] | Forked, write_fd: int, init: bool = False
    ) -> None:
        self._proc = proc
        self._write_fd = write_fd
        self._init = init  # proc is a PID namespace's first process, which outlives the shim

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """Its exit status once it has exited (negative: the signal that ended it), else None."""
        return self._proc.poll()

    @classmethod
    async def start(
        cls,
        forker: Forker,
        owner: Owner,
        cwd: str,
        env: dict[str, str],
        argv: list[str],
        sandbox: namespace.Plan | None = None,
    ) -> HeldChild:
        """The shim started and held; with sandbox, in that sandbox (made as root in the forked
        child, before setpriv drops it to the owner)."""
        read_fd, write_fd = os.pipe()
        try:
            shim = as_owner(owner, ["/bin/sh", "-c", _SHIM, "hostagent-shim", cwd, *argv])
            proc: subprocess.Popen[bytes] | Forked
            if sandbox is not None:  # made by the forker's child, as root, before setpriv
                proc = await forker.fork(Request(shim, env, "/", sandbox), read_fd)
            else:
                proc = subprocess.Popen(
                    shim,
                    cwd="/",
                    env=env,
                    process_group=0,
                    stdin=read_fd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(proc, write_fd, init=sandbox is not None and sandbox.own_pids)

    async def wait(self) -> int:
        """Its exit status, once it has exited."""
        if isinstance(self._proc, Forked):
            return await self._proc.wait()
        if self._proc.poll() is None:
            loop = asyncio.get_running_loop()
            exited: asyncio.Future[None] = loop.create_future()
            pidfd = os.pidfd_open(self._proc.pid)  # an unreaped child keeps its pid
            loop.add_reader(pidfd, settle, exited)
            try:
                await exited
            finally:
                loop.remove_reader(pidfd)
                os.close(pidfd)
        return self._proc.wait()

    async def why_gone(self) -> str:
        """Why systemd could not start a scope around it, as far as it tells: a child that is
        gone was not there to be moved (its status says who ended it)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.wait()), EXIT_GRACE)
        code = self.returncode
        if code is None:
            return "its first process still runs"
        if code < 0:
            return f"its first process was killed by signal {-code}"
        if code == SHIM_CANCELLED:
            return "its first process saw its start cancelled"
        if code in (namespace.FAILED, EXEC_FAILED):
            return self.said() or "its sandbox could not be made"
        return f"its first process exited with status {code}"

    def said(self) -> str:
        """What an exited child wrote to its stderr (a sandbox's failure), without waiting."""
        assert self._proc.stderr is not None
        os.set_blocking(self._proc.stderr.fileno(), False)
        try:
            data = os.read(self._proc.stderr.fileno(), OUTPUT_MAX)
        except OSError:
            return ""
        return data.decode(errors="replace").strip()

    async def release(self, timeout: float) -> tuple[int, str, str]:
        """Let it exec; its exit code, stdout and stderr (tmux's client exits once the server
        runs). TimeoutError when it has not ended within timeout (its owner may have stopped
        it), and then the caller aborts it."""
        # The shim may already have exited (it could not enter the cwd); its status says why.
        with contextlib.suppress(BrokenPipeError):
            os.write(self._write_fd, b"go\n")
        os.close(self._write_fd)
        self._write_fd = -1
        async with asyncio.timeout(timeout):
            out, err = await _read_to_end(self._proc)
            # A PID namespace's first process says the shim's status and goes on running.
            out, told = pidone.split_status(out) if self._init else (out, None)
            code = told if told is not None else await self.wait()
        if told is not None and isinstance(self._proc, Forked):
            self._proc.forget()
        return code, out.decode(errors="replace").strip(), err.decode(errors="replace").strip()

    async def abort(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            # Bounded: a child stuck in the kernel must not hold the create for ever.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wait(), 5)
        _close_pipes(self._proc)


async def _read_to_end(proc: subprocess.Popen[bytes] | Forked) -> tuple[bytes, bytes]:
    """Everything proc writes to its stdout and stderr until both are closed (up to
    OUTPUT_MAX of each); the pipes are closed then, or when the wait is cancelled."""
    assert proc.stdout is not None and proc.stderr is not None
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    output = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    still_open = set(output)

    def readable(fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            buffer = output[fd]
            buffer += data[: max(0, OUTPUT_MAX - len(buffer))]
            return
        loop.remove_reader(fd)
        still_open.discard(fd)
        if not still_open:
            settle(done)

    for fd in output:
        os.set_blocking(fd, False)
        loop.add_reader(fd, readable, fd)
    try:
        await done
    finally:
        for fd in still_open:
            loop.remove_reader(fd)
        _close_pipes(proc)
    out, err = output.values()
    return bytes(out), bytes(err)


def _close_pipes(proc: subprocess.Popen[bytes] | Forked) -> None:
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
