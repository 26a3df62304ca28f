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

from hostagent.activity import HookReport
from hostagent.daemon.state.live import Session, Waiter, Watch
from hostagent.daemon.state.paths import SessionPaths
from hostagent.daemon.state.store import SidecarStore
from hostagent.errors import LimitsExceeded, NoSuchSession, StorageFull, quote
from hostagent.identity import Owner
from hostagent.session import (
    FACTS,
    LIVE_STATES,
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
SOON_SEC = 1.0  # a change made with change_soon reaches the disk within this


class Listener(Protocol):
    def session_added(self, session: Session) -> None: ...
    def session_removed(self, session: Session) -> None: ...
    def session_changed(self, session: Session) -> None: ...


class Registry:
    def __init__(self, store: SidecarStore, runtime_root: Path, system: bool) -> None:
        self.store = store
        self.runtime_root = runtime_root
        self.system = system
        self.sessions: dict[str, Session] = {}
        self.listeners: list[Listener] = []
        self.reserved: dict[str, int] = {}  # names a create is validating -> their owner
        self._operations: dict[int, int] = {}  # owner uid -> operations in flight
        self._unsaved: set[str] = set()  # sessions whose record in memory is newer than on disk
        self._failed: set[str] = set()  # of those, the ones whose last write failed
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
        return SessionPaths.found(self.runtime_dir(uid), name)

    def start_paths(self, session: Session) -> SessionPaths:
        """The paths of a session about to start: its own directory's, even for one that an
        older hostagent started and kept its files side by side (SessionPaths.found)."""
        if session.paths.legacy:
            session.paths = SessionPaths.of(session.paths.runtime_dir, session.name)
        return session.paths

    def lineage(self, session: Session) -> list[str]:
        """The uuids of the sessions session was made from inside, its parent first; the chain
        ends at one that is gone (its own parent is no longer known)."""
        by_uuid = {s.record.uuid: s for s in self.sessions.values() if not s.removed}
        chain: list[str] = []
        parent = session.record.parent
        while parent and parent not in chain:
            chain.append(parent)
            above = by_uuid.get(parent)
            parent = above.record.parent if above is not None else ""
        return chain

    def name_of(self, uuid: str) -> str:
        """The name of the session with uuid, "" when there is none (any more). Asked for every
        session's Parent in a list: one without a parent costs nothing."""
        if not uuid:
            return ""
        return next((s.name for s in self.sessions.values() if s.record.uuid == uuid), "")

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
        _set(record, fields)
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
            self._unwritten(session.name, e)
            self.announce(session)
            return False
        self._unsaved.discard(session.name)
        self._failed.discard(session.name)
        self.announce(session)
        return True

    def change_soon(self, session: Session, **fields: Unpack[RecordChange]) -> None:
        """Fields set and shown at once, and written within SOON_SEC together with whatever
        else changes meanwhile. For facts that may come many times a second, where only the
        newest counts: the conversation ids of a session whose hooks flood (hookflow.py). Each
        write costs everyone's calls a millisecond of the daemon's one thread; a crash before
        it loses that second's ids, which the next hook or discovery teaches again."""
        _set(session.record, fields)
        self._unsaved.add(session.name)
        self._write_within(SOON_SEC)
        self.announce(session)

    def _unwritten(self, name: str, e: OSError) -> None:
        if name not in self._failed:
            log.error("session '%s': Failed to write its record: %s", name, e)
        self._unsaved.add(name)
        self._failed.add(name)
        self._write_within(RETRY_SEC)

    def _write_within(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        if self._retry is not None:
            if self._retry.when() <= when:
                return
            self._retry.cancel()
        self._retry = loop.call_at(when, self.write_unsaved)

    def write_unsaved(self) -> None:
        """Write every record newer in memory than on disk: the timer's work, and the stop's."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        for name in sorted(self._unsaved):
            self._unsaved.discard(name)
            session = self.sessions.get(name)
            if session is None:
                continue
            try:
                self.store.save(session.record)
            except OSError as e:
                self._unwritten(name, e)
                continue
            if name in self._failed:
                self._failed.discard(name)
                log.info("session '%s': its record is written again", name)

    def announce(self, session: Session) -> None:
        """Tell every listener that what the session shows changed (its activity), without
        writing anything."""
        self._tell("session_changed", session)

    def forget(self, session: Session) -> None:
        """Drop the session and delete its record."""
        session.removed = True
        self.sessions.pop(session.name, None)
        self._unsaved.discard(session.name)
        self._failed.discard(session.name)
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


def _set(record: SessionRecord, fields: RecordChange) -> None:
    for key, value in fields.items():
        if not hasattr(record, key):
            raise AttributeError(f"a session record has no field '{key}'")
        setattr(record, key, value)
