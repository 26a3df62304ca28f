"""A session while the daemon runs: its record, its runtime files' paths, and what lives only in
memory (its lock, its pane watch, its waiters, what its last hook said). The registry
(registry.py) keeps them and is the one that changes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from hostagent.activity import HookReport, Verdict
from hostagent.daemon.state.asking import Asked, Asking
from hostagent.daemon.state.paths import SessionPaths
from hostagent.identity import Owner
from hostagent.session import LIVE_STATES, Activity, SessionRecord, State


class Watch(Protocol):
    """What the registry needs of a session's pane watch (panewatch.PaneWatch)."""

    @property
    def verdict(self) -> Verdict | None: ...
    @property
    def last_screen(self) -> str: ...
    @property
    def asking(self) -> Asking: ...
    @property
    def closed(self) -> bool: ...
    def report_hook(self, verdict: Verdict) -> None: ...
    def expect_hook(self, grace: float) -> None: ...
    def hook_asks_not(self) -> None: ...
    def look_again(self, delay: float) -> None: ...
    async def look_now(self) -> None: ...
    def close(self) -> None: ...


class Session:
    """A record plus what only lives while the daemon runs: its paths, lock, activity and
    waiters."""

    def __init__(self, record: SessionRecord, paths: SessionPaths) -> None:
        self.record = record
        self.paths = paths
        self.lock = asyncio.Lock()
        # What lives only while the daemon runs. Each is changed through the registry's
        # functions below (the architecture test holds it), never set from outside.
        self.removed = False
        self.waiters: set[Waiter] = set()
        self.last_hook: HookReport | None = None
        self.hooks_heard = 0  # reports heard, to tell a new one from the last
        self.killed_with = 0  # the signal a kill of every process sent, until the unit ends
        self.unit_result = ""  # systemd's Result for the scope, when it said one
        self.pane_pid = 0  # the agent's process, followed while the session runs (ending.py)
        # A run ended and what follows its end (its conversation, its usage) is not yet
        # recorded: a resume looks the conversation up itself (ops/resumeplan.py).
        self.settling = False
        self.unfollow: Callable[[], None] | None = None
        self.watch: Watch | None = None
        self._owner: Owner | None = None

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def owner(self) -> Owner:
        """The owner's passwd entry, looked up once (NSS can cost a round trip); KeyError
        when the user no longer exists."""
        if self._owner is None:
            self._owner = Owner.from_uid(self.record.owner)
        return self._owner

    @owner.setter
    def owner(self, owner: Owner) -> None:
        self._owner = owner

    @property
    def asked(self) -> Asked | None:
        """The question the session asks now, read from its screen while it runs."""
        if self.record.state is State.RUNNING and self.watch is not None:
            return self.watch.asking.asked
        return None

    @property
    def verdict(self) -> Verdict:
        """What the session is doing, and why we think so."""
        state = self.record.state
        if state is State.RUNNING and self.watch is not None and self.watch.verdict is not None:
            return self.watch.verdict
        if state in LIVE_STATES:
            return Verdict(Activity.UNKNOWN, "lifecycle", "not read yet", state.value)
        return Verdict(Activity.EXITED, "lifecycle", "not running", state.value)

    @property
    def activity(self) -> Activity:
        return self.verdict.activity


class Waiter:
    """One wait for activities, on one or more sessions; answered once."""

    def __init__(self, wanted: frozenset[str]) -> None:
        self.wanted = wanted
        self.future: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()

    def offer(self, session: Session) -> bool:
        """Answer with session's activity when it is wanted (or exited); True once answered."""
        activity = session.activity.value
        if activity in self.wanted or activity == Activity.EXITED.value:
            if not self.future.done():
                self.future.set_result((session.name, activity))
            return True
        return self.future.done()
