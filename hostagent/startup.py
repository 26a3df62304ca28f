"""What the daemon does once at start: match every record against systemd, apply
``recovery.decide`` and the dormant policy, then deal with hostagent scopes that have no record.

Everything here runs before the bus name is taken and before READY=1, so no client ever sees a
session in a state that recovery is about to change. Resuming under the ``auto`` policy is the
exception: it can take minutes, so the daemon does it after READY (``Manager.resume_dormant``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import uuid
from dataclasses import dataclass, field

from . import scope, tmux
from .config import OrphanPolicy
from .errors import HostAgentError
from .manager import Manager, Session
from .recovery import Action, DormantAction, decide, dormant_action
from .session import DormantReason, SessionRecord, State, name_from_unit
from .spawn import Owner
from .store import SidecarStore
from .systemd import Systemd

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    adopted: int = 0
    dormant: int = 0
    stopped: int = 0
    unchanged: int = 0
    pruned: int = 0
    to_resume: list[str] = field(default_factory=list)
    orphans_stopped: list[str] = field(default_factory=list)
    orphans_adopted: list[str] = field(default_factory=list)

    def summary(self, policy: str) -> str:
        return (
            f"Recovery (policy {policy}): {self.adopted} adopted, {self.dormant} dormant, "
            f"{len(self.to_resume)} to resume, {self.pruned} pruned, {self.stopped} stopped, "
            f"{self.unchanged} unchanged, {len(self.orphans_adopted)} orphan scopes adopted, "
            f"{len(self.orphans_stopped)} orphan scopes stopped"
        )


async def recover(manager: Manager, store: SidecarStore, systemd: Systemd) -> RecoveryReport:
    report = RecoveryReport()
    records = store.load_all()
    for record in records:
        manager.sessions[record.name] = Session(record)
    # Listed after the sessions are known: a unit that ends from here on is seen either in
    # this list or by a signal, which the manager ignores until recovery is done.
    units = {u.name: u.active_state for u in await systemd.list_units("hostagent-*.scope")}
    policy = dormant_action(manager.config.recovery_policy.value)
    for record in records:
        decision = decide(record.state, record.boot_id, units.pop(record.unit, ""), manager.boot_id)
        session = manager.sessions[record.name]
        if decision.action is Action.ADOPT:
            await _adopt(manager, session)
            report.adopted += 1
        elif decision.action is Action.STOPPED:
            log.info("session '%s': its stop finished while the daemon was away", record.name)
            record.state = State.STOPPED
            record.stopped_at = record.stopped_at or scope.now_usec()
            store.save(record)
            report.stopped += 1
        elif decision.action is Action.DORMANT:
            log.info(
                "session '%s': %s -> dormant (%s)",
                record.name,
                record.state.value,
                decision.reason.value,
            )
            record.state = State.DORMANT
            record.dormant_reason = decision.reason
            record.stopped_at = record.stopped_at or scope.now_usec()
            if policy is DormantAction.PRUNE:
                log.info("session '%s': pruned by the recovery policy 'never'", record.name)
                del manager.sessions[record.name]
                store.delete(record.name)
                tmux.remove_socket(manager.socket_of(session))
                report.pruned += 1
                continue
            store.save(record)
            report.dormant += 1
            if policy is DormantAction.RESUME:
                report.to_resume.append(record.name)
        else:
            report.unchanged += 1
    for unit, state in sorted(units.items()):
        name = name_from_unit(unit)
        if state not in ("active", "activating") or not name:
            continue
        if manager.config.orphans is OrphanPolicy.ADOPT and await _adopt_orphan(manager, unit):
            report.orphans_adopted.append(unit)
        else:
            log.warning("Scope %s has no record; stopping it", unit)
            await systemd.stop_unit(unit)
            report.orphans_stopped.append(unit)
    return report


async def _adopt(manager: Manager, session: Session) -> None:
    """The unit runs: the session is running. Refresh what a crash mid-start may have missed."""
    record = session.record
    before = dataclasses.replace(record)
    if record.state is not State.RUNNING:
        log.info("session '%s': its unit %s runs; adopting it", record.name, record.unit)
    record.state = State.RUNNING
    record.dormant_reason = DormantReason.NONE
    # The tmux server we recorded still runs in that unit: the same scope, nothing to refresh.
    # Otherwise the daemon died inside a start (or the record is older than the unit): ask
    # systemd and tmux for the truth.
    if not scope.leader_alive_in(record.unit, record.leader_pid):
        invocation = await manager.systemd.invocation_id(record.unit)
        if invocation and invocation != record.invocation_id:
            record.invocation_id = invocation
            record.started_at = record.started_at or scope.now_usec()
        try:
            pid = await tmux.server_pid(manager.owner_of(session), manager.socket_of(session))
        except (tmux.TmuxError, ValueError, KeyError):
            pid = 0
        record.leader_pid = pid if scope.leader_alive_in(record.unit, pid) else 0
    if record != before:  # a restart with nothing new writes nothing
        manager.store.save(record)


async def _adopt_orphan(manager: Manager, unit: str) -> bool:
    """A minimal record for a scope with none: who runs it, what, and where.

    Its tmux server must be one of ours (it answers on the socket hostagent would use), so a
    stray scope with a matching name is never mistaken for a session; that one is stopped.
    """
    name = name_from_unit(unit)
    assert name
    processes = [
        p for p in map(scope.process, await manager.systemd.unit_pids(unit)) if p is not None
    ]
    leader = next((p for p in processes if p.cmdline[:1] and "tmux" in p.cmdline[0]), None)
    if leader is None:
        return False
    try:
        owner = Owner.from_uid(os.stat(f"/proc/{leader.pid}").st_uid)
    except (OSError, KeyError):
        return False
    record = SessionRecord(
        name=name,
        uuid=str(uuid.uuid4()),
        owner=owner.uid,
        preset="shell",
        cwd=owner.home,
        unit=unit,
        state=State.RUNNING,
        boot_id=manager.boot_id,
        leader_pid=leader.pid,
        invocation_id=await manager.systemd.invocation_id(unit),
        created_at=scope.now_usec(),
        started_at=scope.now_usec(),
    )
    session = Session(record)
    try:
        if await tmux.server_pid(owner, manager.socket_of(session)) != leader.pid:
            return False
    except (tmux.TmuxError, ValueError):
        return False
    agent = next((p for p in processes if p.ppid == leader.pid), None)
    if agent is not None:
        record.command = agent.cmdline
        record.argv = list(agent.cmdline)
        record.last_argv = list(agent.cmdline)
        record.cwd = agent.cwd or record.cwd
    manager.sessions[name] = session
    manager.store.save(record)
    log.warning("Scope %s has no record; adopted it as session '%s'", unit, name)
    return True


async def resume_dormant(
    manager: Manager, names: list[str], max_parallel: int, stagger: float
) -> None:
    """The ``auto`` recovery policy: resume names, at most max_parallel at a time.

    A slot is held for stagger seconds after its resume returns, because agents that start
    together race on shared OAuth refresh tokens; a failure is logged and left ``failed``.
    """
    slots = asyncio.Semaphore(max_parallel)

    async def one(name: str) -> None:
        async with slots:
            try:
                await manager.lifecycle.resume(name)
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
