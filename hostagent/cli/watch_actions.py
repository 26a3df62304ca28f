"""How ``hostagentctl watch`` runs what a key asks for (hostagentctl stop, resume, new, ...).

An action never holds watch's loop: it runs in the background, and its outcome comes back to
the status line. One that polkit may want a password for (a session of someone else's, for a
user at a terminal) cannot be asked for under curses: pkttyagent would draw its prompt over the
table, and the keys typed would reach watch. So watch hands the terminal over, as systemctl
would ask: it leaves the curses screen, runs hostagentctl there, where pkttyagent asks, and
comes back. A Ctrl-C at the prompt cancels the action, not watch.
"""

from __future__ import annotations

import asyncio
import curses
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence

CANCELLED = 130  # hostagentctl's exit status on Ctrl-C


def outcome(args: Sequence[str], code: int, stdout: str, stderr: str) -> str:
    """The status line's words for a finished action."""
    if code == CANCELLED:
        return f"{args[0]} {args[-1]}: cancelled"
    lines = stderr.strip().splitlines()
    if code != 0 or lines:
        return lines[-1] if lines else f"{args[0]} {args[-1]}: failed (exit status {code})"
    what = {
        "new": f"new {stdout.strip()}",
        "send": f"typed into {args[1]}",
        "answer": f"answer {args[1]}",
    }
    return f"{what.get(args[0], f'{args[0]} {args[-1]}')}: done"


class Actions:
    """Runs hostagentctl (ctl, with its bus options) for watch; done(message) gets each
    outcome, on watch's loop."""

    def __init__(self, ctl: list[str], done: Callable[[str], None]) -> None:
        self.ctl = ctl
        self.done = done
        self._running: set[asyncio.Task[None]] = set()

    def in_background(self, args: Sequence[str]) -> None:
        """Run without the terminal and without asking for a password."""
        task = asyncio.get_running_loop().create_task(self._background(args))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _background(self, args: Sequence[str]) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.ctl,
            "--no-ask-password",
            *args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await proc.communicate()
        self.done(outcome(args, proc.returncode or 0, out.decode(), err.decode()))

    async def on_terminal(self, win: curses.window, args: Sequence[str]) -> None:
        """Leave curses, run on the terminal (pkttyagent asks there), come back. The caller
        stops reading keys meanwhile: they are the password's."""
        loop = asyncio.get_running_loop()
        curses.endwin()
        print(f"hostagentctl {shlex.join(args)}", flush=True)
        before = signal.getsignal(signal.SIGINT)
        # Ctrl-C is the action's (hostagentctl ends with 130), not watch's.
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.ctl, *args, stdin=sys.stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            out, err = await proc.communicate()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, before)
            win.clearok(True)  # what was printed meanwhile is not curses' to know
            win.refresh()
        self.done(outcome(args, proc.returncode or 0, out.decode(), err.decode()))

    def cancel(self) -> None:
        for task in self._running:
            task.cancel()
