"""The bus side of usage and budgets: the ``Usage`` property's value, and the Manager's
``GetUsage`` and ``LiftBudget``.

Usage is accounting, as CPUUsageNSec is: every caller sees each session's ``Usage`` as it sees
its State. The books behind GetUsage are per user, so there a caller gets its own rows, and
root, the daemon's own user and polkit's admins (manage-any) everyone's.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from dbus_fast import Variant

from hostagent.budgets import day_of
from hostagent.daemon.bus.interface import Call
from hostagent.daemon.bus.services import Services
from hostagent.daemon.state.live import Session
from hostagent.errors import AccessDenied, InvalidArgs
from hostagent.permissions import owner_may_act
from hostagent.session import DormantReason, State, now_usec
from hostagent.usage import Usage

log = logging.getLogger(__name__)


class Front(Protocol):
    """The Manager's object (bus/manager.py's BusFrontend), as these handlers use it."""

    services: Services


def usage_variants(used: Usage) -> dict[str, Variant]:
    """A Usage as a{sv}: counts as t, the model as s, and cost_usd (d) only where known."""
    out = {
        "input": Variant("t", used.input),
        "output": Variant("t", used.output),
        "cache_read": Variant("t", used.cache_read),
        "cache_write": Variant("t", used.cache_write),
        "calls": Variant("t", used.calls),
        "model": Variant("s", used.model),
    }
    if used.cost_usd is not None:
        out["cost_usd"] = Variant("d", used.cost_usd)
    return out


async def get_usage(f: Front, call: Call, since_usec: int, until_usec: int) -> list[list[Any]]:
    """(uid, preset, usage) for the hours that start in [since, until); until 0 is now."""
    until = until_usec or now_usec() + 1
    if since_usec >= until:
        raise InvalidArgs(f"The window is empty: since ({since_usec}) is not before until.")
    s = f.services
    caller = await s.auth.caller_uid(call.sender)
    # Never a password prompt: a caller who is not an admin gets its own rows.
    everyone = owner_may_act(caller, s.daemon_uid()) or await s.auth.is_admin(call.sender, False)
    ledger = s.usage.ledger
    return [
        [uid, preset, usage_variants(used)]
        for uid in ledger.owners()
        if everyone or uid == caller
        for preset, used in sorted(ledger.used(uid, since_usec, until).items())
    ]


async def lift_budget(f: Front, call: Call, uid: int) -> list[str]:
    """An admin lifts uid's budgets for the rest of the day; the sessions a budget stopped
    resume. Their names, in the order resumed."""
    s = f.services
    caller = await s.auth.caller_uid(call.sender)
    if not owner_may_act(caller, s.daemon_uid()) and not await s.auth.is_admin(
        call.sender, call.interactive
    ):
        raise AccessDenied(
            "Access denied: only root or an admin (polkit's org.hostagent.HostAgent1.manage-any) "
            "may lift a budget; ask one."
        )
    s.usage.ledger.lift(uid, day_of(now_usec()))
    log.info("Budgets of uid %d lifted for today", uid)
    stopped = [
        session
        for session in sorted(s.registry.sessions.values(), key=lambda x: x.name)
        if _stopped_for_budget(session, uid)
    ]
    resumed = []
    for session in stopped:
        try:
            await s.lifecycle.resume(session)
            resumed.append(session.name)
        except Exception as e:  # one that cannot start does not keep the others stopped
            log.warning(
                "session '%s': Failed to resume after its budget was lifted: %s", session.name, e
            )
    return resumed


def _stopped_for_budget(session: Session, uid: int) -> bool:
    record = session.record
    return (
        record.owner == uid
        and record.state is State.DORMANT
        and record.dormant_reason is DormantReason.BUDGET
    )
