"""The systemd client: transient scopes, their jobs, and the signals that say how units fare.

It talks to org.freedesktop.systemd1 on the daemon's own bus connection (the system manager in
system mode, the user manager in user mode). Signals are matched broadly, once, and filtered
here: one rule per session would run into the bus's 512-rules-per-connection limit.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from dataclasses import dataclass
from typing import Any, Protocol

from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from hostagent.bus.call import DBUS, DBUS_PATH, PROPERTIES, CallError, add_match, call
from hostagent.bus.paths import path_decode, path_encode

log = logging.getLogger(__name__)

SYSTEMD = "org.freedesktop.systemd1"
SYSTEMD_PATH = "/org/freedesktop/systemd1"
MANAGER_IFACE = "org.freedesktop.systemd1.Manager"
UNIT_IFACE = "org.freedesktop.systemd1.Unit"
SCOPE_IFACE = "org.freedesktop.systemd1.Scope"
UNIT_PATH_PREFIX = SYSTEMD_PATH + "/unit"

_MATCHES = (
    f"type='signal',sender='{SYSTEMD}',interface='{MANAGER_IFACE}',member='JobRemoved'",
    f"type='signal',sender='{SYSTEMD}',interface='{MANAGER_IFACE}',member='UnitRemoved'",
    f"type='signal',sender='{SYSTEMD}',interface='{PROPERTIES}',member='PropertiesChanged',"
    f"path_namespace='{UNIT_PATH_PREFIX}',arg0='{UNIT_IFACE}'",
    f"type='signal',sender='{SYSTEMD}',interface='{PROPERTIES}',member='PropertiesChanged',"
    f"path_namespace='{UNIT_PATH_PREFIX}',arg0='{SCOPE_IFACE}'",
    f"type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='{SYSTEMD}'",
)
_KEEP_JOB_RESULTS = 4096
OWNER_TIMEOUT = 30.0  # seconds for a starting (or re-executing) manager to take its bus name
# The errors of a call whose recipient left the bus: systemd re-executing (daemon-reexec, a
# package upgrade) drops its connection and comes back under a new unique name.
_GONE_ERRORS = {
    "org.freedesktop.DBus.Error.NoReply",
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
}
_NO_UNIT_ERRORS = {"org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.LoadFailed"}
_PIDFD_REFUSALS = {
    "org.freedesktop.DBus.Error.PropertyReadOnly",
    "org.freedesktop.DBus.Error.UnknownProperty",
}


class SystemdError(Exception):
    pass


class UnitExists(SystemdError):
    """StartTransientUnit found the unit there: a start that went through although its reply
    was lost to systemd re-executing, or a stray unit of the same name."""


@dataclass(frozen=True)
class UnitInfo:
    name: str
    active_state: str  # active, activating, deactivating, inactive, failed, or "" when gone


class UnitEvents(Protocol):
    """Who is told of each hostagent scope's ActiveState ("" once it is unloaded), and of
    systemd's Result for it (timeout, oom-kill, ...) as it ends: the daemon's reconciler."""

    def on_unit(self, unit: str, state: str) -> None: ...
    def on_result(self, unit: str, result: str) -> None: ...


def unit_path(unit: str) -> str:
    return path_encode(UNIT_PATH_PREFIX, unit)


class Systemd:
    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self._events: UnitEvents  # given by connect, before any signal can come
        self._owner = ""
        self._known_owner = ""  # the last unique name systemd had, across its gaps
        self._owner_waiters: list[asyncio.Future[None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._job_waiters: dict[str, asyncio.Future[str]] = {}
        self._job_results: collections.OrderedDict[str, str] = collections.OrderedDict()
        # The InvocationID of each scope being started, as its own PropertiesChanged says.
        # systemd sends a unit's pending changes before the JobRemoved of its job, so when
        # the start job is done the id is here, and a create needs no Get for it.
        self._invocations: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._pidfds_work = hasattr(os, "pidfd_open")

    async def connect(self, events: UnitEvents) -> None:
        """Install the matches and Subscribe(), before any job can be started; events is told
        of each scope's changes from here on."""
        self._events = events
        self.bus.add_message_handler(self._on_message)
        for rule in _MATCHES:
            await add_match(self.bus, rule)
        try:
            (self._owner,) = await call(
                self.bus, DBUS, DBUS_PATH, DBUS, "GetNameOwner", "s", [SYSTEMD]
            )
        except CallError as e:
            if not e.name.endswith("NameHasNoOwner"):
                raise
            # A user manager joins its session bus a moment after that bus starts, and the
            # bus may have started for us: wait for systemd to take its name.
            log.info("Waiting for %s to appear on the bus", SYSTEMD)
            await self._back_from("")
        self._known_owner = self._owner
        await self._manager("Subscribe")

    async def _manager(
        self, member: str, signature: str = "", body: list[Any] | None = None, **kw: Any
    ) -> list[Any]:
        return await self._call(SYSTEMD_PATH, MANAGER_IFACE, member, signature, body, **kw)

    async def _call(
        self,
        path: str,
        interface: str,
        member: str,
        signature: str = "",
        body: list[Any] | None = None,
        **kw: Any,
    ) -> list[Any]:
        """One call to systemd. When systemd left the bus instead of answering (PID 1
        re-executing), wait for it to come back and make the call once more."""
        before = self._owner
        try:
            return await call(self.bus, SYSTEMD, path, interface, member, signature, body, **kw)
        except CallError as e:
            if e.name not in _GONE_ERRORS:
                raise
            log.warning("systemd left the bus during %s; retrying once it is back", member)
        try:
            await self._back_from(before)
        except TimeoutError:
            raise CallError(
                "org.freedesktop.DBus.Error.NoReply",
                f"systemd did not come back on the bus within {OWNER_TIMEOUT:.0f}s",
            ) from None
        return await call(self.bus, SYSTEMD, path, interface, member, signature, body, **kw)

    async def _back_from(self, before: str) -> None:
        """Return once systemd owns its name under another unique name than before;
        TimeoutError after OWNER_TIMEOUT."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + OWNER_TIMEOUT
        while self._owner in ("", before):
            waiter: asyncio.Future[None] = loop.create_future()
            self._owner_waiters.append(waiter)
            await asyncio.wait_for(waiter, max(0.0, deadline - loop.time()))

    def sends(self, sender: str) -> bool:
        """Whether sender is systemd, whose signals the daemon listens to."""
        return bool(sender) and sender == self._owner

    def _owner_changed(self, owner: str) -> None:
        self._owner = owner
        waiters, self._owner_waiters = self._owner_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        if not owner:
            return
        known, self._known_owner = self._known_owner, owner
        if known and owner != known:
            # A re-executed manager: make sure it sends us job and unit signals again.
            log.info("systemd is back on the bus as %s", owner)
            task = asyncio.get_running_loop().create_task(self._resubscribe())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _resubscribe(self) -> None:
        try:
            await self._manager("Subscribe")
        except CallError as e:
            log.error("Failed to subscribe to systemd again: %s", e)

    def _on_message(self, msg: Message) -> None:
        if msg.message_type != MessageType.SIGNAL:
            return
        if msg.member == "NameOwnerChanged" and msg.body and msg.body[0] == SYSTEMD:
            # Only the bus itself says who owns a name: a unicast signal from anyone else
            # would let a local user pose as systemd.
            if msg.sender == DBUS:
                self._owner_changed(msg.body[2])
            return
        if msg.sender != self._owner:
            return
        if msg.member == "JobRemoved" and msg.interface == MANAGER_IFACE:
            _, job, _unit, result = msg.body
            self._job_done(job, result)
        elif msg.member == "UnitRemoved" and msg.interface == MANAGER_IFACE:
            self._events.on_unit(msg.body[0], "")
        elif msg.member == "PropertiesChanged" and msg.path:
            changed = msg.body[1]
            unit = path_decode(UNIT_PATH_PREFIX, msg.path)
            state = changed.get("ActiveState")
            result = changed.get("Result") if msg.body[0] == SCOPE_IFACE else None
            if unit and unit in self._invocations and msg.body[0] == UNIT_IFACE:
                invocation = changed.get("InvocationID")
                if invocation is not None:
                    self._invocations[unit] = _id_hex(invocation.value)
            if result is not None and unit:
                # Sent before the unit's ActiveState (and before a failed scope is collected).
                self._events.on_result(unit, result.value)
            if state is not None and unit:
                self._events.on_unit(unit, state.value)

    def _job_done(self, job: str, result: str) -> None:
        waiter = self._job_waiters.pop(job, None)
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(result)
            return
        # The signal can beat the method reply; keep it for the caller who is about to wait.
        _keep(self._job_results, job, result)

    async def wait_job(self, job: str, timeout: float) -> str:
        """The job's result (done, failed, canceled, timeout, dependency, skipped)."""
        if job in self._job_results:
            return self._job_results.pop(job)
        fut = self._job_waiters.setdefault(job, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        finally:
            if fut.done() or self._job_waiters.get(job) is fut:
                self._job_waiters.pop(job, None)

    async def start_scope(self, unit: str, pid: int, props: list[tuple[str, Variant]]) -> str:
        """Start ``unit`` holding pid; the job path. PIDFDs where systemd takes them, else PIDs."""
        _keep(self._invocations, unit, "")  # its signals of an earlier start are not this one's
        if self._pidfds_work:
            pidfd = os.pidfd_open(pid)
            try:
                return await self._start(unit, [*props, ("PIDFDs", Variant("ah", [0]))], [pidfd])
            except CallError as e:
                if e.name not in _PIDFD_REFUSALS:
                    raise _start_error(e) from None
                log.debug("systemd refuses PIDFDs (%s), using PIDs from now on", e.name)
                self._pidfds_work = False
            finally:
                os.close(pidfd)
        try:
            return await self._start(unit, [*props, ("PIDs", Variant("au", [pid]))], [])
        except CallError as e:
            raise _start_error(e) from None

    async def _start(self, unit: str, props: list[tuple[str, Variant]], fds: list[int]) -> str:
        body = [unit, "fail", [list(p) for p in props], []]
        (job,) = await self._manager("StartTransientUnit", "ssa(sv)a(sa(sv))", body, unix_fds=fds)
        return str(job)

    async def set_unit_properties(self, unit: str, props: list[tuple[str, Variant]]) -> None:
        """Set props on unit at runtime (until reboot); a slice need not be loaded first."""
        body = [unit, True, [list(p) for p in props]]
        try:
            await self._manager("SetUnitProperties", "sba(sv)", body)
        except CallError as e:
            raise SystemdError(e.text or e.name) from None

    async def stop_unit(self, unit: str) -> str | None:
        """The stop job's path, or None when the unit is not loaded."""
        try:
            (job,) = await self._manager("StopUnit", "ss", [unit, "replace"])
        except CallError as e:
            if e.name in _NO_UNIT_ERRORS:
                return None
            raise SystemdError(e.text or e.name) from None
        return str(job)

    async def kill_unit(self, unit: str, whom: str, signal: int) -> None:
        try:
            await self._manager("KillUnit", "ssi", [unit, whom, signal])
        except CallError as e:
            raise SystemdError(e.text or e.name) from None

    async def list_units(self, pattern: str) -> list[UnitInfo]:
        (units,) = await self._manager("ListUnitsByPatterns", "asas", [[], [pattern]])
        return [UnitInfo(u[0], u[3]) for u in units]

    async def unit_pids(self, unit: str) -> list[int]:
        """The pids in the unit's cgroup; empty when it is not loaded."""
        try:
            (procs,) = await self._manager("GetUnitProcesses", "s", [unit])
        except CallError:
            return []
        return [int(p[1]) for p in procs]

    async def active_state(self, unit: str) -> str:
        """ActiveState, or "" when the unit is not loaded."""
        try:
            (path,) = await self._manager("GetUnit", "s", [unit])
            (value,) = await self._call(path, PROPERTIES, "Get", "ss", [UNIT_IFACE, "ActiveState"])
        except CallError as e:
            if e.name in _NO_UNIT_ERRORS or e.name.endswith("UnknownObject"):
                return ""
            raise SystemdError(e.text or e.name) from None
        return str(value.value)

    async def _property(self, path: str, interface: str, name: str) -> Any:
        """A property's value, or None when systemd cannot say (a unit not loaded)."""
        try:
            (value,) = await self._call(path, PROPERTIES, "Get", "ss", [interface, name])
        except CallError:
            return None
        return value.value

    async def unit_property(self, unit: str, interface: str, name: str) -> Any:
        """A property of a loaded unit, or None when it is not loaded."""
        return await self._property(unit_path(unit), interface, name)

    async def shutting_down(self) -> bool:
        """Whether the manager is going down (a shutdown, or a user manager's end): then every
        session is about to end with it, and none of those ends is the session's own."""
        state = await self._property(SYSTEMD_PATH, MANAGER_IFACE, "SystemState")
        return str(state) == "stopping"

    async def started_usec(self) -> int:
        """When this manager started (CLOCK_REALTIME, µs): for the system manager, this boot's
        userspace start, which a container's reboot moves too (the kernel's boot time does
        not). 0 when systemd cannot say."""
        return int(await self._property(SYSTEMD_PATH, MANAGER_IFACE, "UserspaceTimestamp") or 0)

    async def invocation_id(self, unit: str) -> str:
        raw = await self.unit_property(unit, UNIT_IFACE, "InvocationID")
        return _id_hex(raw)

    async def started_invocation(self, unit: str) -> str:
        """The InvocationID of a scope started with start_scope, once its job is done: as the
        unit's own signal said it, else asked for."""
        return self._invocations.pop(unit, "") or await self.invocation_id(unit)


def _id_hex(raw: bytes | None) -> str:
    """An InvocationID (systemd's ``ay``) as its hex text; "" for none."""
    return bytes(raw).hex() if raw else ""


def _keep(kept: collections.OrderedDict[str, str], key: str, value: str) -> None:
    """Remember value as the newest, forgetting the oldest past _KEEP_JOB_RESULTS."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > _KEEP_JOB_RESULTS:
        kept.popitem(last=False)


def _start_error(e: CallError) -> SystemdError:
    cls = UnitExists if e.name == "org.freedesktop.systemd1.UnitExists" else SystemdError
    return cls(e.text or e.name)
