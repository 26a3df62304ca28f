"""What the daemon does once at start: match every record against systemd and apply
``recovery.decide``; then deal with hostagent scopes that have no record.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .config import OrphanPolicy
from .manager import Manager, Session
from .recovery import Action, decide
from .session import DormantReason, State, name_from_unit
from .store import SidecarStore
from .systemd import Systemd

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    adopted: int = 0
    dormant: int = 0
    unchanged: int = 0
    orphans: list[str] = field(default_factory=list)


async def recover(manager: Manager, store: SidecarStore, systemd: Systemd) -> RecoveryReport:
    report = RecoveryReport()
    records = store.load_all()
    for record in records:
        manager.sessions[record.name] = Session(record)
    # Listed after the sessions are known: a unit that ends from here on is seen either in
    # this list or by a signal, which the manager ignores until recovery is done.
    units = {u.name: u.active_state for u in await systemd.list_units("hostagent-*.scope")}
    for record in records:
        decision = decide(record.state, record.boot_id, units.pop(record.unit, ""), manager.boot_id)
        if decision.action is Action.ADOPT:
            if record.state is not State.RUNNING:
                log.info("session '%s': its unit %s runs; adopting it", record.name, record.unit)
            record.state = State.RUNNING
            record.dormant_reason = DormantReason.NONE
            manager.store.save(record)
            report.adopted += 1
        elif decision.action is Action.DORMANT:
            log.info(
                "session '%s': %s -> dormant (%s)",
                record.name,
                record.state.value,
                decision.reason.value,
            )
            record.state = State.DORMANT
            record.dormant_reason = decision.reason
            manager.store.save(record)
            report.dormant += 1
        else:
            report.unchanged += 1
    for unit, state in units.items():
        if state in ("active", "activating") and name_from_unit(unit):
            report.orphans.append(unit)
    for unit in report.orphans:
        if manager.config.orphans is OrphanPolicy.STOP:
            log.warning("Scope %s has no record; stopping it", unit)
            await systemd.stop_unit(unit)
        else:
            log.warning("Scope %s has no record; leaving it alone", unit)
    return report
