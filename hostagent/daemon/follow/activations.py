"""Services a session's agent has a bus start for it, outside its scope.

A D-Bus client that calls a name nobody owns has the bus start the service behind that name.
The service runs where the bus's services run (the owner's user manager for her session bus,
the system for the system bus), not in the session's scope, and it outlives the session:
Codex asking whether a screen reader runs started the accessibility bus that way. No cgroup
look can see it, since the service was never the agent's child. The bus daemon does log each
activation with the pid that asked for it, so this follows those lines in the journal and
flags the session whose scope holds the asking process (its ``Containment`` property and a
journal line), as the line comes, while the asker is still there to be looked up.

What this cannot see, and docs/security.md says so: a bus run by dbus-broker, which logs no
asker; an asker gone before its line is read; and journal lines the daemon may not read (a
user-mode daemon reads only its user's journal).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from hostagent.daemon.follow.containment import Guard
from hostagent.daemon.host.ports import ScopeRunner
from hostagent.daemon.state.registry import Registry
from hostagent.session import State

log = logging.getLogger(__name__)

RESTART_SEC = 30.0  # before journalctl is run again after it ended
MAX_LINE = 1 << 20  # a journal entry as JSON, at most; a longer one restarts the follow
# The lines a command (argv) writes as they come, each at most max_line bytes.
FollowLines = Callable[[list[str], int], AsyncIterator[bytes]]

# dbus-daemon's own words, with or without systemd activation: "[session uid=1001 pid=490]
# Activating via systemd: service name='org.a11y.Bus' unit='at-spi-dbus-bus.service'
# requested by ':1.2' (uid=1001 pid=507 comm="codex")".
_ACTIVATING = re.compile(
    r"^\[(?P<bus>system|session)[^\]]*\] Activating (?:via systemd: )?"
    r"service name='(?P<service>[^']+)'(?: unit='(?P<unit>[^']+)')?"
    r" requested by '[^']*' \(uid=\d+ pid=(?P<pid>\d+)"
)


@dataclass(frozen=True)
class Activation:
    bus: str  # "system" or "session"
    service: str  # the bus name asked for
    unit: str  # the unit systemd started for it, or "" when the bus ran it itself
    pid: int  # the process that asked


def parse(message: str) -> Activation | None:
    """The activation a bus daemon's journal line tells of, or None for any other line."""
    found = _ACTIVATING.match(message)
    if found is None:
        return None
    return Activation(found["bus"], found["service"], found["unit"] or "", int(found["pid"]))


def describe(activation: Activation) -> str:
    """What the session's Containment says: the service, where it runs, and that it stays."""
    bus = "the owner's session bus" if activation.bus == "session" else "the system bus"
    unit = f" ({activation.unit})" if activation.unit else ""
    return (
        f"the agent had {bus} start {activation.service}{unit}, which runs outside the "
        "session's scope and outlives it"
    )


def journal_follow_argv(cursor: str) -> list[str]:
    """journalctl following the bus daemons' lines: new ones only, or those after cursor."""
    where = [f"--after-cursor={cursor}"] if cursor else ["--lines=0"]
    return ["journalctl", "--follow", "--output=json", "--no-pager", *where, "_COMM=dbus-daemon"]


class ActivationWatch:
    """Follows the bus daemons' activation lines for as long as the daemon runs."""

    def __init__(
        self, registry: Registry, scopes: ScopeRunner, guard: Guard, follow: FollowLines
    ) -> None:
        """follow: the lines a command writes, as they come (host/journal.py's follow)."""
        self.registry = registry
        self.scopes = scopes
        self.guard = guard
        self.follow = follow
        self.cursor = ""  # the last entry read, so a restarted follow misses nothing

    async def run(self) -> None:
        while True:
            try:
                await self._follow()
            except FileNotFoundError:
                log.warning("No journalctl: services an agent has a bus start are not seen")
                return
            except Exception:
                log.exception("Failed to follow the bus daemons' activations")
            await asyncio.sleep(RESTART_SEC)

    async def _follow(self) -> None:
        async for line in self.follow(journal_follow_argv(self.cursor), MAX_LINE):
            await self.read(line)

    async def read(self, line: bytes) -> None:
        """One journal entry, as journalctl's JSON."""
        try:
            entry = json.loads(line)
        except ValueError:
            return
        self.cursor = entry.get("__CURSOR", self.cursor)
        message = entry.get("MESSAGE")
        activation = parse(message) if isinstance(message, str) else None
        if activation is None:
            return
        session = self.registry.by_unit(self.scopes.unit_of_pid(activation.pid))
        if session is None:
            return
        async with session.lock:  # a flag is a change like any other
            if session.record.state is State.RUNNING and not session.removed:
                self.guard.flag(session, describe(activation))
