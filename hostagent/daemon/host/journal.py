"""The daemon's journal lines about one session, read for a caller who may not read the journal.

The system daemon's lines belong to a system service, and journalctl shows an unprivileged
user none of them; its owner is still owed the lines about her own sessions. So the daemon runs
journalctl as itself and hands the caller the read end of a pipe. The lines are those that
name the session since it was created: a name used before by someone else shows nothing of
theirs. A follower that quits leaves nothing behind: journalctl --follow ends once no reader is
left on its standard output, whether or not a line comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Callable

from hostagent.errors import LimitsExceeded, SpawnFailed
from hostagent.log import journal_argv

MAX_READERS = 64  # journalctl processes at once, for all callers together
MAX_READERS_PER_USER = 4  # so that one user's follows leave room for everyone else's
MAX_LINES = 10_000  # the most lines one call shows before following
JOURNALCTL_ENV = {"PATH": "/usr/bin:/bin", "SYSTEMD_COLORS": "0", "LANG": "C.UTF-8"}


class JournalReaders:
    """The journalctl processes that write to callers' pipes, bounded in number."""

    def __init__(
        self, system: bool, command: Callable[[str, bool, int, bool, int], list[str]] | None = None
    ) -> None:
        """command: the reader's command line for (name, system, lines, follow, since_usec);
        journalctl's (journal_argv) unless given."""
        self.system = system
        self.command = command or journal_argv
        self._running: dict[asyncio.Task[None], int] = {}  # each reader's caller uid

    async def open(self, uid: int, name: str, since_usec: int, lines: int, follow: bool) -> int:
        """The read end of a pipe journalctl writes the lines to, for the caller uid; the
        caller closes it."""
        if sum(1 for u in self._running.values() if u == uid) >= MAX_READERS_PER_USER:
            raise LimitsExceeded(
                f"You have {MAX_READERS_PER_USER} journal readers open already; end one "
                "(a 'logs -f') and try again."
            )
        if len(self._running) >= MAX_READERS:
            raise LimitsExceeded(
                f"{MAX_READERS} journal readers are open already; try again later."
            )
        argv = self.command(name, self.system, min(lines, MAX_LINES), follow, since_usec)
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=subprocess.DEVNULL,
                env=JOURNALCTL_ENV,
            )
        except OSError as e:
            os.close(read_end)
            raise SpawnFailed(f"Failed to run journalctl: {e.strerror}") from None
        finally:
            os.close(write_end)  # journalctl's own copy is the only one: its exit ends the pipe
        task = asyncio.get_running_loop().create_task(self._serve(proc))
        self._running[task] = uid
        task.add_done_callback(lambda done: self._running.pop(done, None))
        return read_end

    @staticmethod
    async def _serve(proc: asyncio.subprocess.Process) -> None:
        try:
            await proc.wait()
        finally:
            if proc.returncode is None:  # the daemon stops
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


async def follow(argv: list[str], max_line: int) -> AsyncIterator[bytes]:
    """The lines journalctl (argv) writes, for the daemon itself, as they come; journalctl is
    ended when the caller stops reading. A line longer than max_line ends the follow."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=JOURNALCTL_ENV,
        limit=max_line,
    )
    assert proc.stdout is not None
    try:
        while line := await proc.stdout.readline():
            yield line
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
