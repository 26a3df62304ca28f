"""Starting a session's tmux server as a held child, so it is in its scope before it runs.

The child is a tiny shell shim that, already running as the owner, changes into the session's
cwd and blocks reading a pipe on its stdin. The daemon moves it into a new scope, waits for
systemd's job to finish, and only then writes to the pipe: the shim execs tmux, and every
process of the session starts inside the scope. Closing the pipe without a word makes the shim
exit instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from hostagent.daemon.host.owner import HELD_EXEC, as_owner
from hostagent.identity import Owner

# $1 cwd, then the command.
_SHIM = 'cd -- "$1" || exit 125; shift; ' + HELD_EXEC


class HeldChild:
    """The shim, running as owner, blocked until released."""

    def __init__(self, proc: asyncio.subprocess.Process, write_fd: int) -> None:
        self.proc = proc
        self._write_fd = write_fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    async def start(cls, owner: Owner, cwd: str, env: dict[str, str], argv: list[str]) -> HeldChild:
        read_fd, write_fd = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                _SHIM,
                "hostagent-shim",
                cwd,
                *argv,
                cwd="/",
                env=env,
                process_group=0,
                stdin=read_fd,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                **as_owner(owner),  # type: ignore[arg-type]
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(proc, write_fd)

    async def release(self, timeout: float) -> tuple[int, str, str]:
        """Let it exec; its exit code, stdout and stderr (tmux's client exits once the server
        runs). TimeoutError when it has not ended within timeout (its owner may have stopped
        it), and then the caller aborts it."""
        # The shim may already have exited (it could not enter the cwd); its status says why.
        with contextlib.suppress(BrokenPipeError):
            os.write(self._write_fd, b"go\n")
        os.close(self._write_fd)
        self._write_fd = -1
        out, err = await asyncio.wait_for(self.proc.communicate(), timeout)
        return (
            self.proc.returncode or 0,
            out.decode(errors="replace").strip(),
            err.decode(errors="replace").strip(),
        )

    async def abort(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            # Bounded: asyncio's wait() also waits for the pipes, which a process the child
            # started may still hold.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 5)
