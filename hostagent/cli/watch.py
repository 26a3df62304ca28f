"""``hostagentctl watch``: a live full-screen table of sessions, redrawn when the bus says
something changed (``follow.Follower``), with the selected session's screen below it, each
activity in a colour of its own (none with NO_COLOR), and keys (``watch_keys``) to attach,
create, type, filter, stop, kill, remove or resume. Its status line tells whether the daemon is
there, being read again, or came back as a new version."""

from __future__ import annotations

import asyncio
import contextlib
import curses
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from hostagent.cli.ctl_list import as_tree
from hostagent.cli.polkitagent import wanted
from hostagent.cli.watch_actions import Actions
from hostagent.cli.watch_keys import (
    ACTIVITY_COLOURS,
    ACTIVITY_COLUMN,
    FLEET_HEADER,
    HEADER,
    KEYS,
    Key,
    Keys,
    matches,
    rows,
)
from hostagent.client.fleet import Host
from hostagent.client.fleet_follow import FleetFollower
from hostagent.client.follow import Follower, Link, SessionView
from hostagent.client.library import Client
from hostagent.errors import HostAgentError

COUNTER_INTERVAL = 5.0  # seconds between reads of memory and CPU, which nothing signals
PREVIEW_LINES = 200  # of the selected session's screen asked for; the pane shows what fits


def status_line(f: Follower | FleetFollower) -> str:
    if isinstance(f, FleetFollower):
        return f.status_line()
    if f.link is Link.GONE:
        return "daemon gone: waiting for it to come back"
    if f.link is Link.RECONNECTING:
        return "reconnecting…"
    if f.updated_from:
        return f"connected · daemon updated to {f.version} (was {f.updated_from})"
    return f"connected · hostagent {f.version}"


def _parent_key(s: SessionView) -> str:
    return f"{s.host}:{s.parent}" if s.host and s.parent else s.parent


def wants_colour(environ: Mapping[str, str] = os.environ) -> bool:
    """Colour unless NO_COLOR is set to anything (no-color.org); the terminal must have it too."""
    return not environ.get("NO_COLOR")


class Screen:
    def __init__(
        self, win: Any, follower: Follower | FleetFollower, ctl: list[str], colour: bool
    ) -> None:
        self.win = win
        self.f = follower
        self.fleet = isinstance(follower, FleetFollower)
        self.ctl = ctl  # the hostagentctl command line that keys run, bus option included
        self.keys = Keys(cwd=os.getcwd())
        self.colours: dict[str, int] = {}
        if colour:
            with contextlib.suppress(curses.error):
                curses.start_color()
                curses.use_default_colors()
                for i, (activity, colour_number) in enumerate(ACTIVITY_COLOURS.items(), 1):
                    curses.init_pair(i, colour_number, -1)
                    self.colours[activity] = curses.color_pair(i) | curses.A_BOLD
        self.preview: tuple[str, str] = ("", "")  # (session, its screen)
        self.depths: dict[str, int] = {}  # how far under another session each is shown

    def shown(self) -> list[SessionView]:
        """The sessions the table shows, each made from inside another under it."""
        ordered = sorted(self.f.sessions.values(), key=lambda s: (s.host, s.name))
        ordered = [s for s in ordered if matches(s, self.keys.filter)]
        ordered, depths = as_tree(ordered, lambda s: s.key, _parent_key)
        self.depths = {s.key: d for s, d in zip(ordered, depths, strict=True)}
        return ordered

    def owns(self, name: str) -> bool:
        """Whether this user owns session name ("" for a new one, hers): no password then."""
        session = self.f.sessions.get(name)
        return not name or session is None or session.owner == os.getuid()

    def selected(self) -> SessionView | None:
        sessions = self.shown()
        at = self.keys.clamp(len(sessions))
        return sessions[at] if at is not None else None

    def draw(self) -> None:
        win = self.win
        win.erase()
        height, width = win.getmaxyx()
        sessions = self.shown()
        self.keys.clamp(len(sessions))
        header = FLEET_HEADER if self.fleet else HEADER
        table = [header, *rows(sessions, time.time(), self.fleet, self.depths)]
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        activity_column = ACTIVITY_COLUMN + self.fleet
        activity_at = sum(w + 2 for w in widths[:activity_column])

        def line(cells: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))[: width - 1]

        def put(y: int, x: int, text: str, attr: int = curses.A_NORMAL) -> None:
            if 0 <= y < height and x < width - 1:
                with contextlib.suppress(curses.error):
                    win.addnstr(y, x, text, width - 1 - x, attr)

        listed = f"{len(sessions)} session{'s' if len(sessions) != 1 else ''}"
        where = f" matching '{self.keys.filter}'" if self.keys.filter else ""
        put(0, 0, f"hostagent · {listed}{where}", curses.A_BOLD)
        put(2, 0, line(header), curses.A_UNDERLINE)
        # The table takes what it needs, up to half the screen; the preview has the rest.
        table_rows = max(1, min(len(sessions), (height - 6) // 2))
        first = max(0, self.keys.selected - table_rows + 1)
        for y, i in enumerate(range(first, min(len(sessions), first + table_rows)), 3):
            cells = table[1 + i]
            put(y, 0, line(cells), curses.A_REVERSE if i == self.keys.selected else 0)
            colour = self.colours.get(sessions[i].activity)
            if colour is not None:
                put(y, activity_at, cells[activity_column], colour)
        self._draw_preview(put, 4 + table_rows, height - 3, width)
        status = status_line(self.f) + (f" · {self.keys.message}" if self.keys.message else "")
        current = self.selected()
        if current is not None and current.question.get("id"):
            count = int(current.question.get("count", 0))
            status += f" · {current.key} asks: {'1-' + str(count) if count > 1 else '1'} answers"
        put(height - 2, 0, status, curses.A_BOLD)
        put(height - 1, 0, self.keys.prompt_line() or KEYS)
        win.refresh()

    def _draw_preview(self, put: Callable[..., None], top: int, bottom: int, width: int) -> None:
        current = self.selected()
        if current is None or bottom - top < 2:
            return
        put(top, 0, f"── {current.key} " + "─" * max(0, width - len(current.key) - 5))
        name, screen = self.preview
        lines = screen.rstrip("\n").splitlines() if name == current.key else []
        room = bottom - top - 1
        for y, text in enumerate(lines[-room:], top + 1):
            put(y, 0, text)


Said = Callable[[str], None]


async def run(
    follow: Callable[[Callable[[], None], Said], Follower | FleetFollower],
    ctl: list[str],
    may_ask: bool = False,
) -> int:
    """The watch loop on a curses screen; returns the exit code. follow makes the follower
    that calls back on each change, given where a line for the status line goes (from any
    thread); may_ask: polkit may ask this user for a password (watch_actions says why that
    takes the terminal)."""
    win = curses.initscr()
    curses.noecho()
    curses.cbreak()
    win.keypad(True)
    win.nodelay(True)
    with contextlib.suppress(curses.error):
        curses.curs_set(0)
    loop = asyncio.get_running_loop()
    redraw = asyncio.Event()
    screen: Screen

    def said(message: str) -> None:
        screen.keys.message = message
        redraw.set()

    def said_elsewhere(message: str) -> None:  # ssh's words, from its reader thread
        loop.call_soon_threadsafe(said, message)

    follower = follow(redraw.set, said_elsewhere)
    screen = Screen(win, follower, ctl, wants_colour() and curses.has_colors())
    keys: asyncio.Queue[Key] = asyncio.Queue()

    actions = Actions(ctl, said)

    def on_input() -> None:
        while True:
            try:
                keys.put_nowait(win.get_wch())
            except curses.error:  # no more input
                return

    async def fetch_preview(key: str) -> None:
        client, name = follower.client_for(key)
        if client is None:
            return
        try:
            screen.preview = (key, await client.capture(name, PREVIEW_LINES))
        except HostAgentError as e:
            screen.preview = (key, f"({e.message})")
        redraw.set()

    loop.add_reader(sys.stdin.fileno(), on_input)
    try:
        await follower.start()
        next_counters = 0.0
        counters: asyncio.Task[None] | None = None
        previewed: tuple[str, str, str] | None = None
        preview: asyncio.Task[None] | None = None
        while True:
            screen.draw()
            redraw.clear()
            current = screen.selected()
            # The preview is read again when the selection or its activity changes, and with
            # the counters: a working agent's screen moves without saying so.
            tick = loop.time() >= next_counters
            if tick:
                next_counters = loop.time() + COUNTER_INTERVAL
                if counters is None or counters.done():
                    counters = loop.create_task(follower.refresh_counters())
            if current is not None:
                look = (current.key, current.state, current.activity)
                if (look != previewed or tick) and (preview is None or preview.done()):
                    previewed = look
                    preview = loop.create_task(fetch_preview(current.key))
            waiters = [asyncio.ensure_future(redraw.wait()), asyncio.ensure_future(keys.get())]
            done, pending = await asyncio.wait(
                waiters, timeout=COUNTER_INTERVAL, return_when=asyncio.FIRST_COMPLETED
            )
            for p in pending:
                p.cancel()
            if waiters[1] not in done:
                continue
            shown = screen.shown()
            asking = {s.key: str(s.question["id"]) for s in shown if s.question.get("id")}
            command = screen.keys.key(waiters[1].result(), [s.key for s in shown], asking)
            if command is None:
                continue
            if command.kind == "quit":
                return 0
            if command.kind == "attach":
                curses.endwin()
                subprocess.run([*ctl, "attach", *command.args], check=False)
                win.refresh()
            elif may_ask and not screen.owns(command.session):
                loop.remove_reader(sys.stdin.fileno())  # the keys typed are the password's
                try:
                    await actions.on_terminal(win, command.args)
                finally:
                    loop.add_reader(sys.stdin.fileno(), on_input)
            else:
                actions.in_background(command.args)
    except HostAgentError as e:
        curses.endwin()
        print(f"hostagentctl watch: {e.message}", file=sys.stderr)
        return 1
    finally:
        loop.remove_reader(sys.stdin.fileno())
        actions.cancel()
        follower.close()
        curses.endwin()


def ctl_command(system: bool, where: list[str]) -> list[str]:
    """The hostagentctl that keys run: the same host (-H, -M) or fleet, the same bus."""
    exe = sys.argv[0] if os.path.basename(sys.argv[0]) == "hostagentctl" else "hostagentctl"
    return [exe, *where, "--system" if system else "--user"]


def _needs_terminal() -> bool:
    if sys.stdin.isatty() and sys.stdout.isatty():
        return False
    print(
        "hostagentctl watch needs a terminal; 'hostagentctl list' (or --json) prints once.",
        file=sys.stderr,
    )
    return True


async def watch(system: bool, address: str | None, host: str | None, machine: str | None) -> int:
    if _needs_terminal():
        return 1

    def follow(on_change: Callable[[], None], say: Said) -> Follower:
        async def connect() -> Client:
            return await Client.connect(system, address, host, machine, ssh_said=say)

        return Follower(connect, on_change)

    where = ["-H", host] if host else ["-M", machine] if machine else []
    may_ask = wanted(system, True, bool(host or machine or address))
    return await run(follow, ctl_command(system, where), may_ask)


async def watch_fleet(system: bool, hosts: list[Host], where: list[str]) -> int:
    """One table of every host's sessions (HOST:NAME), each host followed on its own; where is
    how the command line named the fleet, for the commands the keys run."""
    if _needs_terminal():
        return 1

    def follow(on_change: Callable[[], None], say: Said) -> FleetFollower:
        return FleetFollower(hosts, system, on_change, lambda host, line: say(f"{host}: {line}"))

    return await run(follow, ctl_command(system, where))
