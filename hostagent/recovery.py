"""The recovery decision: what a record becomes when the daemon starts. Pure; see DESIGN §5.

Liveness comes from systemd's unit state alone. The boot id only tells *why* a unit that is gone
went away (a reboot, or something unseen while the daemon was down); it never decides whether a
session is alive, so a restored state dir or a rolled-back VM does not strand live sessions.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .session import LIVE_STATES, DormantReason, State

LIVE_UNIT_STATES = frozenset({"active", "activating", "reloading"})


class Action(enum.StrEnum):
    ADOPT = "adopt"  # the unit runs: the session is running
    DORMANT = "dormant"  # the unit is gone while the record says it ran
    KEEP = "keep"  # nothing to change


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: DormantReason = DormantReason.NONE


def decide(record_state: State, record_boot_id: str, unit_state: str, boot_id_now: str) -> Decision:
    """unit_state is systemd's ActiveState of the session's scope, or "" when not loaded."""
    if unit_state in LIVE_UNIT_STATES:
        return Decision(Action.ADOPT)
    if record_state in LIVE_STATES:
        if record_boot_id != boot_id_now:
            return Decision(Action.DORMANT, DormantReason.REBOOT)
        return Decision(Action.DORMANT, DormantReason.LOST)
    return Decision(Action.KEEP)
