"""Following one running session's terminal without polling it.

tmux copies everything the pane prints into a FIFO (``pipe-pane``: one small ``cat`` per
session, inside the session's scope, as its owner). The daemon reads that FIFO from its event
loop and never parses the bytes beyond OSC 9;4 progress and their count; output only says
"something changed". A classification (one tmux call for the screen and the title, then
``activity.classify``) runs when output can have changed the verdict:

- when a burst of output ends (GAP of quiet), or FIRST_WAIT after it starts if it does not
  pause, while the agent is not working: output starting, or a dialog drawn, shows at once;
- while it works: once every WORKING_INTERVAL while output flows, at the end of a large burst
  (a dialog or a prompt drawn, not a spinner's tick) where one comes, else on the interval;
- once output has been quiet for SETTLE, to see where the agent stopped; a pane never read
  yet waits for that at most FIRST_READ_MAX, so an agent whose first turn redraws without
  pause (Codex's "Working (12s • esc to interrupt)") is read within a second all the same,
  and read again once that output settles;
- within a budget: BUDGET classifications may follow each other at once (a line typed, then the
  agent's answer), refilled at RATE a second, so a session that streams output costs a few tmux
  calls a second at most.

An idle session prints nothing, so it costs nothing: no timer, no wake-up, no process run.
The daemon opens the FIFO for reading and writing, so a ``cat`` that exits never leaves an
end-of-file that would wake the loop forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from hostagent import activity
from hostagent.activity import Rules, Verdict, View
from hostagent.daemon.host import tmux
from hostagent.daemon.host.ports import TmuxPort
from hostagent.daemon.host.runtimedir import make_room
from hostagent.daemon.state.asking import Asking
from hostagent.identity import Owner
from hostagent.session import Activity

log = logging.getLogger(__name__)

GAP = 0.015  # quiet that ends a burst: a terminal program draws a frame in one go
FIRST_WAIT = 0.04  # the longest a burst that never pauses waits for its first classification
BIG_BURST = 256  # bytes: more than a spinner's tick or a timer's redraw
BUDGET = 6.0  # classifications that may follow each other at once
RATE = 4.0  # classifications a second, on average, while output keeps coming
SETTLE = 0.4
FIRST_READ_MAX = 1.0  # the longest busy output keeps a pane that was never read unread
WORKING_INTERVAL = 1.0
READ_SIZE = 65536
RETRIES = 5
RETRY_DELAY = 0.5
RETRY_MAX = 30.0  # the slowest a never-read pane is looked at again
LOOK_NOW_TIMEOUT = 2.0  # for the screen read before a stop or kill takes the terminal


class PaneWatch:
    def __init__(
        self,
        name: str,
        owner: Owner,
        sock: Path,
        fifo: Path,
        rules: Rules,
        on_verdict: Callable[[Verdict], None],
        tmux_client: TmuxPort,
    ) -> None:
        self.name = name
        self.owner = owner
        self.sock = sock
        self.fifo = fifo
        self.rules = rules
        self.on_verdict = on_verdict
        self.tmux = tmux_client
        self.screen_verdict: Verdict | None = None
        # The last screen read that showed anything: what the agent drew last, kept for its
        # final screen when it clears the terminal on its way out (an alternate screen left).
        self.last_screen = ""
        self.screen = ""  # the last screen read, whatever it showed
        self.asking = Asking()  # what a blocked session asks on it
        self.hook: Verdict | None = None
        self.verdict: Verdict | None = None
        self.progress: int | None = None
        self._loop = asyncio.get_running_loop()
        self._read_fd = -1
        # The first settle is counted from here, and so is the bound on the first read.
        self._last_output = self._opened_at = self._loop.time()
        self._last_classified = 0.0
        self._tokens = BUDGET
        self._tokens_at = self._loop.time()
        self._burst_bytes = 0
        self._gap: asyncio.TimerHandle | None = None
        self._soon: asyncio.TimerHandle | None = None
        self._settle: asyncio.TimerHandle | None = None
        self._stale: asyncio.TimerHandle | None = None
        self._expecting: asyncio.TimerHandle | None = None  # the hook's question's grace
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._retries = 0
        self.closed = False

    def open(self) -> None:
        """Make the FIFO and start reading it; classify once the pane has been quiet."""
        make_room(self.fifo)
        os.mkfifo(self.fifo, 0o600)
        # Read and write: the daemon is a writer itself, so the FIFO never reports end of file
        # when a cat exits, and one descriptor per session is enough for a thousand sessions.
        self._read_fd = os.open(self.fifo, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW)
        if not stat.S_ISFIFO(os.fstat(self._read_fd).st_mode):
            self.close()
            raise OSError(f"{self.fifo} is not the FIFO we made")
        if os.geteuid() != self.owner.uid:
            os.fchown(self._read_fd, self.owner.uid, self.owner.gid)
        self._loop.add_reader(self._read_fd, self._on_readable)
        self._settle = self._loop.call_at(self._last_output + SETTLE, self._on_settle)

    async def start(self) -> None:
        """Follow a pane that runs already (an adopted session): open, point it here, and
        classify the screen read in the same tmux call, so that a restart with a thousand
        sessions makes one tmux call for each, not a second one once each has settled."""
        self.open()
        screen, title, command = await self.tmux.pipe_output(self.owner, self.sock, self.fifo)
        if self.closed or self._task is not None:
            return
        # What the pipe brought since it was made is all the output this watch has seen.
        flowing = self._last_output > self._opened_at
        if not flowing and self._settle is not None:
            # That settle waited for the first read; output from now on arms its own.
            self._settle.cancel()
            self._settle = None
        self._spend()
        self._take(screen, title, command, flowing)

    def close(self) -> None:
        self.closed = True
        self.asking.end_hook()  # a hook still waiting leaves the dialog to the terminal
        for handle in (self._gap, self._soon, self._settle, self._stale, self._expecting):
            if handle is not None:
                handle.cancel()
        if self._read_fd >= 0:
            self._loop.remove_reader(self._read_fd)
            os.close(self._read_fd)
            self._read_fd = -1
        # Only our FIFO: whatever the owner put in its place since is theirs.
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(os.lstat(self.fifo).st_mode):
                os.unlink(self.fifo)

    # ---- output -------------------------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self._read_fd, READ_SIZE)
        except BlockingIOError:
            return
        if not chunk:
            return
        progress = activity.last_progress(chunk)
        if progress is not None:
            self.progress = progress
        now = self._loop.time()
        self._last_output = now
        self._burst_bytes += len(chunk)
        if self._settle is None:
            self._settle = self._loop.call_at(now + SETTLE, self._on_settle)
        if self.verdict is None:
            # A pane not read yet waits for its first output to settle: a burst read of a
            # starting agent's banner would be thrown away a moment later.
            return
        working = self.verdict.activity is Activity.WORKING
        # While working, a burst's end matters only once the interval has passed: before that
        # no timer is armed, so a streaming session wakes the loop no more than it must.
        if self._gap is None and (not working or now >= self._last_classified + WORKING_INTERVAL):
            self._gap = self._loop.call_at(now + GAP, self._on_gap)
        if self._soon is None:
            due = self._last_classified + WORKING_INTERVAL if working else now + FIRST_WAIT
            at = max(due, now + GAP, self._allowed(now))
            self._soon = self._loop.call_at(at, self._on_soon)

    def _on_gap(self) -> None:
        """Output has paused: classify when the pause can have changed the verdict."""
        self._gap = None
        now = self._loop.time()
        working = self.verdict is not None and self.verdict.activity is Activity.WORKING
        if now < self._last_output + GAP:
            # Still flowing. While working and looked at within the interval, stop watching
            # for the pause: the next output after the interval arms it again.
            if not working or now >= self._last_classified + WORKING_INTERVAL:
                self._gap = self._loop.call_at(self._last_output + GAP, self._on_gap)
            return
        big, self._burst_bytes = self._burst_bytes >= BIG_BURST, 0
        # While working, the end of a large burst takes the place of the once-a-second look,
        # never adds to it: a working session costs what it did with a fixed interval.
        due = not working or (big and now - self._last_classified >= WORKING_INTERVAL)
        if due:
            # At once, or as soon as the budget allows: move the pending classification up.
            at = self._allowed(now)
            if self._soon is None or self._soon.when() > at:
                if self._soon is not None:
                    self._soon.cancel()
                self._soon = self._loop.call_at(at, self._on_soon)

    def _allowed(self, now: float) -> float:
        """The earliest time the budget allows the next classification."""
        self._tokens = min(BUDGET, self._tokens + (now - self._tokens_at) * RATE)
        self._tokens_at = now
        return now if self._tokens >= 1 else now + (1 - self._tokens) / RATE

    def _on_soon(self) -> None:
        self._soon = None
        self._request()

    def _on_settle(self) -> None:
        self._settle = None
        now, settled = self._loop.time(), self._last_output + SETTLE
        due = settled
        if not self._last_classified:
            due = min(due, self._opened_at + FIRST_READ_MAX)
        if now < due:
            self._settle = self._loop.call_at(due, self._on_settle)
            return
        if now < settled:
            # A first read forced while output still flows sees it flowing: look again once
            # it settles, or the session keeps that verdict until it next prints something.
            self._settle = self._loop.call_at(settled, self._on_settle)
        self._request()

    # ---- classifying --------------------------------------------------------------------

    def _request(self) -> None:
        if self.closed:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = self._loop.create_task(self._classify())

    async def _classify(self) -> None:
        while not self.closed:
            self._again = False
            self._spend()
            try:
                screen, title, command = await self.tmux.screen_and_title(self.owner, self.sock)
            except tmux.TmuxError as e:
                # A pane read before its server is up (a watch opens before the spawn), while
                # it goes away, or while the daemon's helpers are all busy (a burst of starts):
                # look again shortly, a few times. Then rely on output, unless the pane was never
                # read: a prompt that is drawn once must not leave the session unknown for ever,
                # so it is looked at again, less and less often.
                log.debug("session '%s': no screen to classify: %s", self.name, e)
                self._retries += 1
                if self._again or self._retries <= RETRIES:
                    self._loop.call_later(RETRY_DELAY, self._request)
                elif self.screen_verdict is None:
                    backoff = RETRY_DELAY * 2 ** min(self._retries - RETRIES, 8)
                    self._loop.call_later(min(RETRY_MAX, backoff), self._request)
                return
            self._retries = 0
            self._take(screen, title, command, self._loop.time() - self._last_output < SETTLE)
            if not self._again:
                return

    def _spend(self) -> None:
        """A classification starts now: counted from here, and paid from the budget."""
        self._last_classified = now = self._loop.time()
        self._allowed(now)
        self._tokens -= 1

    def _take(self, screen: str, title: str, command: str, flowing: bool) -> None:
        """A screen read: classify it, and say so when the verdict changes."""
        # A dead pane's screen (tmux's line alone, read before the end is handled) is not
        # something the agent drew.
        if tmux.agent_screen(screen):
            self.last_screen = screen
        self.screen = screen
        view = View(screen, title, self.progress, flowing, command)
        self.screen_verdict = activity.classify(self.rules, view)
        self._publish()

    async def look_now(self) -> None:
        """Read the screen at once and keep it as the last one the agent drew: a stop or a
        kill of the whole scope is about to take the terminal, and output of the moment
        before must not be lost to the wait for the pane to settle. Bounded: a stuck tmux
        server does not hold the stop up."""
        if self.closed:
            return
        with contextlib.suppress(tmux.TmuxError, TimeoutError):
            screen, _, _ = await asyncio.wait_for(
                self.tmux.screen_and_title(self.owner, self.sock), LOOK_NOW_TIMEOUT
            )
            if tmux.agent_screen(screen):
                self.last_screen = screen

    def look_again(self, delay: float) -> None:
        """Read the screen once more after delay, whether or not it prints meanwhile: an
        answered dialog that took no key prints nothing."""
        self._loop.call_later(delay, self._request)

    def expect_hook(self, grace: float) -> None:
        """The agent's hook said at once that it asks: hold the dialog drawn meanwhile back
        for its question, for grace at most (a hook that cannot reach the daemon never asks)."""
        self._unexpect()
        self.asking.expecting = True
        self._expecting = self._loop.call_later(grace, self.hook_asks_not)

    def hook_asks_not(self) -> None:
        """The hook will not ask, or did not in time: the dialog on the screen is the question."""
        if self._unexpect():
            self._publish(asks=True)

    def _unexpect(self) -> bool:
        """No hook's question is on its way any more; whether one was."""
        if self._expecting is not None:
            self._expecting.cancel()
            self._expecting = None
        expected, self.asking.expecting = self.asking.expecting, False
        return expected

    def report_hook(self, verdict: Verdict) -> None:
        self.hook = verdict
        # The agent went on: whatever its hook asked was answered, in the terminal or not.
        ended = verdict.activity is not Activity.BLOCKED and (
            self.asking.end_hook() | self._unexpect()
        )
        self._publish(ended)
        self._request()  # the screen may show more than the hook said

    def _publish(self, asks: bool = False) -> None:
        if self.closed or (self.screen_verdict is None and self.hook is None):
            return
        screen = self.screen_verdict or Verdict(Activity.UNKNOWN, "screen", "not read yet", "")
        quiet = self._loop.time() - self._last_output
        verdict = activity.combine(screen, self.hook, quiet)
        if verdict.source == "hook" and verdict.activity is Activity.WORKING:
            # Looked at again when the quiet makes that report stale (an interrupted turn).
            if self._stale is not None:
                self._stale.cancel()
            due = self._last_output + activity.HOOK_STALE_SEC
            self._stale = self._loop.call_at(due, self._on_stale)
        asks = self.asking.see(verdict.activity is Activity.BLOCKED, self.screen) or asks
        if verdict != self.verdict or asks:
            self.verdict = verdict
            self.on_verdict(verdict)

    def _on_stale(self) -> None:
        self._stale = None
        self._request()
