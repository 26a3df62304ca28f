"""A session's terminal from the outside: following what it shows (``PaneWatch``), reading the
screen, typing into it, attaching, and waiting for its agent to reach an activity."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from . import tmux
from .activity import GENERIC
from .errors import InvalidArgs, NotRunning, Timeout
from .panewatch import PaneWatch, fifo_path
from .session import Activity, State

if TYPE_CHECKING:
    from .manager import Manager, Session

log = logging.getLogger(__name__)


class Terminal:
    def __init__(self, manager: Manager) -> None:
        self.manager = manager

    def _new_watch(self, session: Session) -> PaneWatch:
        preset = self.manager.presets.get(session.record.preset)
        owner = self.manager.owner_of(session)
        watch = PaneWatch(
            session.name,
            owner,
            self.manager.socket_of(session),
            fifo_path(self.manager.runtime_dir(owner.uid), session.name),
            preset.activity if preset else GENERIC,
            lambda _verdict: self.manager.announce(session),
        )
        session.watch = watch
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
        except (OSError, tmux.TmuxError) as e:
            log.warning("session '%s': cannot follow its terminal: %s", session.name, e)
            self.unwatch(session)

    def unwatch(self, session: Session) -> None:
        if session.watch is not None:
            session.watch.close()
            session.watch = None

    async def watch_all(self, parallel: int = 8) -> None:
        """Follow every running session, a few tmux calls at a time (after recovery)."""
        slots = asyncio.Semaphore(parallel)

        async def one(session: Session) -> None:
            async with slots:
                await self.watch(session)

        running = [s for s in self.manager.sessions.values() if s.record.state is State.RUNNING]
        await asyncio.gather(*(one(s) for s in running))

    def wake(self, session: Session) -> None:
        """Answer the waiters whose activity the session has reached (or that it exited)."""
        activity = session.activity.value
        for entry in list(session.waiters):
            wanted, fut = entry
            if activity in wanted or activity == Activity.EXITED.value:
                if not fut.done():
                    fut.set_result(activity)
                session.waiters.remove(entry)

    def _running(self, name: str) -> Session:
        session = self.manager.get(name)
        if session.record.state is not State.RUNNING:
            raise NotRunning(
                f"Session '{name}' is {session.record.state.value}; "
                f"resume it with 'hostagentctl resume {name}'."
            )
        return session

    async def capture(self, name: str, lines: int) -> str:
        session = self._running(name)
        if not 0 <= lines <= 100000:
            raise InvalidArgs("Scrollback lines must be between 0 and 100000.")
        try:
            return await tmux.capture(
                self.manager.owner_of(session), self.manager.socket_of(session), lines
            )
        except tmux.TmuxError as e:
            raise NotRunning(f"Session '{name}' has no terminal: {e}") from None

    async def send_text(self, name: str, text: str, enter: bool) -> None:
        session = self._running(name)
        if len(text) > 64 * 1024 or "\0" in text:
            raise InvalidArgs("Text must be at most 64 KiB and contain no NUL.")
        try:
            await tmux.send_text(
                self.manager.owner_of(session), self.manager.socket_of(session), text, enter
            )
        except tmux.TmuxError as e:
            raise NotRunning(f"Session '{name}' has no terminal: {e}") from None

    def attach_argv(self, name: str) -> list[str]:
        return tmux.attach_argv(self.manager.socket_of(self._running(name)))

    async def wait_for_activity(
        self, names: Iterable[str], activities: Iterable[str], timeout_usec: int
    ) -> tuple[str, str]:
        wanted = frozenset(activities)
        unknown = wanted - {a.value for a in Activity}
        if unknown:
            raise InvalidArgs(f"Unknown activities: {', '.join(sorted(unknown))}.")
        sessions = [self.manager.get(n) for n in names]
        if not sessions:
            raise InvalidArgs("Name at least one session to wait for.")
        for s in sessions:
            current = s.activity.value
            if current in wanted or current == Activity.EXITED.value:
                return s.name, current
        loop = asyncio.get_running_loop()
        futures = {}
        for s in sessions:
            fut: asyncio.Future[str] = loop.create_future()
            s.waiters.append((wanted, fut))
            futures[fut] = s
        try:
            done, _ = await asyncio.wait(
                futures, timeout=timeout_usec / 1e6 or None, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for fut, s in futures.items():
                s.waiters = [w for w in s.waiters if w[1] is not fut]
        if not done:
            raise Timeout("No session reached the activities in time.")
        fut = next(iter(done))
        return futures[fut].name, fut.result()
