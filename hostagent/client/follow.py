"""A client's live picture of the daemon: every session kept current from the bus's signals,
and the daemon itself followed through NameOwnerChanged (docs/restart-contract.md).

The connection is to the bus, not to the daemon, so it outlives a daemon restart. When the
name loses its owner the picture is marked ``gone`` and kept; when a new owner appears it is
re-read from scratch, and a different Version is reported as an update. Losing the bus itself
(dbus-daemon restarting) makes the follower reconnect with a growing delay.

Memory and CPU are read from systemd through the daemon's properties, which do not signal
changes; ``refresh_counters`` reads them when a caller wants fresh ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dbus_fast import Message, MessageType

from hostagent import BUS_NAME, MANAGER_INTERFACE, MANAGER_PATH, SESSION_INTERFACE, UINT64_MAX
from hostagent.bus.call import DBUS, PROPERTIES, add_match, name_owner
from hostagent.client.library import Client, plain
from hostagent.errors import HostAgentError

log = logging.getLogger(__name__)


class Link(enum.StrEnum):
    CONNECTED = "connected"
    GONE = "gone"  # the bus is there, the daemon is not
    RECONNECTING = "reconnecting"  # reading the daemon again, or finding the bus again


@dataclass
class SessionView:
    name: str
    path: str
    owner: int = 0
    preset: str = ""
    state: str = ""
    activity: str = ""
    started_at: int = 0  # µs since the epoch
    memory: int = UINT64_MAX
    cpu_nsec: int = UINT64_MAX
    branch: str = ""  # the branch of the session's own worktree, if it has one
    dormant_reason: str = ""
    last_error: str = ""
    usage: dict[str, Any] = field(default_factory=dict)  # the Usage property, plain
    host: str = ""  # in a fleet, the name of the host it runs on
    parent: str = ""  # the session it was made from inside, on the same host
    question: dict[str, Any] = field(default_factory=dict)  # the Question property, plain

    @property
    def key(self) -> str:
        """How hostagentctl names it: HOST:NAME in a fleet, else its name."""
        return f"{self.host}:{self.name}" if self.host else self.name

    def update(self, props: dict[str, Any]) -> None:
        for key, attr in _FIELDS.items():
            if key in props:
                setattr(self, attr, props[key])

    def age(self, now: float | None = None) -> float:
        if not self.started_at:
            return 0.0
        return max(0.0, (now or time.time()) - self.started_at / 1e6)


_FIELDS = {
    "Owner": "owner",
    "Parent": "parent",
    "Preset": "preset",
    "State": "state",
    "Activity": "activity",
    "StartedAt": "started_at",
    "Branch": "branch",
    "MemoryCurrent": "memory",
    "CPUUsageNSec": "cpu_nsec",
    "DormantReason": "dormant_reason",
    "LastError": "last_error",
    "Usage": "usage",
    "Question": "question",
}


class Follower:
    def __init__(
        self,
        connect: Callable[[], Any],
        on_change: Callable[[], None],
        host: str = "",
    ) -> None:
        """connect: an async callable that returns a connected Client (called again after
        the bus is lost); on_change: called after every change to the picture; host: the
        fleet's name for the host followed, set on each of its sessions."""
        self._connect = connect
        self.on_change = on_change
        self.host = host
        self.why = ""  # why the last attempt to find the bus again failed
        self.client: Client | None = None
        self.sessions: dict[str, SessionView] = {}
        self.link = Link.RECONNECTING
        self.version = ""
        self.updated_from = ""  # the Version before the daemon came back different
        self._daemon = ""  # the daemon's unique name on the bus: the only sender believed
        self._task: asyncio.Task[None] | None = None
        self._reload: asyncio.Task[None] | None = None

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self, retry: bool = False) -> None:
        """Follow the daemon. A bus that cannot be reached fails the start, unless retry: then
        it is looked for again and again, as one lost later is (a fleet's host that is down)."""
        try:
            await self._attach()
        except (OSError, EOFError, HostAgentError) as e:
            if not retry:
                raise
            self._failed(e)
        self._task = asyncio.get_running_loop().create_task(self._keep_bus())

    def close(self) -> None:
        for task in (self._task, self._reload):
            if task is not None:
                task.cancel()
        if self.client is not None:
            self.client.close()

    async def _attach(self) -> None:
        self.client = await self._connect()
        bus = self.client.bus
        bus.add_message_handler(self._on_message)
        for rule in (
            f"type='signal',sender='{DBUS}',member='NameOwnerChanged',arg0='{BUS_NAME}'",
            f"type='signal',sender='{BUS_NAME}',interface='{MANAGER_INTERFACE}'",
            f"type='signal',sender='{BUS_NAME}',member='PropertiesChanged',"
            f"path_namespace='{MANAGER_PATH}'",
        ):
            await add_match(bus, rule)
        self._daemon = await name_owner(bus, BUS_NAME)
        if self._daemon:
            await self._load()
        else:
            self._set_link(Link.GONE)

    async def _keep_bus(self) -> None:
        """Find the bus again whenever it drops, waiting longer each time (up to 5 s)."""
        delay = 0.2
        while True:
            if self.client is not None:
                # It raises what ended the connection when that was not our own disconnect
                # (an end of file: ssh gone, dbus-daemon restarted); either way it is gone.
                with contextlib.suppress(Exception):
                    await self.client.bus.wait_for_disconnect()  # type: ignore[no-untyped-call]
                self._set_link(Link.RECONNECTING)
            while True:
                await asyncio.sleep(delay)  # a retry delay, not a synchronisation
                try:
                    await self._attach()
                    delay, self.why = 0.2, ""
                    break
                except (OSError, EOFError, HostAgentError) as e:
                    log.debug("bus not back yet: %s", e)
                    self._failed(e)
                    delay = min(delay * 2, 5.0)

    def _failed(self, e: BaseException) -> None:
        """An attempt to find the bus failed: drop what it left, and say why."""
        if self.client is not None:
            self.client.close()
            self.client = None
        self.why = getattr(e, "message", "") or str(e)
        self._set_link(Link.RECONNECTING)

    # ---- reading ------------------------------------------------------------------------

    async def _load(self) -> None:
        assert self.client is not None
        self._set_link(Link.RECONNECTING)
        try:
            props = await self.client.manager_properties()
            rows = await self.client.list_sessions()
            views = {r.name: SessionView(r.name, r.path, host=self.host) for r in rows}
            await asyncio.gather(*(self._read(v) for v in views.values()))
        except HostAgentError as e:
            log.debug("daemon went away while being read: %s", e)
            self._set_link(Link.GONE)
            return
        version = str(props.get("Version", ""))
        if self.version and version != self.version:
            self.updated_from = self.version
        self.version = version
        self.sessions = views
        self._set_link(Link.CONNECTED)

    async def _read(self, view: SessionView) -> None:
        assert self.client is not None
        with contextlib.suppress(HostAgentError):
            (props,) = await self.client._call(
                view.path, PROPERTIES, "GetAll", "s", [SESSION_INTERFACE]
            )
            view.update({k: plain(v.value) for k, v in props.items()})

    def client_for(self, key: str) -> tuple[Client | None, str]:
        """The connection a session's calls go on, and its name there (a fleet's differ)."""
        return self.client, key

    async def refresh_counters(self) -> None:
        """Read memory and CPU again (systemd does not signal them)."""
        if self.link is Link.CONNECTED:
            await asyncio.gather(*(self._read(v) for v in list(self.sessions.values())))
            self.on_change()

    # ---- signals ------------------------------------------------------------------------

    def _on_message(self, msg: Message) -> None:
        if msg.message_type is not MessageType.SIGNAL:
            return
        # Unicast signals bypass match rules: believe the bus driver about who the daemon is,
        # and the daemon's current unique name about sessions, and nobody else.
        if msg.member == "NameOwnerChanged" and msg.body and msg.body[0] == BUS_NAME:
            if msg.sender != DBUS:
                return
            self._daemon = msg.body[2]
            if msg.body[2]:
                self._schedule_load()
            else:
                self._set_link(Link.GONE)
            return
        if not self._daemon or msg.sender != self._daemon:
            return
        if msg.member == "SessionNew" and msg.interface == MANAGER_INTERFACE:
            name, path = msg.body
            view = self.sessions.setdefault(name, SessionView(name, path, host=self.host))
            self._spawn(self._read_and_tell(view))
        elif msg.member == "SessionRemoved" and msg.interface == MANAGER_INTERFACE:
            if self.sessions.pop(msg.body[0], None) is not None:
                self.on_change()
        elif msg.member == "PropertiesChanged" and msg.body[0] == SESSION_INTERFACE:
            changed = next((v for v in self.sessions.values() if v.path == msg.path), None)
            if changed is not None:
                changed.update({k: plain(v.value) for k, v in msg.body[1].items()})
                self.on_change()

    def _schedule_load(self) -> None:
        if self._reload is None or self._reload.done():
            self._reload = self._spawn(self._load())

    async def _read_and_tell(self, view: SessionView) -> None:
        await self._read(view)
        self.on_change()

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro)

    def _set_link(self, link: Link) -> None:
        self.link = link
        self.on_change()
