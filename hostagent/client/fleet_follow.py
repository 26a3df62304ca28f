"""A live picture of a fleet: one ``Follower`` per host, each with its own connection, its own
link status and its own reconnecting, merged into one set of sessions named ``HOST:NAME``.

A host that is down at the start, or goes down later, is looked for again and again while the
others keep updating; when it comes back its sessions are read again from scratch, as a daemon
that restarted is (docs/restart-contract.md, per host).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from hostagent.client.fleet import Host
from hostagent.client.follow import Follower, Link, SessionView
from hostagent.client.library import Client


class FleetFollower:
    def __init__(
        self,
        hosts: list[Host],
        system: bool,
        on_change: Callable[[], None],
        ssh_said: Callable[[str, str], None] | None = None,
    ) -> None:
        """ssh_said(host, line): what ssh says once connected (Client.connect), by host."""
        self.followers: dict[str, Follower] = {}
        self.uids: dict[str, int] = {}  # each host's uid of ours (Client.own_uid)
        for host in hosts:

            async def connect(host: Host = host) -> Client:
                said = None if ssh_said is None else functools.partial(ssh_said, host.name)
                client = await host.connect(system, said)
                self.uids[host.name] = await client.own_uid()
                return client

            self.followers[host.name] = Follower(connect, on_change, host=host.name)
        self._starting: list[asyncio.Task[None]] = []

    @property
    def sessions(self) -> dict[str, SessionView]:
        return {v.key: v for f in self.followers.values() for v in f.sessions.values()}

    def client_for(self, key: str) -> tuple[Client | None, str]:
        """The connection to the host of the session named key (HOST:NAME), and its name there."""
        host, _, name = key.partition(":")
        follower = self.followers.get(host)
        return (follower.client if follower is not None else None), name

    async def start(self) -> None:
        """Every host at once, in the background: a host that takes its time to answer (or
        to fail) holds up neither the others nor the first drawing of the table."""
        loop = asyncio.get_running_loop()
        self._starting = [loop.create_task(f.start(retry=True)) for f in self.followers.values()]

    async def first_attempts(self) -> list[str]:
        """Wait until every host was tried once; the names of those that are down."""
        await asyncio.gather(*self._starting, return_exceptions=True)
        return [h for h, f in self.followers.items() if f.link is not Link.CONNECTED]

    async def refresh_counters(self) -> None:
        await asyncio.gather(*(f.refresh_counters() for f in self.followers.values()))

    def close(self) -> None:
        for task in self._starting:
            task.cancel()
        for f in self.followers.values():
            f.close()

    def status_line(self) -> str:
        return " · ".join(f"{h}: {host_status(f)}" for h, f in self.followers.items())


def host_status(f: Follower) -> str:
    """One host's link, in a word or two, and why it is down."""
    if f.link is Link.CONNECTED:
        return "connected"
    if f.link is Link.GONE:
        return "no daemon"
    return f"down ({f.why})" if f.why else "reconnecting…"
