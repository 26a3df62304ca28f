"""A session's terminal from the outside: following what it shows (``PaneWatch``), reading the
screen, typing into it, attaching, and waiting for its agent to reach an activity.

The terminal is a listener of the registry: a session that stops being ``starting`` or
``running`` loses its watch, and every change answers the waits it satisfies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from hostagent.activity import GENERIC
from hostagent.daemon.follow.panewatch import PaneWatch
from hostagent.daemon.host import memfile, tmux
from hostagent.daemon.host.owner import OutputTooLarge
from hostagent.daemon.host.ports import TmuxPort
from hostagent.daemon.state.live import Session, Waiter
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.errors import Busy, InvalidArgs, LimitsExceeded, NoSuchSession, NotRunning, Timeout
from hostagent.identity import Owner
from hostagent.presets import ENTER_GAP
from hostagent.session import Activity, State

log = logging.getLogger(__name__)

MAX_SCROLLBACK = 100000
MAX_TEXT = 64 * 1024
MAX_WAIT_NAMES = 4096  # sessions one wait may name
MAX_CAPTURE_BYTES = 16 * 1024 * 1024  # a reply must stay well under the bus's 32 MiB message
# Captures one user may have under way at once. Each holds a tmux client and up to
# MAX_CAPTURE_BYTES of its output in the daemon; past this a capture is refused at once, so
# that whatever one user asks for, the daemon's memory and its one thread stay everyone's.
MAX_CAPTURES_PER_CALLER = 4
# How long a send waits for the CLI to draw the text before its Enter, and how often it looks;
# at the least, the preset's enter_gap passes between the paste and its Enter.
ENTER_WAIT = 2.0
ENTER_POLL = 0.05


def check_capture(lines: int) -> None:
    if not 0 <= lines <= MAX_SCROLLBACK:
        raise InvalidArgs(f"Scrollback lines must be between 0 and {MAX_SCROLLBACK}.")


def check_text(text: str) -> None:
    if len(text.encode(errors="surrogateescape")) > MAX_TEXT or "\0" in text:
        raise InvalidArgs(
            "Text must be at most 64 KiB (in UTF-8) and contain no NUL; send it in parts."
        )


def check_activities(activities: Iterable[str]) -> frozenset[str]:
    wanted = frozenset(activities)
    unknown = wanted - {a.value for a in Activity}
    if unknown:
        raise InvalidArgs(f"Unknown activities: {', '.join(sorted(unknown))}.")
    return wanted


class Terminal:
    def __init__(
        self,
        registry: Registry,
        tmux_client: TmuxPort,
        settings: Settings,
        on_prompt: Callable[[Session], None],
    ) -> None:
        """on_prompt: told when a line is sent (follow/usage.py's read_later: a turn too
        quick to be seen working is read all the same)."""
        self.registry = registry
        self.tmux = tmux_client
        self.settings = settings
        self._capturing: dict[int, int] = {}  # captures under way, by the uid that asked
        self.on_prompt = on_prompt

    # ---- Listener -----------------------------------------------------------------------

    def session_added(self, session: Session) -> None:
        pass

    def session_changed(self, session: Session) -> None:
        # Starting keeps its watch: the pane can be read, and its first verdict announced,
        # before the scope's start returns (a busy systemd), and nothing would open another.
        if session.record.state not in (State.STARTING, State.RUNNING):
            self.unwatch(session)
        self.wake(session)

    def session_removed(self, session: Session) -> None:
        self.unwatch(session)
        for waiter in list(session.waiters):
            if not waiter.future.done():
                waiter.future.set_result((session.name, Activity.EXITED.value))
            self.registry.unwait(session, waiter)

    # ---- watching -----------------------------------------------------------------------

    def _new_watch(self, session: Session) -> PaneWatch:
        preset = self.settings.preset(session.record.preset)
        watch = PaneWatch(
            session.name,
            session.owner,
            session.paths.socket,
            session.paths.fifo,
            preset.activity if preset else GENERIC,
            lambda _verdict: self.registry.announce(session),
            self.tmux,
        )
        self.registry.watched(session, watch)
        return watch

    def prepare(self, session: Session) -> Path | None:
        """Before a spawn: the FIFO the new pane's output should go to, or None."""
        self.unwatch(session)
        watch = self._new_watch(session)
        try:
            watch.open()
        except OSError as e:
            log.warning("session '%s': cannot follow its terminal: %s", session.name, e)
            self.unwatch(session)
            return None
        return watch.fifo

    async def watch(self, session: Session) -> None:
        """Follow a running session's terminal (after adoption); a failure only leaves its
        activity unknown."""
        if session.watch is not None or session.record.state is not State.RUNNING:
            return
        watch = self._new_watch(session)
        try:
            await watch.start()
        except (OSError, KeyError, tmux.TmuxError) as e:
            log.warning("session '%s': cannot follow its terminal: %s", session.name, e)
            self.unwatch(session)

    def unwatch(self, session: Session) -> None:
        if session.watch is not None:
            session.watch.close()
            self.registry.watched(session, None)

    async def watch_all(self, parallel: int = 8) -> None:
        """Follow every running session, a few tmux calls at a time (after recovery)."""
        await self.registry.for_each_running(self.watch, parallel)

    def wake(self, session: Session) -> None:
        """Answer the waits whose activity the session has reached (or that it exited)."""
        for waiter in list(session.waiters):
            if waiter.offer(session):
                self.registry.unwait(session, waiter)

    # ---- the screen ---------------------------------------------------------------------

    @staticmethod
    def _running(session: Session) -> Session:
        if session.removed:
            raise NoSuchSession(f"Session '{session.name}' was removed meanwhile.")
        if session.record.state is not State.RUNNING:
            raise NotRunning(
                f"Session '{session.name}' is {session.record.state.value}; "
                f"resume it with 'hostagentctl resume {session.name}'."
            )
        return session

    async def capture(
        self,
        session: Session,
        lines: int,
        caller: int | None = None,
        limit: int = MAX_CAPTURE_BYTES,
    ) -> str | None:
        """The screen and lines of scrollback (checked by the caller, check_capture); of a
        session that ended, its last screen. None when that is more than limit bytes, of
        which no more is read. caller: the uid asking, whose captures under way are counted
        (LimitsExceeded past MAX_CAPTURES_PER_CALLER)."""
        with self._capture_slot(caller):
            text = self._final_screen(session, lines)
            if text is None:
                try:
                    text = await self.tmux.capture(
                        session.owner, session.paths.socket, lines, limit
                    )
                except tmux.TmuxError as e:
                    raise NotRunning(f"Session '{session.name}' has no terminal: {e}") from None
                except OutputTooLarge:
                    return None
                # The rows below the last line written are blank, not output.
                text = text.rstrip("\n") + "\n"
        return text if len(text.encode()) <= limit else None

    async def capture_file(
        self, session: Session, lines: int, caller: int | None = None
    ) -> int | None:
        """As capture, in a sealed memfd (its descriptor, the caller's to close) that tmux
        writes into itself, so that the daemon never holds a long history; None when it is
        more than MAX_CAPTURE_BYTES."""
        with self._capture_slot(caller):
            text = self._final_screen(session, lines)
            if text is not None:
                data = text.encode()
                if len(data) > MAX_CAPTURE_BYTES:
                    return None
                return memfile.sealed(data, f"hostagent-{session.name}")
            out = memfile.Bounded(f"hostagent-{session.name}", MAX_CAPTURE_BYTES)
            try:
                await self.tmux.capture_to(session.owner, session.paths.socket, lines, out.fd)
                return out.seal()
            except tmux.TmuxError as e:
                raise NotRunning(f"Session '{session.name}' has no terminal: {e}") from None
            except OSError as e:
                raise Busy(
                    f"Session '{session.name}': its capture could not be sealed ({e.strerror}); "
                    "try again."
                ) from None
            finally:
                out.close()

    @contextlib.contextmanager
    def _capture_slot(self, caller: int | None) -> Iterator[None]:
        """One of the caller's MAX_CAPTURES_PER_CALLER captures under way, for as long as it
        runs; LimitsExceeded when they are all taken."""
        under_way = self._capturing.get(caller, 0) if caller is not None else 0
        if under_way >= MAX_CAPTURES_PER_CALLER:
            raise LimitsExceeded(
                f"{MAX_CAPTURES_PER_CALLER} captures of yours are already under way; "
                "wait for them, then ask again."
            )
        if caller is None:
            yield
            return
        self._capturing[caller] = under_way + 1
        try:
            yield
        finally:
            left = self._capturing.pop(caller) - 1
            if left:
                self._capturing[caller] = left

    def _final_screen(self, session: Session, lines: int) -> str | None:
        """The last screen of a session that ended, when one was kept; else None, once the
        session is known to run (NotRunning when it does not)."""
        if session.record.state is not State.RUNNING and not session.removed:
            final = self.registry.store.load_screen(session.name)
            if final is not None:
                # One kept before tmux's padding was taken off shows without it too.
                kept = tmux.final_screen(final, "").splitlines()
                return "\n".join(kept[-(lines + self.settings.config.rows) :]) + "\n"
        self._running(session)
        return None

    async def send_text(self, session: Session, text: str, enter: bool) -> None:
        """Type text (checked by the caller, check_text) into the session's pane, then its
        Enter as a key of its own once the CLI has drawn the text: sent in the same burst, a
        CLI that reads a burst as a paste (Codex, Cline) takes the Enter for a new line of
        the prompt and never submits it. A text the CLI does not draw (a hidden answer) gets
        its Enter after ENTER_WAIT."""
        name = self._running(session).name
        owner, sock = session.owner, session.paths.socket
        preset = self.settings.preset(session.record.preset)
        gap = preset.enter_gap if preset is not None else ENTER_GAP
        try:
            await self.tmux.send_text(owner, sock, text, enter and not text)
            if text and enter:
                await self._drawn(owner, sock, text, gap)
                await self.tmux.send_text(owner, sock, "", True)
        except tmux.TmuxError as e:
            raise NotRunning(f"Session '{name}' has no terminal: {e}") from None
        if enter or "\r" in text or "\n" in text:
            self.on_prompt(session)

    async def _drawn(self, owner: Owner, sock: Path, text: str, gap: float) -> None:
        """Wait gap (the preset's enter_gap), then until the pane shows the end of text (its
        last words, spaces as any run of spaces: a CLI wraps and pads), or ENTER_WAIT has
        passed since the paste. A CLI that tells a paste from typing by time takes a key soon
        after a paste as part of it (Gemini CLI once lost an Enter sent as soon as the text was
        drawn): nothing is looked at before the gap, so a send costs one screen read where the
        CLI keeps up."""
        deadline = time.monotonic() + ENTER_WAIT
        await asyncio.sleep(gap)
        words = text.split()[-3:]
        if not words:
            return
        tail = re.compile(r"\s+".join(re.escape(w) for w in words))
        while True:
            try:
                screen, _, _ = await self.tmux.screen_and_title(owner, sock)
            except tmux.TmuxError:  # not to be read now: the Enter says if the pane is there
                return
            if tail.search(screen) or time.monotonic() >= deadline:
                return
            await asyncio.sleep(ENTER_POLL)

    def attach_argv(self, session: Session) -> list[str]:
        return tmux.attach_argv(self._running(session).paths.socket)

    async def wait_for_activity(
        self, names: Iterable[str], wanted: frozenset[str], timeout_usec: int
    ) -> tuple[str, str]:
        """The first of names to show one of the activities wanted (check_activities made
        them), and that activity."""
        unique = list(dict.fromkeys(names))
        if len(unique) > MAX_WAIT_NAMES:
            raise InvalidArgs(f"Wait for at most {MAX_WAIT_NAMES} sessions at once.")
        sessions = [self.registry.get(n) for n in unique]
        if not sessions:
            raise InvalidArgs("Name at least one session to wait for.")
        waiter = Waiter(wanted)
        for s in sessions:
            if waiter.offer(s):
                return waiter.future.result()
        for s in sessions:
            self.registry.wait(s, waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout_usec / 1e6 or None)
        except TimeoutError:
            raise Timeout("No session reached the activities in time.") from None
        finally:
            for s in sessions:
                self.registry.unwait(s, waiter)
