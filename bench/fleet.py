"""A fleet's list: `hostagentctl --fleet list` over three hosts of N shell sessions each (real
ssh, systemd-stdio-bridge and hostagent on each, on a private switch), beside
`hostagentctl -H HOST list` of each host alone, in the same run. The hosts answer at once, so
the fleet's list should take about as long as the slowest host's alone, not their sum."""

from __future__ import annotations

import asyncio
import statistics
import time

from dbus_fast import Variant

from bench.report import table
from hostagent.client.library import Client
from tests.integration.network import address, fleet_machines
from tests.sandbox import Sandbox

HOSTS = ("one", "two", "three")


async def _fill(server: Sandbox, count: int) -> None:
    """count of alice's shell sessions on server, 16 at a time, through the client library."""
    client = await Client.connect(True, address=server.bus_address)
    slots = asyncio.Semaphore(16)
    alice = server.uid("alice")

    async def one(i: int) -> None:
        async with slots:
            owner = {"user": Variant("u", alice)}
            await client.create(f"job-{i:03d}", "shell", "/tmp", owner)

    try:
        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await client.aclose()


def _timed(client: Sandbox, *args: str) -> float:
    """Seconds for alice's hostagentctl with args, as she waits for it."""
    started = time.monotonic()
    client.run("hostagentctl", *args, "list", "--no-legend", user="alice", timeout=120).check()
    return time.monotonic() - started


def run(quick: bool) -> tuple[str, dict[str, float]]:
    count, rounds = (20, 3) if quick else (100, 10)
    with fleet_machines(HOSTS) as (client, servers):
        for server in servers.values():
            asyncio.run(_fill(server, count))
        _timed(client, "--fleet")  # ssh's host keys accepted, caches warm
        alone: dict[str, list[float]] = {h: [] for h in HOSTS}
        together: list[float] = []
        for _ in range(rounds):
            for n, host in enumerate(HOSTS, 1):
                alone[host].append(_timed(client, "-H", f"alice@{address(n)}"))
            together.append(_timed(client, "--fleet"))
    medians = {h: statistics.median(t) * 1000 for h, t in alone.items()}
    fleet_ms = statistics.median(together) * 1000
    slowest = max(medians.values())
    rows = [[f"{h} alone ({count} sessions)", f"{ms:.0f}"] for h, ms in medians.items()]
    rows += [
        ["sum of the three alone", f"{sum(medians.values()):.0f}"],
        [f"--fleet list ({len(HOSTS)} × {count})", f"{fleet_ms:.0f}"],
    ]
    text = (
        "## a fleet's list\n\n"
        + (__doc__ or "").split("\n\n")[0].replace("\n", " ")
        + f" Median of {rounds} rounds, wall time of alice's hostagentctl on the client, ssh's "
        "connection included.\n\n"
        + table(["list", "ms"], rows)
        + f"\n\nThe fleet's list took {fleet_ms / slowest:.2f}× the slowest host's alone."
    )
    return text, {"fleet_ratio": fleet_ms / slowest}
