"""hostagentctl mcp across a fleet: each session named HOST:NAME, each call on its host, each
host showing its own user's sessions, a host that is down left out of the list."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from dbus_fast import Variant

from hostagent.cli.mcp_fleet import FleetSessions
from hostagent.client.fleet import Host
from hostagent.client.library import Client, SessionRow


@dataclass
class FakeBus:
    connected: bool = True


@dataclass
class FakeDaemon:
    """One host's daemon as its client library answers: sessions name -> owner."""

    uid: int
    sessions: dict[str, int]
    typed: list[tuple[str, str]] = field(default_factory=list)
    bus: FakeBus = field(default_factory=FakeBus)

    async def own_uid(self) -> int:
        return self.uid

    async def list_sessions(self) -> list[SessionRow]:
        return [
            SessionRow(n, "shell", "running", "idle", o, f"/s/{n}")
            for n, o in self.sessions.items()
        ]

    async def create(self, name: str, preset: str, cwd: str, options: dict[str, Variant]) -> str:
        name = name or "made-up"
        self.sessions[name] = self.uid
        return Client.session_path(name)  # the daemon's object path, as CreateSession answers

    session_name = staticmethod(Client.session_name)

    async def send_text(self, name: str, text: str, enter: bool) -> None:
        self.typed.append((name, text))

    async def wait_any(
        self, names: list[str], activities: list[str], timeout: int
    ) -> tuple[str, str]:
        if "never" in names:
            await asyncio.Event().wait()
        return names[0], "idle"

    async def aclose(self) -> None:
        pass


@dataclass(frozen=True)
class FakeHost(Host):
    daemon: Any = field(default=None, compare=False)

    async def connect(self, system: bool, ssh_said: Any = None) -> Any:
        if self.daemon is None:
            raise ConnectionRefusedError("Connection refused")
        return self.daemon


def fleet() -> tuple[FleetSessions, FakeDaemon, FakeDaemon]:
    a = FakeDaemon(1000, {"planner": 1000, "bobs": 1001})
    b = FakeDaemon(2000, {"worker": 2000, "never": 2000})  # the same user, another uid there
    hosts: list[Host] = [
        FakeHost("a", "a", a),
        FakeHost("b", "b", b),
        FakeHost("down", "down", None),
    ]
    return FleetSessions(hosts, system=True), a, b


def test_each_hosts_own_sessions_are_listed_as_host_name() -> None:
    sessions, _, _ = fleet()
    names = [r.name for r in asyncio.run(sessions.list_sessions())]
    assert names == ["a:planner", "b:worker", "b:never"]  # bob's left out; "down" too


def test_a_call_goes_to_the_host_its_session_is_on() -> None:
    sessions, a, b = fleet()

    async def body() -> tuple[str, str, tuple[str, str]]:
        await sessions.send_text("worker", "found by name alone", True)
        await sessions.send_text("a:planner", "named with its host", True)
        made = await sessions.create("b:", "shell", "/", {})
        first = await sessions.create("", "shell", "/", {})
        waited = await sessions.wait_any(["b:never", "a:planner"], ["idle"], 0)
        return made, first, waited

    made, first, waited = asyncio.run(body())
    assert b.typed == [("worker", "found by name alone")]
    assert a.typed == [("planner", "named with its host")]
    assert (made, first) == ("b:made-up", "a:made-up")  # no host named: the fleet's first
    assert waited == ("a:planner", "idle")  # the first to arrive, on whichever host
