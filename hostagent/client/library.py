"""The async client library: everything hostagentctl (and any desktop program) says to the daemon.

Errors come back as the same ``HostAgentError`` subclasses the daemon raised, mapped by their
D-Bus names, so callers can ``except NoSuchSession``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, NamedTuple

from dbus_fast import BusType, Variant
from dbus_fast.aio import MessageBus

from hostagent import BUS_NAME, MANAGER_INTERFACE, MANAGER_PATH, SESSION_INTERFACE
from hostagent.bus.call import DBUS, PROPERTIES, CallError, call, call_for_fd
from hostagent.bus.paths import path_decode, path_encode
from hostagent.client.inbox import WaitingQuestion
from hostagent.errors import InvalidArgs, from_dbus
from hostagent.usage import Usage

LONG_CALL = None  # create, resume and stop reply when systemd's job is done; no client timeout


class SessionRow(NamedTuple):
    """One row of ListSessions. A named tuple, because a list of 1000 is built on every call:
    a frozen dataclass's constructor cost the caller more than the daemon's reply did
    (docs/benchmarks-notes.md, "ListSessions at 1000 again")."""

    name: str
    preset: str
    state: str
    activity: str
    owner: int
    path: str


def plain(value: Any) -> Any:
    """A property's value without the Variants inside it (Usage's a{sv})."""
    if isinstance(value, dict):
        return {k: plain(v.value if isinstance(v, Variant) else v) for k, v in value.items()}
    return value


def default_system() -> bool:
    """System bus for root, the user's own session bus otherwise, as systemctl chooses."""
    return os.geteuid() == 0


async def prefer_system() -> bool:
    """Where a local user's calls go when no bus is named: the system daemon whenever one is
    installed (its name owned or activatable on the system bus), so a shared host has one
    place to look; the user's own daemon otherwise. Root always uses the system bus."""
    if default_system():
        return True
    try:
        bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    except (OSError, ValueError):
        return False
    try:
        for member in ("ListNames", "ListActivatableNames"):
            (names,) = await call(bus, DBUS, "/org/freedesktop/DBus", DBUS, member, timeout=5)
            if BUS_NAME in names:
                return True
        return False
    except CallError:
        return False
    finally:
        bus.disconnect()


@contextlib.contextmanager
def named_errors() -> Iterator[None]:
    """A call's error as the HostAgentError its D-Bus name stands for (errors.from_dbus), so
    every caller of the library catches one family, whatever the call."""
    try:
        yield
    except CallError as e:
        raise from_dbus(e.name, e.text) from None


class Client:
    def __init__(self, bus: MessageBus, relay: Any = None) -> None:
        self.bus = bus
        self._relay = relay  # the ssh relay of a remote connection (transport.Relay)
        # Every local connection negotiates descriptors; ssh's bridge carries none.
        self.passes_fds = relay is None

    @classmethod
    async def connect(
        cls,
        system: bool,
        address: str | None = None,
        host: str | None = None,
        machine: str | None = None,
        ssh_said: Callable[[str], None] | None = None,
    ) -> Client:
        """The system or session bus; or a bus address; or, like systemctl, a host's bus over
        ssh (host, "[user@]host[:port]"; what ssh says later goes to ssh_said, or stderr) or a
        local container's (machine)."""
        from hostagent.client.transport import machine_bus_address, open_ssh

        if host:
            bus, relay = await open_ssh(host, user_bus=not system, ssh_said=ssh_said)
            return cls(bus, relay)
        if machine:
            address = await machine_bus_address(machine)
        if address:
            bus = MessageBus(bus_address=address, negotiate_unix_fd=True)
        else:
            bus = MessageBus(
                bus_type=BusType.SYSTEM if system else BusType.SESSION, negotiate_unix_fd=True
            )
        return cls(await bus.connect())

    async def own_uid(self) -> int:
        """The uid the bus knows this connection by: on another host (-H), the ssh user's
        uid there, which is whose sessions are ours on that host."""
        with named_errors():
            (uid,) = await call(
                self.bus,
                DBUS,
                "/org/freedesktop/DBus",
                DBUS,
                "GetConnectionUnixUser",
                "s",
                [self.bus.unique_name],
                timeout=10,
            )
        return int(uid)

    def close(self) -> None:
        """Start closing the connection; the socket itself closes once the event loop next
        runs (dbus-fast closes it when it reads the end). A program about to leave its loop
        awaits aclose instead."""
        self.bus.disconnect()
        if self._relay is not None:
            self._relay.close()

    async def aclose(self, timeout: float = 5.0) -> None:
        """Close the connection and wait until its socket is closed, so that nothing is left
        for the garbage collector to warn about when the event loop ends."""
        self.close()
        disconnected: Callable[[], Awaitable[None]] = self.bus.wait_for_disconnect  # untyped
        with contextlib.suppress(Exception):
            await asyncio.wait_for(disconnected(), timeout)

    async def _call(
        self,
        path: str,
        interface: str,
        member: str,
        signature: str = "",
        body: list[Any] | None = None,
        timeout: float | None = 25.0,
        interactive: bool = True,
    ) -> list[Any]:
        with named_errors():
            return await call(
                self.bus,
                BUS_NAME,
                path,
                interface,
                member,
                signature,
                body,
                timeout=timeout,
                interactive=interactive,
            )

    async def _manager(
        self,
        member: str,
        signature: str = "",
        body: list[Any] | None = None,
        timeout: float | None = 25.0,
    ) -> list[Any]:
        return await self._call(MANAGER_PATH, MANAGER_INTERFACE, member, signature, body, timeout)

    @staticmethod
    def session_path(name: str) -> str:
        from hostagent import SESSION_PATH_PREFIX

        return path_encode(SESSION_PATH_PREFIX, name)

    @staticmethod
    def session_name(path: str) -> str:
        """The name of the session at object path (CreateSession's reply); the path itself
        when it is not a session's."""
        from hostagent import SESSION_PATH_PREFIX

        return path_decode(SESSION_PATH_PREFIX, path) or path

    async def get_session(self, name: str) -> str:
        """The object path of the session, as the daemon says (GetSession); NoSuchSession."""
        (path,) = await self._manager("GetSession", "s", [name])
        return str(path)

    async def _session(
        self,
        name: str,
        member: str,
        signature: str = "",
        body: list[Any] | None = None,
        timeout: float | None = 25.0,
    ) -> list[Any]:
        path = await self.get_session(name)
        return await self._call(path, SESSION_INTERFACE, member, signature, body, timeout)

    # ---- Manager ------------------------------------------------------------------------

    async def list_sessions(self) -> list[SessionRow]:
        (rows,) = await self._manager("ListSessions")
        return list(map(SessionRow._make, rows))

    async def create(self, name: str, preset: str, cwd: str, options: dict[str, Variant]) -> str:
        (path,) = await self._manager(
            "CreateSession", "sssa{sv}", [name, preset, cwd, options], timeout=LONG_CALL
        )
        return str(path)

    async def resume(self, name: str) -> str:
        (path,) = await self._manager("ResumeSession", "s", [name], timeout=LONG_CALL)
        return str(path)

    async def stop(self, name: str) -> None:
        await self._manager("StopSession", "s", [name], timeout=LONG_CALL)

    async def kill(self, name: str, whom: str, signal: int) -> None:
        await self._manager("KillSession", "ssi", [name, whom, signal])

    async def remove(self, name: str) -> None:
        await self._manager("RemoveSession", "s", [name], timeout=LONG_CALL)

    async def remove_with_flags(self, name: str, force: bool) -> str:
        """Remove, its worktree too when clean (or force); a note when something was kept."""
        (note,) = await self._manager(
            "RemoveSessionWithFlags", "st", [name, 1 if force else 0], timeout=LONG_CALL
        )
        return str(note)

    async def branches(self) -> dict[str, str]:
        """The branch of each session that has a worktree of its own."""
        (rows,) = await self._manager("ListWorktrees")
        return {r[0]: r[2] for r in rows}

    async def diff(self, name: str, stat: bool) -> str:
        (text,) = await self._session(name, "Diff", "b", [stat], timeout=LONG_CALL)
        return str(text)

    async def agent_profile(self, preset: str) -> tuple[list[str], list[str]]:
        """The words a session of preset's would start from for the caller, and notes."""
        words, notes = await self._manager("GetAgentProfile", "s", [preset])
        return list(words), list(notes)

    async def presets(self) -> list[tuple[str, str, list[str]]]:
        (rows,) = await self._manager("ListPresets")
        return [(r[0], r[1], list(r[2])) for r in rows]

    async def agents(self) -> dict[str, tuple[str, str, str]]:
        """For the caller: preset -> (program found, version, problem)."""
        (rows,) = await self._manager("ListAgents")
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    async def wait_any(
        self, names: list[str], activities: list[str], timeout_usec: int
    ) -> tuple[str, str]:
        name, activity = await self._manager(
            "WaitAny", "asast", [names, activities, timeout_usec], timeout=None
        )
        return name, activity

    async def reload(self) -> None:
        await self._manager("Reload")

    async def usage(self, since_usec: int, until_usec: int) -> list[tuple[int, str, Usage]]:
        """(uid, preset, usage) over the hours that start in [since, until) (0: now)."""
        (rows,) = await self._manager("GetUsage", "tt", [since_usec, until_usec])
        return [(int(uid), str(preset), Usage.from_dict(plain(u))) for uid, preset, u in rows]

    async def lift_budget(self, uid: int) -> list[str]:
        (resumed,) = await self._manager("LiftBudget", "u", [uid], timeout=LONG_CALL)
        return [str(name) for name in resumed]

    async def manager_properties(self) -> dict[str, Any]:
        (props,) = await self._call(MANAGER_PATH, PROPERTIES, "GetAll", "s", [MANAGER_INTERFACE])
        return {k: v.value for k, v in props.items()}

    # ---- Session ------------------------------------------------------------------------

    async def properties(self, name: str) -> dict[str, Any]:
        (path,) = await self._manager("GetSession", "s", [name])
        (props,) = await self._call(path, PROPERTIES, "GetAll", "s", [SESSION_INTERFACE])
        return {k: plain(v.value) for k, v in props.items()}

    async def capture(self, name: str, lines: int) -> str:
        """The screen and lines of scrollback. Through a file descriptor where the connection
        passes them (any local bus), so a large capture does not cross the bus; inline (at
        most 256 KiB) over ssh, whose bridge passes none."""
        if not self.passes_fds:
            (text,) = await self._session(name, "Capture", "i", [lines])
            return str(text)
        path = await self.get_session(name)
        with named_errors():
            fd = await call_for_fd(
                self.bus,
                BUS_NAME,
                path,
                SESSION_INTERFACE,
                "CaptureByFileDescriptor",
                "i",
                [lines],
            )
        with os.fdopen(fd, "rb") as f:
            return f.read().decode(errors="replace")

    async def journal(self, name: str, lines: int, follow: bool) -> int:
        """A pipe's read end with the daemon's journal lines about session name (the last
        lines, then new ones with follow); the caller closes it, which ends a follow. Local
        buses only: ssh's bridge passes no descriptor."""
        if not self.passes_fds:
            raise InvalidArgs("The journal is read on its own host; run the command there.")
        path = await self.get_session(name)
        with named_errors():
            return await call_for_fd(
                self.bus,
                BUS_NAME,
                path,
                SESSION_INTERFACE,
                "OpenJournal",
                "ib",
                [lines, follow],
            )

    async def send_text(self, name: str, text: str, enter: bool) -> None:
        await self._session(name, "SendText", "sb", [text, enter])

    async def questions(self) -> list[WaitingQuestion]:
        """Every question waiting that this caller may answer, oldest first."""
        (rows,) = await self._manager("ListQuestions")
        return [WaitingQuestion.of(str(name), plain(q)) for name, q in rows]

    async def set_answer_rules(self, text: str) -> int:
        (count,) = await self._manager("SetAnswerRules", "s", [text])
        return int(count)

    async def answer_rules(self) -> str:
        (text,) = await self._manager("GetAnswerRules")
        return str(text)

    async def answer(self, name: str, choice: str, id: str = "") -> str:
        """Answer session name's question (id: the one read; "" the one it asks now) with
        choice, a number or the words a choice starts with; the label answered."""
        if not id:
            asked = (await self.properties(name)).get("Question") or {}
            id = str(asked.get("id", ""))
        (label,) = await self._session(name, "Answer", "ss", [id, choice])
        return str(label)

    async def wait(self, name: str, activities: list[str], timeout_usec: int) -> str:
        (activity,) = await self._session(
            name, "WaitForActivity", "ast", [activities, timeout_usec], timeout=None
        )
        return str(activity)

    async def explain(self, name: str) -> dict[str, str]:
        (info,) = await self._session(name, "ExplainActivity")
        return dict(info)

    async def report_hook(self, event: str, data: dict[str, str]) -> None:
        """Report a hook of the session this process runs in."""
        await self._hook("ReportHook", event, data, 5.0)

    async def ask_hook(self, event: str, data: dict[str, str]) -> str:
        """Ask as a hook of the session this process runs in, and wait: the decision the hook
        prints, "" for none (the daemon bounds the wait)."""
        return str((await self._hook("AskHook", event, data, None))[0])

    async def _hook(
        self, member: str, event: str, data: dict[str, str], timeout: float | None
    ) -> Any:
        # 0: this caller, placed by the bus; its own pid is its session's number, not the daemon's.
        (path,) = await self._manager("GetSessionByPID", "u", [0], timeout=5.0)
        body = [event, {k: Variant("s", v) for k, v in data.items()}]
        return await self._call(path, SESSION_INTERFACE, member, "sa{sv}", body, timeout)

    async def attach_command(self, name: str) -> list[str]:
        """What to run to attach a terminal: hostagentctl's confined attach."""
        (argv,) = await self._session(name, "GetAttachCommand")
        return list(argv)

    async def tmux_attach_command(self, name: str) -> list[str]:
        """The plain tmux client's argv, for hostagentctl attach to run confined."""
        (argv,) = await self._session(name, "GetTmuxAttachCommand")
        return list(argv)
