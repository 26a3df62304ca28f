"""The registry of sessions: the runtime ``Session`` objects, lookup by name and unit, and the
one way a record changes (``change``: stamp, transition, persist, announce).

The registry decides nothing about a session's life; ``lifecycle`` does. It never imports
dbus-fast: whoever needs to know about changes (the bus objects, the terminal watches, the
status line) subscribes as a ``Listener``, and every change reaches them the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Protocol, Unpack

from hostagent.activity import HookReport, Verdict
from hostagent.daemon.state.paths import SessionPaths
from hostagent.daemon.state.store import SidecarStore
from hostagent.errors import LimitsExceeded, NoSuchSession, StorageFull, quote
from hostagent.identity import Owner
from hostagent.session import (
    FACTS,
    LIVE_STATES,
    Activity,
    Event,
    RecordChange,
    SessionRecord,
    State,
    name_from_unit,
    now_usec,
    transition,
)

log = logging.getLogger(__name__)

MAX_OPERATIONS_PER_USER = 64  # one user's calls waiting for a systemd job at once
MAX_OPERATIONS = 1024  # everyone's; past either, LimitsExceeded
RETRY_SEC = 5.0  # a record that could not be written is tried again this often


class Listener(Protocol):
    def session_added(self, session: Session) -> None: ...
    def session_removed(self, session: Session) -> None: ...
    def session_changed(self, session: Session) -> None: ...


class Watch(Protocol):
    """What the registry needs of a session's pane watch (panewatch.PaneWatch)."""

    @property
    def verdict(self) -> Verdict | None: ...
    @property
    def last_screen(self) -> str: ...
    def report_hook(self, verdict: Verdict) -> None: ...
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


class Registry:
    def __init__(self, store: SidecarStore, runtime_root: Path, system: bool) -> None:
        self.store = store
        self.runtime_root = runtime_root
        self.system = system
        self.sessions: dict[str, Session] = {}
        self.listeners: list[Listener] = []
        self.reserved: dict[str, int] = {}  # names a create is validating -> their owner
        self._operations: dict[int, int] = {}  # owner uid -> operations in flight
        self._unsaved: set[str] = set()  # sessions whose last commit did not reach the disk
        self._retry: asyncio.TimerHandle | None = None

    # ---- lookup -------------------------------------------------------------------------

    def get(self, name: str) -> Session:
        session = self.sessions.get(name)
        if session is None or session.removed:
            raise NoSuchSession(f"No session {quote(name)} known; 'hostagentctl list' shows them.")
        return session

    def by_unit(self, unit: str | None) -> Session | None:
        name = name_from_unit(unit) if unit else None
        session = self.sessions.get(name) if name else None
        if session is None or session.removed or session.record.unit != unit:
            return None
        return session

    def runtime_dir(self, uid: int) -> Path:
        return self.runtime_root / str(uid) if self.system else self.runtime_root

    def paths(self, uid: int, name: str) -> SessionPaths:
        return SessionPaths.of(self.runtime_dir(uid), name)

    def taken(self) -> set[str]:
        return set(self.sessions) | set(self.reserved)

    async def for_each_running(
        self, act: Callable[[Session], Awaitable[None]], parallel: int = 8
    ) -> None:
        """act on every running session, at most parallel at a time: each costs tmux calls,
        and a thousand at once would queue behind the owners' helper slots."""
        slots = asyncio.Semaphore(parallel)

        async def one(session: Session) -> None:
            async with slots:
                await act(session)

        running = [s for s in self.sessions.values() if s.record.state is State.RUNNING]
        await asyncio.gather(*(one(s) for s in running))

    def records(self) -> list[SessionRecord]:
        """Every session's record as the daemon holds it (the store writes them all again
        into a state directory made anew)."""
        return [session.record for session in self.sessions.values()]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.sessions.values():
            counts[s.record.state.value] = counts.get(s.record.state.value, 0) + 1
        return counts

    def status_line(self) -> str:
        counts = self.counts()
        if not counts:
            return "No sessions."
        return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))

    # ---- changes ------------------------------------------------------------------------

    def add(self, record: SessionRecord, owner: Owner | None = None) -> Session:
        """Register a session for a record loaded from disk; nothing is written, and it is
        announced once recovery has decided its state."""
        return self.register(self.new_session(record, owner))

    def new_session(self, record: SessionRecord, owner: Owner | None = None) -> Session:
        """A session for record (with its owner's passwd entry when the caller has looked it
        up already), not registered: a create registers it once its record is written."""
        session = Session(record, self.paths(record.owner, record.name))
        if owner is not None:
            session.owner = owner
        return session

    def register(self, session: Session) -> Session:
        self.sessions[session.record.name] = session
        return session

    def enroll(self, session: Session) -> None:
        """A new session's first record written, then the session registered and announced:
        the one way a session comes to be. StorageFull when the record cannot be written;
        then nothing of it is known."""
        record = session.record
        try:
            self.store.save(record)
        except OSError as e:
            raise StorageFull(
                f"Session '{record.name}' was not created: its record cannot be written "
                f"({e.strerror}); {self.store.remedy(e.errno)}, then try again."
            ) from None
        self.register(session)
        self.announce_new(session)

    # ---- a session's runtime: what only lives while the daemon runs ----------------------

    @staticmethod
    def forget_end_causes(session: Session) -> None:
        """What a kill or systemd said of a run's end, forgotten once that end is recorded
        and again at each start."""
        session.killed_with, session.unit_result = 0, ""

    @staticmethod
    def settling(session: Session, settling: bool) -> None:
        """Whether what follows the end of session's last run is still to be recorded."""
        session.settling = settling

    @staticmethod
    def killed(session: Session, signal: int) -> None:
        """A kill of every process sent signal: the unit's end is explained by it."""
        session.killed_with = signal

    @staticmethod
    def unit_said(session: Session, result: str) -> None:
        """systemd's Result for the session's scope, kept until its end is reconciled."""
        session.unit_result = result

    @staticmethod
    def follow(session: Session, pane_pid: int, unfollow: Callable[[], None] | None) -> None:
        """The agent's process and how to stop following it (None: nothing follows it)."""
        session.pane_pid, session.unfollow = pane_pid, unfollow

    @staticmethod
    def unfollow(session: Session) -> None:
        if session.unfollow is not None:
            session.unfollow()
            session.unfollow = None

    @staticmethod
    def watched(session: Session, watch: Watch | None) -> None:
        """The session's pane watch, or None once it is closed."""
        session.watch = watch

    @staticmethod
    def heard(session: Session, report: HookReport) -> None:
        """The last hook the agent reported."""
        session.last_hook = report
        session.hooks_heard += 1

    @staticmethod
    def wait(session: Session, waiter: Waiter) -> None:
        session.waiters.add(waiter)

    @staticmethod
    def unwait(session: Session, waiter: Waiter) -> None:
        session.waiters.discard(waiter)

    def _tell(self, what: str, session: Session) -> None:
        """Every listener hears of the change, even when one of them fails over it: one
        broken listener must not leave the bus showing something else than the record."""
        for listener in self.listeners:
            try:
                getattr(listener, what)(session)
            except Exception:
                log.exception("session '%s': a listener failed on %s", session.name, what)

    def announce_new(self, session: Session) -> None:
        self._tell("session_added", session)

    def change(
        self, session: Session, event: Event | None = None, **fields: Unpack[RecordChange]
    ) -> bool:
        """The one way a session's record changes: fields set, event applied through the state
        machine (the stop time stamped when the session leaves the live states), the record
        written, every listener told. True when the record is on disk.

        An asked-for event (not in FACTS) that cannot be written is put back as it was and
        raises StorageFull: nothing changes unless the disk knows it. A fact, or fields alone
        (an id learned, a flag), stands whatever the disk says: the daemon acts on it, and the
        record is written again every RETRY_SEC until it is; False then.
        """
        record = session.record
        before = dataclasses.replace(record)
        for key, value in fields.items():
            if not hasattr(record, key):
                raise AttributeError(f"a session record has no field '{key}'")
            setattr(record, key, value)
        if event is not None:
            record.state = transition(before.state, event)  # InvalidTransition: nothing set
            if record.state not in LIVE_STATES and before.state in LIVE_STATES:
                record.stopped_at = fields.get("stopped_at") or now_usec()
            if record.state != before.state:
                log.info("session '%s': %s -> %s", session.name, before.state, record.state)
        try:
            self.store.save(record)
        except OSError as e:
            if event is not None and event not in FACTS:
                vars(record).update(vars(before))
                self.announce(session)
                raise StorageFull(
                    f"Session '{session.name}': its record cannot be written ({e.strerror}); "
                    f"{self.store.remedy(e.errno)}, then try again."
                ) from None
            if session.name not in self._unsaved:
                log.error("session '%s': Failed to write its record: %s", session.name, e)
            self._unsaved.add(session.name)
            self._retry_later()
            self.announce(session)
            return False
        self._unsaved.discard(session.name)
        self.announce(session)
        return True

    def _retry_later(self) -> None:
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(RETRY_SEC, self._write_unsaved)

    def _write_unsaved(self) -> None:
        self._retry = None
        for name in sorted(self._unsaved):
            session = self.sessions.get(name)
            try:
                if session is not None:
                    self.store.save(session.record)
            except OSError:
                continue
            self._unsaved.discard(name)
            log.info("session '%s': its record is written again", name)
        if self._unsaved:
            self._retry_later()

    def announce(self, session: Session) -> None:
        """Tell every listener that what the session shows changed (its activity), without
        writing anything."""
        self._tell("session_changed", session)

    def forget(self, session: Session) -> None:
        """Drop the session and delete its record."""
        session.removed = True
        self.sessions.pop(session.name, None)
        self._unsaved.discard(session.name)
        self.store.delete(session.name)
        self._tell("session_removed", session)
        log.info("session '%s': removed", session.name)

    @contextlib.contextmanager
    def operation(self, owner: int) -> Iterator[None]:
        """One call on owner's sessions that waits on systemd. Counted per owner, so one
        user's stuck calls never refuse another's; LimitsExceeded past either cap."""
        mine = self._operations.get(owner, 0)
        if mine >= MAX_OPERATIONS_PER_USER:
            raise LimitsExceeded(
                f"{MAX_OPERATIONS_PER_USER} operations on this user's sessions are already "
                "in flight; retry in a moment."
            )
        if sum(self._operations.values()) >= MAX_OPERATIONS:
            raise LimitsExceeded(
                f"{MAX_OPERATIONS} operations are already in flight; retry in a moment."
            )
        self._operations[owner] = mine + 1
        try:
            yield
        finally:
            left = self._operations[owner] - 1
            if left:
                self._operations[owner] = left
            else:
                del self._operations[owner]
