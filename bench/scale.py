"""Cost against the number of sessions: ListSessions and GetSession latency, the daemon's RSS
and idle CPU, and the time to READY=1 after a restart (N live sessions) and after a reboot
(N records), as N grows to 1000 shell sessions."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bench.report import percentile
from hostagent import SESSION_INTERFACE
from hostagent.bus.call import PROPERTIES
from hostagent.client.library import Client
from tests.sandbox import Sandbox


@dataclass
class Point:
    n: int
    list_p50: float = 0.0
    list_p99: float = 0.0
    get_p50: float = 0.0
    get_p99: float = 0.0
    rss_mb: float = 0.0
    idle_cpu: float = 0.0
    restart_s: float = 0.0
    reboot_s: float = 0.0


@dataclass
class Scale:
    points: list[Point] = field(default_factory=list)
    create_s: dict[int, float] = field(default_factory=dict)


def daemon_rss_mb(sb: Sandbox) -> float:
    return int(sb.run("ps", "-o", "rss=", "-p", str(sb.daemon_pid())).stdout.strip() or 0) / 1024


def cpu_ticks(sb: Sandbox) -> int:
    fields = sb.run("cat", f"/proc/{sb.daemon_pid()}/stat").stdout.rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def ready_seconds(sb: Sandbox) -> float:
    """From the daemon's exec to its READY=1, as systemd recorded them."""
    out = sb.run(
        "systemctl", "show", "-P",
        "ExecMainStartTimestampMonotonic,ActiveEnterTimestampMonotonic", "hostagent",
    ).stdout.split()  # fmt: skip
    return (int(out[1]) - int(out[0])) / 1e6


async def grow(client: Client, have: int, want: int) -> None:
    slots = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with slots:
            await client.create(f"s{i:04d}", "shell", "/tmp", {})

    await asyncio.gather(*(one(i) for i in range(have, want)))


async def settle(sb: Sandbox, client: Client, timeout: float = 300.0) -> None:
    """Measure the steady state, not the aftermath of creating: wait until every session has
    been read (none unknown) and the machine's load has come down."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = await client.list_sessions()
        load = float(sb.run("cut", "-d", " ", "-f", "1", "/proc/loadavg").stdout or 0)
        if all(r.activity != "unknown" for r in rows) and load < 2.0:
            return
        await asyncio.sleep(2)  # a bench waiting for quiet, not a synchronisation


async def latencies(client: Client, calls: int) -> tuple[list[float], list[float]]:
    lists, gets = [], []
    for _ in range(calls):
        t = time.perf_counter()
        await client.list_sessions()
        lists.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        (path,) = await client._manager("GetSession", "s", ["s0000"])
        await client._call(path, PROPERTIES, "Get", "ss", [SESSION_INTERFACE, "State"])
        gets.append((time.perf_counter() - t) * 1000)
    return lists, gets


async def measure(sb: Sandbox, steps: list[int], idle_window: float, quiet: float) -> Scale:
    result = Scale()
    have = 0
    for n in steps:
        client = await Client.connect(True, sb.bus_address)
        t = time.monotonic()
        await grow(client, have, n)
        result.create_s[n] = time.monotonic() - t
        have = n
        await settle(sb, client, quiet)
        lists, gets = await latencies(client, 200)
        client.close()
        before, t0 = cpu_ticks(sb), time.monotonic()
        await asyncio.sleep(idle_window)  # the measurement window, not a synchronisation
        cpu = (cpu_ticks(sb) - before) / 100 / (time.monotonic() - t0) * 100
        point = Point(
            n,
            percentile(lists, 50),
            percentile(lists, 99),
            percentile(gets, 50),
            percentile(gets, 99),
            daemon_rss_mb(sb),
            cpu,
        )
        sb.daemon_restart()
        point.restart_s = ready_seconds(sb)
        result.points.append(point)
    return result


def reboots(sb: Sandbox, result: Scale) -> None:
    """Time to READY with N records after a reboot, from the largest N down."""
    by_n = {p.n: p for p in result.points}
    for n in sorted(by_n, reverse=True):
        sb.run("sh", "-c", f"cd /var/lib/hostagent/sessions && ls | sort | tail -n +{n + 1} "
               "| xargs -r rm -f").check()  # fmt: skip
        sb.reboot()
        sb.daemon_start()
        by_n[n].reboot_s = ready_seconds(sb)
        sb.daemon_stop()


def run(sb: Sandbox, quick: bool) -> Scale:
    steps = [10, 50] if quick else [10, 100, 1000]
    result = asyncio.run(measure(sb, steps, 5 if quick else 20, 20 if quick else 300))
    reboots(sb, result)
    return result
