"""A scope of its own for each process that runs a user's code on the user's behalf.

Looking a program up runs the owner's login shell (and with it their rc files), ListAgents runs
each CLI's ``--version``, a worktree runs git (and the owner's git hooks) and its setup
command, and discovery runs a CLI's own session listing. Run by the system daemon as plain
children, they would live in ``hostagent.service``: outside the user's caps, counted against the
daemon's TasksMax, surviving as strays whatever they fork, and a child that ignores SIGTERM
would hold up ``systemctl stop hostagent``.

So on the system daemon each such process is held before it runs anything (as a session's
first process is), moved into a transient scope under its owner's slice, and let go. The scope
carries a time bound that systemd itself enforces (``RuntimeMaxSec``, so it holds even if the
daemon dies meanwhile), and it is stopped when the process ends or is cut off, which takes
whatever it left behind with it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable

from dbus_fast import Variant

from hostagent.daemon.host.systemd import Systemd, SystemdError
from hostagent.identity import Owner

log = logging.getLogger(__name__)

STOP_TIMEOUT_SEC = 2  # what a helper that ignores SIGTERM gets before SIGKILL
TASKS_MAX = 256  # a git hook or a login shell may start a few; a fork bomb stops here
GRACE_SEC = 5  # systemd's bound is the caller's timeout and this


def helper_unit(uid: int) -> str:
    """A helper scope's name: never a session's (':' is in no session name), so recovery
    never mistakes one for a session whose record is missing."""
    return f"hostagent-helper:u{uid}:{secrets.token_hex(4)}.scope"


def helper_properties(
    owner: Owner, slice_: str, what: str, timeout: float
) -> list[tuple[str, Variant]]:
    return [
        ("Description", Variant("s", f"hostagent: {what} for {owner.name}")),
        ("Slice", Variant("s", slice_)),
        ("CollectMode", Variant("s", "inactive-or-failed")),
        ("RuntimeMaxUSec", Variant("t", int((timeout + GRACE_SEC) * 1_000_000))),
        ("TimeoutStopUSec", Variant("t", STOP_TIMEOUT_SEC * 1_000_000)),
        ("TasksMax", Variant("t", TASKS_MAX)),
    ]


class Confiner:
    """Puts a held helper into a scope of its own, and ends the scope after it."""

    def __init__(self, systemd: Systemd, user_slice: Callable[[int], Awaitable[str]]) -> None:
        self.systemd = systemd
        self.user_slice = user_slice  # the owner's slice, its caps set; SpawnFailed if not

    async def enter(self, owner: Owner, pid: int, what: str, timeout: float) -> str:
        """The scope now holding pid; SystemdError when systemd would not make it."""
        slice_ = await self.user_slice(owner.uid)
        unit = helper_unit(owner.uid)
        job = await self.systemd.start_scope(
            unit, pid, helper_properties(owner, slice_, what, timeout)
        )
        result = await self.systemd.wait_job(job, timeout)
        if result != "done":
            raise SystemdError(f"Start job for unit {unit} finished with '{result}'")
        return unit

    async def leave(self, unit: str) -> None:
        """End the scope and whatever is left in it; not waited for: its stop is systemd's."""
        try:
            await self.systemd.stop_unit(unit)
        except SystemdError as e:
            log.debug("Failed to stop %s: %s", unit, e)
