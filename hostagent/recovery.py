"""The recovery decision: what a record becomes when the daemon starts. Pure; docs/architecture.md draws it.

Liveness comes from systemd's unit state alone. The boot id only tells *why* a unit that is gone
went away (a reboot, or something unseen while the daemon was down); it never decides whether a
session is alive, so a restored state dir or a rolled-back VM does not strand live sessions.

A record left ``stopping`` whose unit is gone was being stopped on purpose when the daemon died;
it becomes ``stopped``, not dormant, so a stop the user asked for is never undone by a resume
policy. A create whose first start the daemon's end cut short never ran: there is no
conversation to resume into, and its caller got an error, so it is ``failed``, as a create
that fails is. ``dormant_action`` says what happens next to each session recovery made dormant.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hostagent.session import LIVE_STATES, DormantReason, State

LIVE_UNIT_STATES = frozenset({"active", "activating", "reloading"})


class Action(enum.StrEnum):
    ADOPT = "adopt"  # the unit runs: the session is running
    DORMANT = "dormant"  # the unit is gone while the record says it ran
    STOPPED = "stopped"  # the unit is gone after a stop was asked for: finish that stop
    NEVER_RAN = "never-ran"  # the unit is gone before the session's first start ran: failed
    KEEP = "keep"  # nothing to change


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: DormantReason = DormantReason.NONE


def decide(
    record_state: State, record_boot_id: str, unit_state: str, boot_id_now: str, ran: bool = True
) -> Decision:
    """unit_state is systemd's ActiveState of the session's scope, or "" when not loaded;
    ran: the session has run once (a create whose start never finished has not)."""
    if unit_state in LIVE_UNIT_STATES:
        return Decision(Action.ADOPT)
    if record_state is State.STOPPING:
        return Decision(Action.STOPPED)
    if record_state is State.STARTING and not ran:
        return Decision(Action.NEVER_RAN)
    if record_state in LIVE_STATES:
        if record_boot_id != boot_id_now:
            return Decision(Action.DORMANT, DormantReason.REBOOT)
        return Decision(Action.DORMANT, DormantReason.LOST)
    return Decision(Action.KEEP)


class DormantAction(enum.StrEnum):
    LEAVE = "leave"  # policy dormant: the user resumes it
    RESUME = "resume"  # policy auto: resumed in the background, a few at a time
    PRUNE = "prune"  # policy never: the record is deleted


def dormant_action(policy: str) -> DormantAction:
    """policy is the config's recovery.policy: dormant, auto or never."""
    return {"auto": DormantAction.RESUME, "never": DormantAction.PRUNE}.get(
        policy, DormantAction.LEAVE
    )
