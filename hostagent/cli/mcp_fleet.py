"""hostagentctl mcp across a fleet (``--fleet``, or ``-H`` repeated): the session tools over
every host's daemon, each session named ``HOST:NAME``.

``FleetSessions`` answers the client calls the tools make (mcp.py) on the host each session is
on, over one connection per host that the server keeps while it serves. A create goes to the
host its name names (``HOST:NAME``, or ``HOST:`` for a name made up there), else the fleet's
first host. Each host shows the agent its own user's sessions there (the uid that host's bus
knows the connection by), as one host's server does; a host that does not answer is left out
of a list, and a call on it is the tool's error saying why.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dbus_fast import Variant

from hostagent.client.fleet import HOST_DOWN, HOST_TIMEOUT, Host, locate, split_name, why_down
from hostagent.client.inbox import WaitingQuestion
from hostagent.client.library import Client, SessionRow
from hostagent.errors import HostAgentError, InvalidArgs


class FleetSessions:
    def __init__(self, hosts: list[Host], system: bool) -> None:
        self.hosts = hosts
        self.system = system
        self._clients: dict[Host, Client] = {}
        self._uids: dict[Host, int] = {}

    async def _client(self, host: Host) -> Client:
        """host's connection, made once (again after it was lost)."""
        client = self._clients.get(host)
        if client is not None and client.bus.connected:
            return client
        try:
            client = await asyncio.wait_for(host.connect(self.system), HOST_TIMEOUT)
            self._uids[host] = await client.own_uid()
        except HOST_DOWN as e:
            raise HostAgentError(f"Host {host.name}: {why_down(e, HOST_TIMEOUT)}.") from None
        self._clients[host] = client
        return client

    async def _rows(self, host: Host) -> list[SessionRow]:
        client = await self._client(host)
        uid = self._uids[host]
        rows = await asyncio.wait_for(client.list_sessions(), HOST_TIMEOUT)
        return [r._replace(name=f"{host.name}:{r.name}") for r in rows if uid in (0, r.owner)]

    async def _listings(self) -> dict[Host, list[SessionRow]]:
        """Every host's rows (_rows), asked at once; a host down is left out."""
        answers = await asyncio.gather(*(self._rows(h) for h in self.hosts), return_exceptions=True)
        return {
            h: rows for h, rows in zip(self.hosts, answers, strict=True) if isinstance(rows, list)
        }

    async def list_sessions(self) -> list[SessionRow]:
        """Every host's sessions of this user's, HOST:NAME; a host down is left out."""
        return [row for rows in (await self._listings()).values() for row in rows]

    async def _on(self, name: str) -> tuple[Host, Client, str]:
        """The host a session is on, its connection, and the session's name there."""
        host, bare = split_name(name, self.hosts)
        if host is None:
            listings = {
                h: [r.name.partition(":")[2] for r in rows]
                for h, rows in (await self._listings()).items()
            }
            host, bare = locate(name, listings, self.hosts)
        return host, await self._client(host), bare

    async def create(self, name: str, preset: str, cwd: str, options: dict[str, Variant]) -> str:
        host, bare = split_name(name, self.hosts)
        if host is None and ":" in name:
            known = ", ".join(h.name for h in self.hosts)
            raise InvalidArgs(f"No host '{name.partition(':')[0]}' in the fleet ({known}).")
        host = host or self.hosts[0]
        client = await self._client(host)
        path = await client.create(bare, preset, cwd, options)
        return f"{host.name}:{client.session_name(path)}"

    @staticmethod
    def session_name(made: str) -> str:
        """create's answer is the HOST:NAME already."""
        return made

    async def properties(self, name: str) -> dict[str, Any]:
        _, client, bare = await self._on(name)
        return await client.properties(bare)

    async def send_text(self, name: str, text: str, enter: bool) -> None:
        _, client, bare = await self._on(name)
        await client.send_text(bare, text, enter)

    async def questions(self) -> list[WaitingQuestion]:
        """Every host's questions this user may answer, HOST:NAME, oldest first; a host down
        is left out."""

        async def on(host: Host) -> list[WaitingQuestion]:
            client = await self._client(host)
            waiting = await asyncio.wait_for(client.questions(), HOST_TIMEOUT)
            return [q._replace(session=f"{host.name}:{q.session}") for q in waiting]

        answers = await asyncio.gather(*(on(h) for h in self.hosts), return_exceptions=True)
        found = [q for a in answers if isinstance(a, list) for q in a]
        return sorted(found, key=lambda q: q.since)

    async def answer(self, name: str, choice: str, id: str = "") -> str:
        _, client, bare = await self._on(name)
        return await client.answer(bare, choice, id)

    async def capture(self, name: str, lines: int) -> str:
        _, client, bare = await self._on(name)
        return await client.capture(bare, lines)

    async def explain(self, name: str) -> dict[str, str]:
        _, client, bare = await self._on(name)
        return await client.explain(bare)

    async def stop(self, name: str) -> None:
        _, client, bare = await self._on(name)
        await client.stop(bare)

    async def resume(self, name: str) -> str:
        _, client, bare = await self._on(name)
        return await client.resume(bare)

    async def remove_with_flags(self, name: str, force: bool) -> str:
        _, client, bare = await self._on(name)
        return await client.remove_with_flags(bare, force)

    async def wait_any(
        self, names: list[str], activities: list[str], timeout: int
    ) -> tuple[str, str]:
        """The first of names, on whichever host, to reach one of activities."""
        placed: dict[Host, list[str]] = {}
        clients: dict[Host, Client] = {}
        for name in names:
            host, clients[host], bare = await self._on(name)
            placed.setdefault(host, []).append(bare)

        async def on(host: Host) -> tuple[str, str]:
            name, activity = await clients[host].wait_any(placed[host], activities, timeout)
            return f"{host.name}:{name}", activity

        waits = [asyncio.ensure_future(on(h)) for h in placed]
        try:
            done = next(asyncio.as_completed(waits))
            return await done
        finally:
            for w in waits:
                w.cancel()

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()


async def serve_fleet(hosts: list[Host], system: bool) -> int:
    """hostagentctl mcp over the fleet, until stdin ends."""
    from hostagent import __version__
    from hostagent.cli.mcp import INSTRUCTIONS, tools
    from hostagent.cli.mcp_protocol import Server
    from hostagent.cli.mcp_stdio import serve_stdio

    fleet = FleetSessions(hosts, system)
    # Each host's rows are its own user's already (_rows): the tools show all they are given.
    served = tools(fleet, me=0)  # type: ignore[arg-type]
    try:
        await serve_stdio(Server(served, version=__version__, instructions=INSTRUCTIONS + FLEET))
    finally:
        await fleet.aclose()
    return 0


FLEET = (
    " Sessions are on several hosts, each named HOST:NAME; create_session's name may be "
    "HOST:NAME (or HOST: for one made up there) to say where it runs."
)
