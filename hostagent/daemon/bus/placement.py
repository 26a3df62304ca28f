"""Which session a bus connection comes from: decided once per connection, failing closed.

A call from inside a session has fewer rights than its owner outside every session
(permissions.py), so the daemon must never take a call from inside a session for one from
outside. The bus names the process that opened a connection (``GetConnectionCredentials``),
and that process's cgroup names its session. But a connection outlives the process that opened
it (a child keeps the socket and calls), and its pid is then free, or another process's:
dbus-daemon 1.15 and later refuse to name a pid whose process has exited, while dbus-daemon
1.14 (Debian 12) still names it.

So a connection is placed at its first call, and only when the process the bus names is
certainly the one that opened it:

- where the bus holds the process by a pidfd (dbus-daemon 1.15 and later, dbus-broker: the
  ``ProcessFD`` of GetConnectionCredentials), that pidfd is the process, and no pid can stand
  in for it: alive, it is read under it; gone, the call is refused; outside the daemon's PID
  namespace (its pid there is 0), it is outside every session, which the daemon starts in its
  own namespace or below;
- where the bus gives a pid only, the process at that pid must be alive, held by a pidfd of
  the daemon's while its cgroup and start time are read, and have started no later than the
  connection appeared on the bus (a process that started after cannot have opened it: its pid
  was reused);
- where the bus names no process at all, the peer is outside the daemon's PID namespace
  (dbus-daemon 1.14, the only bus that holds no pidfd, still names an exited process's pid),
  so outside every session. When each unique name appears, the bus
driver says so (``NameOwnerChanged`` from no owner), and the daemon notes the time; a name that
appeared before the daemon listened, or whose note was dropped to keep the table bounded,
appeared no later than the *floor*, the latest time the daemon stopped knowing of. A
connection that cannot be placed is refused (``AccessDenied``), never taken as its owner's.

Placed once, a connection stays where it was placed, whatever its process does later (the
session is pinned to the connection): a socket handed on keeps the session it came from.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus

from hostagent.bus.call import add_match
from hostagent.daemon.host import procfs
from hostagent.errors import AccessDenied

DBUS = "org.freedesktop.DBus"
ARRIVALS = f"type='signal',sender='{DBUS}',member='NameOwnerChanged',arg1=''"
SIGHTINGS_MAX = 65536  # unique names whose arrival is remembered; older ones fall to the floor
_TICK = os.sysconf("SC_CLK_TCK")


def now() -> int:
    """The time since boot in the clock ticks /proc/PID/stat counts a process's start in."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _TICK)


@dataclass(frozen=True)
class Opener:
    """The process that opened a connection, as the bus names it: a pidfd the daemon now
    holds (-1: none), and its pid (0: none)."""

    pid: int = 0
    pidfd: int = -1


@dataclass(frozen=True)
class Seen:
    """A connection's process as read under its pidfd: when it started (0 where the bus's own
    pidfd shows that no pid stood in for it), and its cgroup ("" outside the daemon's PID
    namespace)."""

    started: int
    cgroup: str


OUTSIDE = Seen(0, "")  # a process outside the daemon's PID namespace: outside every session


def placeable(appeared_by: int, seen: Seen | None) -> bool:
    """Whether a connection that appeared on the bus no later than appeared_by was opened by
    the process seen (None: gone)."""
    return seen is not None and seen.started <= appeared_by


def read_opener(opener: Opener) -> Seen | None:
    """What the process that opened a connection is (Placement's read): read under the bus's
    pidfd where it gave one (which it closes), else under one of the daemon's for its pid, else
    outside the daemon's PID namespace; None when it is gone."""
    if opener.pidfd >= 0:
        try:
            return _read_held(opener.pidfd)
        finally:
            os.close(opener.pidfd)
    if opener.pid > 0:
        return read_pinned(opener.pid)
    return OUTSIDE


def _read_held(pidfd: int) -> Seen | None:
    """The process the bus's pidfd holds: its pid in the daemon's namespace is fdinfo's Pid
    (-1 once it has exited, 0 outside the namespace). Its start time does not matter: no
    other process can stand behind a pidfd."""
    pid = procfs.pidfd_pid(pidfd)
    if pid == 0:
        return OUTSIDE
    if pid is None or pid < 0:
        return None
    return _read_under(pidfd, pid, with_start=False)


def read_pinned(pid: int) -> Seen | None:
    """pid's start time and cgroup, read while a pidfd holds the process, and only if it was
    still that process after the read; None when it is gone."""
    if pid <= 0:
        return None
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        return _read_under(fd, pid, with_start=True)
    finally:
        os.close(fd)


def _read_under(pidfd: int, pid: int, with_start: bool) -> Seen | None:
    """pid's cgroup (and start time), kept only if pidfd's process is alive after the reads:
    then they were of it, not of a process that took its pid since."""
    started = procfs.started(pid) if with_start else 0
    cgroup = procfs.cgroup_of(pid)
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        return None
    return None if started is None else Seen(started, cgroup)


UNPLACED = (
    "Cannot tell which session this call comes from: the process that opened its bus "
    "connection has exited; call from a process that opens its own connection."
)


class Placement:
    """The unit each connection's first call came from ("" outside every session), kept for
    as long as the connection lasts. Its edges, given by the daemon (server.py) or a test:
    ask is the bus's word on the process that opened a connection (Authorizer's
    caller_process), read is read_opener, clock is now, unit_of maps a cgroup path to the
    session scope it names, and bound is how many arrivals and placements are kept."""

    def __init__(
        self,
        bus: MessageBus,
        ask: Callable[[str], Awaitable[Opener]],
        read: Callable[[Opener], Seen | None],
        clock: Callable[[], int],
        unit_of: Callable[[str], str | None],
        bound: int = SIGHTINGS_MAX,
    ) -> None:
        self.bus = bus
        self._ask = ask
        self._read = read
        self._clock = clock
        self._unit_of = unit_of
        self._bound = bound
        self._arrivals: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._floor = clock()
        self._units: dict[str, str] = {}
        self._placing: dict[str, asyncio.Future[str]] = {}
        bus.add_message_handler(self._on_message)

    async def follow(self) -> None:
        """Listen for connections as they appear; from here on, an unknown name appeared
        before this moment."""
        await add_match(self.bus, ARRIVALS)
        self._floor = self._clock()

    def appeared_by(self, sender: str) -> int:
        return self._arrivals.get(sender, self._floor)

    async def unit(self, sender: str) -> str:
        """The scope sender's connection comes from, "" outside every session; AccessDenied
        when that cannot be known for certain. A caller's calls that come at once wait for one
        placement (a burst of them asks the bus once)."""
        unit = self._units.get(sender)
        if unit is not None:
            return unit
        placing = self._placing.get(sender)
        if placing is None:
            placing = asyncio.ensure_future(self._place(sender))
            self._placing[sender] = placing
            placing.add_done_callback(lambda _: self._placing.pop(sender, None))
        # Shielded: one caller's call cancelled does not cancel the others' placement.
        return await asyncio.shield(placing)

    async def _place(self, sender: str) -> str:
        seen = self._read(await self._ask(sender))
        if not placeable(self.appeared_by(sender), seen):
            raise AccessDenied(UNPLACED)
        assert seen is not None
        unit = self._unit_of(seen.cgroup) or ""
        # Known callers are forgotten as they leave the bus (below); this bounds a table of
        # callers that never leave.
        if len(self._units) >= self._bound:
            self._units.pop(next(iter(self._units)))
        self._units[sender] = unit
        return unit

    def _on_message(self, msg: Message) -> None:
        if (
            msg.message_type != MessageType.SIGNAL
            or msg.sender != DBUS
            or msg.member != "NameOwnerChanged"
            or len(msg.body) != 3
        ):
            return
        name, old, new = msg.body
        if not isinstance(name, str) or not name.startswith(":"):
            return
        if not old and new:
            self._arrivals[name] = self._clock()
            while len(self._arrivals) > self._bound:
                _, when = self._arrivals.popitem(last=False)
                self._floor = max(self._floor, when)
        elif old and not new:
            self._arrivals.pop(name, None)
            self._units.pop(name, None)
