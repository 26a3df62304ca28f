"""``hostagentctl watch``: a live full-screen table of sessions, redrawn when the bus says
something changed (``follow.Follower``), with keys to attach to, stop or resume the selected
one. Its status line tells whether the daemon is there, being read again, or came back as a
new version."""

from __future__ import annotations

import asyncio
import contextlib
import curses
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from hostagent.cli.ctl_output import human_bytes, human_nsec, human_span, user_name
from hostagent.client.follow import Follower, Link, SessionView
from hostagent.client.library import Client
from hostagent.errors import HostAgentError

COUNTER_INTERVAL = 5.0  # seconds between reads of memory and CPU, which nothing signals
HEADER = ("NAME", "OWNER", "PRESET", "STATE", "ACTIVITY", "MEMORY", "CPU", "AGE", "BRANCH")
KEYS = "↑↓ select  a/⏎ attach  s stop (then y)  r resume  q quit"


def rows(sessions: list[SessionView], now: float) -> list[tuple[str, ...]]:
    return [
        (
            s.name,
            user_name(s.owner),
            s.preset,
            s.state,
            s.activity,
            human_bytes(s.memory),
            human_nsec(s.cpu_nsec),
            human_span(s.age(now)) if s.state == "running" else "-",
            s.branch or "-",
        )
        for s in sessions
    ]


def status_line(f: Follower) -> str:
    if f.link is Link.GONE:
        return "daemon gone: waiting for it to come back"
    if f.link is Link.RECONNECTING:
        return "reconnecting…"
    if f.updated_from:
        return f"connected · daemon updated to {f.version} (was {f.updated_from})"
    return f"connected · hostagent {f.version}"


class Screen:
    def __init__(self, win: Any, follower: Follower, ctl: list[str]) -> None:
        self.win = win
        self.f = follower
        self.ctl = ctl  # the hostagentctl command line that keys run, bus option included
        self.selected = 0
        self.message = ""
        self.confirming: tuple[str, str] | None = None  # a stop waiting for its y

    def ordered(self) -> list[SessionView]:
        return sorted(self.f.sessions.values(), key=lambda s: s.name)

    def draw(self) -> None:
        win = self.win
        win.erase()
        height, width = win.getmaxyx()
        sessions = self.ordered()
        self.selected = max(0, min(self.selected, len(sessions) - 1))
        table = [HEADER, *rows(sessions, time.time())]
        widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]

        def line(cells: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))[: width - 1]

        title = f"hostagent · {len(sessions)} session{'s' if len(sessions) != 1 else ''}"
        win.addnstr(0, 0, title, width - 1, curses.A_BOLD)
        win.addnstr(2, 0, line(HEADER), width - 1, curses.A_UNDERLINE)
        for i, cells in enumerate(table[1:]):
            if 3 + i >= height - 2:
                break
            attr = curses.A_REVERSE if i == self.selected else curses.A_NORMAL
            win.addnstr(3 + i, 0, line(cells), width - 1, attr)
        status = status_line(self.f) + (f" · {self.message}" if self.message else "")
        win.addnstr(height - 2, 0, status, width - 1, curses.A_BOLD)
        win.addnstr(height - 1, 0, KEYS, width - 1)
        win.refresh()

    def key(self, ch: int) -> str | None:
        """Act on a key; "quit", "attach NAME", or None."""
        sessions = self.ordered()
        current = sessions[self.selected].name if sessions else None
        if self.confirming is not None:
            # A stop ends an agent's work: it waits for a y, and any other key keeps it running.
            verb, name = self.confirming
            self.confirming = None
            if ch in (ord("y"), ord("Y")):
                self._run(verb, name)
            else:
                self.message = f"{verb} {name}: not done"
            return None
        if ch in (ord("q"), 27):
            return "quit"
        if ch in (curses.KEY_UP, ord("k")):
            self.selected -= 1
        elif ch in (curses.KEY_DOWN, ord("j")):
            self.selected += 1
        elif current and ch in (ord("a"), 10, 13, curses.KEY_ENTER):
            return f"attach {current}"
        elif current and ch == ord("s"):
            self.confirming = ("stop", current)
            self.message = f"stop {current}? (y/n)"
        elif current and ch == ord("r"):
            self._run("resume", current)
        return None

    def _run(self, verb: str, name: str) -> None:
        result = subprocess.run(
            [*self.ctl, verb, name], capture_output=True, text=True, check=False
        )
        self.message = (result.stderr.strip() or f"{verb} {name}: done").splitlines()[-1]


async def run(connect: Callable[[], Any], ctl: list[str]) -> int:
    """The watch loop on a curses screen; returns the exit code."""
    win = curses.initscr()
    curses.noecho()
    curses.cbreak()
    win.keypad(True)
    win.nodelay(True)
    with contextlib.suppress(curses.error):
        curses.curs_set(0)
    loop = asyncio.get_running_loop()
    redraw = asyncio.Event()
    follower = Follower(connect, redraw.set)
    screen = Screen(win, follower, ctl)
    keys: asyncio.Queue[int] = asyncio.Queue()

    def on_input() -> None:
        while (ch := win.getch()) != -1:
            keys.put_nowait(ch)

    loop.add_reader(sys.stdin.fileno(), on_input)
    try:
        await follower.start()
        next_counters = 0.0
        counters: asyncio.Task[None] | None = None
        while True:
            screen.draw()
            redraw.clear()
            if loop.time() >= next_counters:
                next_counters = loop.time() + COUNTER_INTERVAL
                if counters is None or counters.done():
                    counters = loop.create_task(follower.refresh_counters())
            waiters = [asyncio.ensure_future(redraw.wait()), asyncio.ensure_future(keys.get())]
            done, pending = await asyncio.wait(
                waiters, timeout=COUNTER_INTERVAL, return_when=asyncio.FIRST_COMPLETED
            )
            for p in pending:
                p.cancel()
            if waiters[1] in done:
                action = screen.key(waiters[1].result())
                if action == "quit":
                    return 0
                if action and action.startswith("attach "):
                    curses.endwin()
                    subprocess.run([*ctl, "attach", action.split(" ", 1)[1]], check=False)
                    win.refresh()
    except HostAgentError as e:
        curses.endwin()
        print(f"hostagentctl watch: {e.message}", file=sys.stderr)
        return 1
    finally:
        loop.remove_reader(sys.stdin.fileno())
        follower.close()
        curses.endwin()


def ctl_command(system: bool, host: str | None, machine: str | None) -> list[str]:
    exe = sys.argv[0] if os.path.basename(sys.argv[0]) == "hostagentctl" else "hostagentctl"
    where = ["-H", host] if host else ["-M", machine] if machine else []
    return [exe, *where, "--system" if system else "--user"]


async def watch(system: bool, address: str | None, host: str | None, machine: str | None) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(
            "hostagentctl watch needs a terminal; 'hostagentctl list' (or --json) prints once.",
            file=sys.stderr,
        )
        return 1

    async def connect() -> Client:
        return await Client.connect(system, address, host, machine)

    return await run(connect, ctl_command(system, host, machine))
