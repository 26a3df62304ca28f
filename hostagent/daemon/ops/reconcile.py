"""Following systemd's word about each session's unit.

A unit signal only queues a reconcile of the session it names; the reconcile takes the session
lock, asks systemd for the unit's state and checks that the tmux server really left the scope
before calling the session stopped. While the daemon recovers at start, signals are held and
drained by one pass once recovery has looked at every record, so a unit that ends in that
window is never lost (machined queues its GC the same way).
"""

from __future__ import annotations

import asyncio
import logging

from hostagent.daemon.host.ports import ScopeRunner
from hostagent.daemon.host.systemd import SystemdError
from hostagent.daemon.ops.ending import Endings
from hostagent.daemon.state.background import Background
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.session import State

log = logging.getLogger(__name__)

GONE_STATES = frozenset({"inactive", "failed", ""})
RETRY_SEC = 5.0  # a reconcile that could not ask systemd tries again this much later


class Reconciler:
    def __init__(
        self, registry: Registry, scopes: ScopeRunner, endings: Endings, background: Background
    ) -> None:
        self.registry = registry
        self.scopes = scopes
        self.endings = endings
        self.background = background
        # Units heard of while recovery runs; None once it is done.
        self._held: set[str] | None = set()
        self._queued: set[str] = set()  # sessions whose reconcile is queued and not begun

    def on_unit(self, unit: str, active_state: str) -> None:
        """A unit signal (active_state "" when the unit was removed)."""
        if active_state not in GONE_STATES:
            return
        if self._held is not None:
            self._held.add(unit)
            return
        session = self.registry.by_unit(unit)
        if session is not None:
            self.queue(session)

    def on_result(self, unit: str, result: str) -> None:
        """systemd's Result for a session's scope, kept until its end is reconciled."""
        session = self.registry.by_unit(unit)
        if session is not None:
            self.registry.unit_said(session, result)

    def queue(self, session: Session) -> None:
        """Reconcile session soon, once; during recovery, in the pass after it."""
        if self._held is not None:
            self._held.add(session.record.unit)
            return
        if session.name not in self._queued:
            self._queued.add(session.name)
            self.background.start(self._reconcile(session), f"reconcile session '{session.name}'")

    def recovered(self) -> int:
        """Recovery is done: reconcile every session whose unit was heard of meanwhile; how
        many were queued."""
        held, self._held = self._held or set(), None
        queued = 0
        for unit in sorted(held):
            session = self.registry.by_unit(unit)
            if session is not None:
                self.queue(session)
                queued += 1
        return queued

    async def _reconcile(self, session: Session) -> None:
        async with session.lock:
            self._queued.discard(session.name)
            record = session.record
            if session.removed or record.state not in (State.RUNNING, State.STARTING):
                return
            try:
                state = await self.scopes.systemd.active_state(record.unit)
            except SystemdError as e:
                log.warning(
                    "session '%s': Failed to ask systemd about %s: %s; retrying in %.0fs",
                    session.name,
                    record.unit,
                    e,
                    RETRY_SEC,
                )
                asyncio.get_running_loop().call_later(RETRY_SEC, self.queue, session)
                return
            if state not in GONE_STATES:
                return
            if self.scopes.leader_alive_in(record.unit, record.leader_pid):
                log.warning(
                    "session '%s': %s reported %s while tmux server %d still runs in it, ignoring",
                    session.name,
                    record.unit,
                    state or "gone",
                    record.leader_pid,
                )
                return
            # A stop that was asked for ends under the session's lock, so a session still
            # running here ended by itself (or by systemd): its end is said from the unit's.
            if await self.endings.left_to_recovery(session):
                return
            await self.endings.unit_ended(
                session, session.unit_result or ("failed" if state == "failed" else "")
            )
