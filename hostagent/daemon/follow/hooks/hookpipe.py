"""The fast way for an agent's hook to report: one line into a FIFO the daemon already reads.

A hook that starts ``hostagentctl hook`` makes the agent wait for a Python start and a bus round
trip (tens of milliseconds) around every tool call. Instead, the hooks settings file runs a few
lines of ``/bin/sh`` built-ins that pick the fields hostagent needs out of the hook's JSON and
write them as one line to ``hooks.fifo`` in the owner's 0700 runtime directory:

    NAME <tab> TOKEN <tab> EVENT <tab> SESSION_ID <tab> SOURCE <tab> NOTIFICATION_TYPE

Only the owner's processes can reach that directory, and each line must carry the session's
secret token, which only the session's own processes receive (in their environment). The hook
opens the FIFO read-write, so it never blocks: with the daemon down, the line is dropped when the
hook exits. With the FIFO gone (a cleanup of /run, the owner's rm), the hook takes the slow way,
``hostagentctl hook`` over the bus, and the daemon makes the FIFO again when it hears from it.
One FIFO per owner, read on the daemon's event loop; lines are short, so each write is atomic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from hostagent.daemon.follow.hooks.hookflow import refill
from hostagent.daemon.host.runtimedir import make_room
from hostagent.daemon.state.paths import hooks_fifo
from hostagent.identity import Owner

log = logging.getLogger(__name__)

MAX_LINE = 1024
# A read's worth is handled in one go on the loop; a page (some fifty lines) leaves a bus call
# that arrives meanwhile waiting no longer than that, where 64 KiB made it wait for 800 lines.
READ_SIZE = 4096
FIELDS = 6
LINES_PER_SECOND = 500.0  # an owner's lines read a second, on average, and the burst

# $1 the FIFO, $2 the daemon's bus (--system or --user), $3 the session, $4 the event; the
# hook's JSON on stdin. Built-ins only, but for the slow way when the FIFO is gone.
SCRIPT = (
    'p=; while IFS= read -r l || [ -n "$l" ]; do p="$p$l "; done; '
    'g() { v=; case $p in *"\\"$1\\""*) v=${p#*"\\"$1\\""}; v=${v#*\\"}; v=${v%%\\"*};; esac; }; '
    "g session_id; s=$v; g source; o=$v; g notification_type; n=$v; "
    '[ -p "$1" ] || { printf \'{"session_id":"%s","source":"%s","notification_type":"%s"}\' '
    '"$s" "$o" "$n" | hostagentctl "$2" hook "$4" >/dev/null 2>&1; exit 0; }; exec 3<>"$1"; '
    'printf \'%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n\' "$3" "$HOSTAGENT_HOOK_TOKEN" "$4" '
    '"$s" "$o" "$n" >&3; exit 0'
)

Report = Callable[[int, list[str]], None]  # (owner uid, the line's fields)


def hook_command(runtime_dir: Path, name: str, system: bool) -> list[str]:
    """The hook command for session name, before the event name the settings add."""
    bus = "--system" if system else "--user"
    return ["/bin/sh", "-c", SCRIPT, "hostagent-hook", str(hooks_fifo(runtime_dir)), bus, name]


class HookPipe:
    """One owner's hooks FIFO, read on the event loop."""

    def __init__(self, owner: Owner, runtime_dir: Path, on_line: Report) -> None:
        self.owner = owner
        self.path = hooks_fifo(runtime_dir)
        self.on_line = on_line
        self._fd = -1
        self._partial = b""
        self._allowance = LINES_PER_SECOND  # lines that may be read before a pause
        self._counted_at = 0.0  # the loop's time when the allowance was last brought up
        self._resume: asyncio.TimerHandle | None = None

    def open(self) -> None:
        """Make the FIFO (again, if anything else is in its place) and start reading it."""
        make_room(self.path, keep_fifo=True)
        with contextlib.suppress(FileExistsError):
            os.mkfifo(self.path, 0o600)
        fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{self.path} is not a FIFO")
        if os.geteuid() != self.owner.uid:
            os.fchown(fd, self.owner.uid, self.owner.gid)
        os.fchmod(fd, 0o600)
        self._fd = fd
        asyncio.get_running_loop().add_reader(fd, self._on_readable)

    def intact(self) -> bool:
        """Whether the FIFO being read is still the one at its path: removed (a cleanup of
        /run, the owner's rm) or replaced, hooks could no longer reach it."""
        if self._fd < 0:
            return False
        try:
            held, there = os.fstat(self._fd), os.lstat(self.path)
        except OSError:
            return False
        return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)

    def close(self) -> None:
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        if self._fd >= 0:
            asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self._fd, READ_SIZE)
        except BlockingIOError:
            return
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE:
            self._partial = b""  # no hook writes that much: garbage, dropped
        for raw in lines:
            fields = raw.decode(errors="replace").split("\t")
            if len(raw) <= MAX_LINE and len(fields) == FIELDS:
                self.on_line(self.owner.uid, fields)
        self._count(len(lines))

    @property
    def paused(self) -> bool:
        return self._resume is not None

    def _count(self, lines: int) -> None:
        """Take lines off the allowance; past it, stop reading until it is back above 0."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        elapsed = now - self._counted_at
        allowance = refill(self._allowance, elapsed, LINES_PER_SECOND, LINES_PER_SECOND)
        self._allowance, self._counted_at = allowance - lines, now
        if self._allowance < 0:
            loop.remove_reader(self._fd)
            self._resume = loop.call_later(-self._allowance / LINES_PER_SECOND, self._go_on)

    def _go_on(self) -> None:
        self._resume = None
        if self._fd >= 0:
            asyncio.get_running_loop().add_reader(self._fd, self._on_readable)
