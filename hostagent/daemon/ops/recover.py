"""What the daemon does once at start: match every record against systemd, apply
``recovery.decide`` and the dormant policy, then deal with hostagent scopes that have no record.

Everything here runs before the bus name is taken and before READY=1, so no client ever sees a
session in a state that recovery is about to change. Every change goes through
``Registry.change``, every end through ``Endings.finish`` and a prune through the remove's
tail, as any other; once every record is decided, each session is announced to the
registry's listeners as a new one is. Unit signals that arrive meanwhile are held by the
``Reconciler`` and drained after (``Reconciler.recovered``). Resuming under the ``auto``
policy is the exception to "before READY": it can take minutes, so the daemon does it after
(``resume_dormant``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from hostagent.config import OrphanPolicy
from hostagent.daemon.host import checkpoint
from hostagent.daemon.host.ports import ScopeRunner
from hostagent.daemon.host.tmux import TmuxError
from hostagent.daemon.ops.ending import Endings
from hostagent.daemon.ops.leftovers import Leftovers
from hostagent.daemon.ops.lifecycle import Lifecycle
from hostagent.daemon.ops.reconcile import Reconciler
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.errors import HostAgentError
from hostagent.identity import Owner
from hostagent.recovery import Action, Decision, DormantAction, decide, dormant_action
from hostagent.session import (
    DormantReason,
    Event,
    RecordChange,
    SessionRecord,
    State,
    name_from_unit,
    news,
    now_usec,
)

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    adopted: int = 0
    dormant: int = 0
    stopped: int = 0
    failed: int = 0  # creates whose first start never finished
    unchanged: int = 0
    pruned: int = 0
    to_resume: list[str] = field(default_factory=list)
    orphans_stopped: list[str] = field(default_factory=list)
    orphans_adopted: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # records taken from their copies
    collected: list[str] = field(default_factory=list)  # creates a crash cut short, undone

    def summary(self, policy: str) -> str:
        return (
            f"Recovery (policy {policy}): {self.adopted} adopted, {self.dormant} dormant, "
            f"{len(self.to_resume)} to resume, {self.pruned} pruned, {self.stopped} stopped, "
            f"{self.failed} failed, {self.unchanged} unchanged, "
            f"{len(self.orphans_adopted)} orphan scopes adopted, "
            f"{len(self.orphans_stopped)} orphan scopes stopped, "
            f"{len(self.restored)} records restored from their copies, "
            f"{len(self.collected)} creates cut short undone"
        )


class Recovery:
    """One recovery pass over the store and systemd's units."""

    def __init__(
        self,
        registry: Registry,
        scopes: ScopeRunner,
        settings: Settings,
        reconciler: Reconciler,
        endings: Endings,
        forget: Callable[[Session], Awaitable[str]],
        leftovers: Leftovers,
        boot_id: str,
    ) -> None:
        self.registry = registry
        self.scopes = scopes
        self.systemd = scopes.systemd
        self.config = settings.config
        self.reconciler = reconciler
        self.endings = endings
        self.forget = forget  # Lifecycle.forget: the tail of a remove
        self.leftovers = leftovers
        self.boot_id = boot_id
        self.report = RecoveryReport()

    async def run(self) -> RecoveryReport:
        records = self.registry.store.load_all()
        self.report.restored = list(self.registry.store.restored)
        sessions = [self.registry.add(record) for record in records]
        # Listed after the sessions are known: a unit that ends from here on is seen either in
        # this list or by a signal, which the reconciler holds until recovery is done.
        units = {u.name: u.active_state for u in await self.systemd.list_units("hostagent-*.scope")}
        await checkpoint.reached(checkpoint.RECOVERY_LISTED)
        policy = dormant_action(self.config.recovery_policy.value)
        for session in sessions:
            record = session.record
            decision = decide(
                record.state,
                record.boot_id,
                units.pop(record.unit, ""),
                self.boot_id,
                ran=record.started_at > 0,
            )
            await self._apply(session, decision, policy)
        live = {unit for unit, state in units.items() if state in ("active", "activating")}
        self.report.collected = await self.leftovers.collect_creates(live)
        for unit in sorted(live):
            if name_from_unit(unit):
                await self._orphan(unit)
        self.leftovers.sweep_runtime()
        # Known from here on as a session made at run time is: a listener that follows
        # something of each (its usage) hears of every one, in the state recovery left it.
        for session in list(self.registry.sessions.values()):
            self.registry.announce_new(session)
        return self.report

    async def _apply(self, session: Session, decision: Decision, policy: DormantAction) -> None:
        record = session.record
        if decision.action is Action.ADOPT:
            await self._adopt(session)
            self.report.adopted += 1
        elif decision.action is Action.STOPPED:
            log.info("session '%s': its stop finished while the daemon was away", record.name)
            await self.endings.finish(session)
            self.report.stopped += 1
        elif decision.action is Action.NEVER_RAN:
            log.info("session '%s': the daemon's end cut its first start short", record.name)
            self.registry.change(
                session,
                Event.START_FAILED,
                last_error="The daemon stopped before the session's first start finished; "
                f"start it with 'hostagentctl resume {record.name}'",
                result="resources",
            )
            self.report.failed += 1
        elif decision.action is Action.DORMANT:
            if policy is DormantAction.PRUNE:
                log.info("session '%s': pruned by the recovery policy 'never'", record.name)
                await self.forget(session)
                self.report.pruned += 1
                return
            self.registry.change(
                session,
                Event.UNIT_LOST,
                dormant_reason=decision.reason,
                auto_resume=policy is DormantAction.RESUME,
            )
            self.report.dormant += 1
            if policy is DormantAction.RESUME:
                self.report.to_resume.append(record.name)
        else:
            self.report.unchanged += 1
            # An auto resume that a restart interrupted: the intent is on disk.
            if record.auto_resume and policy is DormantAction.RESUME:
                self.report.to_resume.append(record.name)

    async def _adopt(self, session: Session) -> None:
        """The unit runs: the session is running. Refresh what a crash mid-start may have
        missed, and reconcile after recovery when its tmux server is gone."""
        record = session.record
        if record.state is not State.RUNNING:
            log.info("session '%s': its unit %s runs; adopting it", record.name, record.unit)
        fields: RecordChange = {"dormant_reason": DormantReason.NONE}
        if record.state is State.STOPPING:  # the stop never happened: its reason is no more
            fields["last_error"] = ""
        # The tmux server we recorded still runs in that unit: the same scope, nothing to
        # refresh. Otherwise the daemon died inside a start (or the record is older than the
        # unit): ask systemd and tmux for the truth.
        if not self.scopes.leader_alive_in(record.unit, record.leader_pid):
            invocation = await self.systemd.invocation_id(record.unit)
            if invocation and invocation != record.invocation_id:
                fields["invocation_id"] = invocation
                fields["started_at"] = record.started_at or now_usec()
            try:
                pid = await self.scopes.tmux.server_pid(session.owner, session.paths.socket)
            except (TmuxError, KeyError):
                pid = 0
            if pid:  # as the session's own PID namespace numbers it, if it has one
                pid = self.scopes.numbered_among(await self.systemd.unit_pids(record.unit), pid)
            fields["leader_pid"] = pid if self.scopes.leader_alive_in(record.unit, pid) else 0
            if not fields["leader_pid"]:
                self.reconciler.queue(session)
        new = news(record, fields)
        if new or record.state is not State.RUNNING:  # a restart with nothing new writes nothing
            self.registry.change(session, Event.ADOPT, **new)

    async def _orphan(self, unit: str) -> None:
        """A live hostagent scope with no record: user work, adopted unless the admin opted
        into stopping such scopes. One whose record was just quarantined is always adopted:
        a damaged record never costs a live session."""
        quarantined = name_from_unit(unit) in self.registry.store.quarantined
        adopt = self.config.orphans is OrphanPolicy.ADOPT or quarantined
        if adopt and await self._adopt_orphan(unit):
            self.report.orphans_adopted.append(unit)
            return
        if quarantined:
            log.error(
                "Scope %s lost its record and could not be adopted; leaving it running "
                "(stop it with 'systemctl stop %s')",
                unit,
                unit,
            )
            return
        log.warning("Scope %s has no record; stopping it", unit)
        await self.systemd.stop_unit(unit)
        self.report.orphans_stopped.append(unit)

    async def _adopt_orphan(self, unit: str) -> bool:
        """A minimal record for a scope with none: who runs it, what, and where.

        Its tmux server must be one of ours (it answers on the socket hostagent would use), so
        a stray scope with a matching name is never mistaken for a session; that one is
        stopped.
        """
        name = name_from_unit(unit)
        assert name
        pids = await self.systemd.unit_pids(unit)
        processes = [p for p in map(self.scopes.process, pids) if p is not None]
        leader = next((p for p in processes if p.cmdline[:1] and "tmux" in p.cmdline[0]), None)
        if leader is None:
            return False
        try:
            owner = Owner.from_uid(leader.uid)
        except KeyError:
            return False
        paths = self.registry.paths(owner.uid, name)
        try:
            server = await self.scopes.tmux.server_pid(owner, paths.socket)
            if server != self.scopes.ns_pid(leader.pid):
                return False
        except TmuxError:
            return False
        # The pane's process, as tmux names it: the server has other children (the output pipe).
        pane = 0
        with contextlib.suppress(TmuxError):
            pane = await self.scopes.tmux.pane_pid(owner, paths.socket)
        agent = next(
            (p for p in processes if self.scopes.ns_pid(p.pid) == pane and p.ppid == leader.pid),
            None,
        )
        command = agent.cmdline if agent is not None else []
        record = SessionRecord(
            name=name,
            uuid=str(uuid.uuid4()),
            owner=owner.uid,
            preset="shell",
            cwd=(agent.cwd if agent is not None else "") or owner.home,
            command=command,
            argv=list(command),
            last_argv=list(command),
            unit=unit,
            boot_id=self.boot_id,
            leader_pid=leader.pid,
            invocation_id=await self.systemd.invocation_id(unit),
            created_at=now_usec(),
            started_at=now_usec(),
        )
        session = self.registry.add(record, owner)
        self.registry.change(session, Event.ADOPT)
        log.warning("Scope %s has no record; adopted it as session '%s'", unit, name)
        return True


async def resume_dormant(
    lifecycle: Lifecycle, registry: Registry, names: list[str], max_parallel: int, stagger: float
) -> None:
    """The ``auto`` recovery policy: resume names, at most max_parallel at a time.

    A slot is held for stagger seconds after its resume returns, because agents that start
    together race on shared OAuth refresh tokens; a failure is logged and left ``failed``.
    """
    slots = asyncio.Semaphore(max_parallel)

    async def one(name: str) -> None:
        async with slots:
            try:
                await lifecycle.resume(registry.get(name))
            except HostAgentError as e:
                log.warning("session '%s': automatic resume failed: %s", name, e.message)
            await asyncio.sleep(stagger)

    log.info(
        "Resuming %d dormant sessions, at most %d at a time, %.1fs apart",
        len(names),
        max_parallel,
        stagger,
    )
    await asyncio.gather(*(one(n) for n in names))
    log.info("Resumed the dormant sessions")
