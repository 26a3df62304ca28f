from __future__ import annotations

import pytest

from hostagent.recovery import Action, DormantAction, decide, dormant_action
from hostagent.session import DormantReason, State

BOOT, OTHER = "b1", "b2"


@pytest.mark.parametrize(
    ("state", "boot", "unit", "action", "reason"),
    [
        pytest.param(State.RUNNING, BOOT, "active", Action.ADOPT, DormantReason.NONE, id="live"),
        pytest.param(
            State.RUNNING,
            OTHER,
            "active",
            Action.ADOPT,
            DormantReason.NONE,
            id="live-restored-state-dir",
        ),
        pytest.param(
            State.STARTING, BOOT, "activating", Action.ADOPT, DormantReason.NONE, id="activating"
        ),
        pytest.param(State.RUNNING, OTHER, "", Action.DORMANT, DormantReason.REBOOT, id="reboot"),
        pytest.param(
            State.STARTING,
            OTHER,
            "inactive",
            Action.DORMANT,
            DormantReason.REBOOT,
            id="reboot-inactive",
        ),
        pytest.param(State.STOPPING, BOOT, "", Action.STOPPED, DormantReason.NONE, id="stop-asked"),
        pytest.param(
            State.STOPPING, OTHER, "", Action.STOPPED, DormantReason.NONE, id="stop-asked-reboot"
        ),
        pytest.param(
            State.STOPPING, BOOT, "active", Action.ADOPT, DormantReason.NONE, id="stop-not-sent"
        ),
        pytest.param(State.RUNNING, BOOT, "", Action.DORMANT, DormantReason.LOST, id="lost"),
        pytest.param(
            State.RUNNING, BOOT, "failed", Action.DORMANT, DormantReason.LOST, id="lost-failed"
        ),
        pytest.param(
            State.STOPPED, BOOT, "active", Action.ADOPT, DormantReason.NONE, id="stopped-but-live"
        ),
        pytest.param(
            State.DORMANT, OTHER, "active", Action.ADOPT, DormantReason.NONE, id="dormant-but-live"
        ),
        pytest.param(State.STOPPED, OTHER, "", Action.KEEP, DormantReason.NONE, id="stopped"),
        pytest.param(State.FAILED, BOOT, "", Action.KEEP, DormantReason.NONE, id="failed"),
        pytest.param(
            State.STARTING, BOOT, "", Action.NEVER_RAN, DormantReason.NONE, id="create-cut-short"
        ),
        pytest.param(
            State.STARTING, OTHER, "", Action.NEVER_RAN, DormantReason.NONE, id="create-rebooted"
        ),
        pytest.param(State.DORMANT, BOOT, "", Action.KEEP, DormantReason.NONE, id="dormant"),
    ],
)
def test_decide(state: State, boot: str, unit: str, action: Action, reason: DormantReason) -> None:
    # The create-* rows are of a session that never ran; the others ran once.
    decision = decide(state, boot, unit, BOOT, ran=action is not Action.NEVER_RAN)
    assert decision.action is action
    assert decision.reason is reason


@pytest.mark.parametrize(
    ("policy", "action"),
    [
        ("dormant", DormantAction.LEAVE),
        ("auto", DormantAction.RESUME),
        ("never", DormantAction.PRUNE),
    ],
)
def test_dormant_action(policy: str, action: DormantAction) -> None:
    assert dormant_action(policy) is action
