"""Cost against the number of sessions: ListSessions and GetSession latency, the daemon's RSS
and idle CPU, the time to READY=1 after a restart (N live sessions) and after a reboot
(N records), and how soon after a restart's READY every live session's activity is known
again, as N grows to 1000 shell sessions."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bench import probe
from bench.report import percentile
from hostagent import SESSION_INTERFACE
from hostagent.bus.call import PROPERTIES
from hostagent.client.library import Client
from tests.sandbox import Sandbox
from tests.sandbox_provision import GUEST_REPO


@dataclass(frozen=True)
class Idle:
    """When idle CPU is measured: from `after` seconds past the last create, over `window`."""

    after: float
    window: float


# The full run's is the definition; the quick one's window still holds one tick of
# every 30 s timer (docs/architecture.md, "What wakes an idle daemon").
IDLE_FULL = Idle(after=60.0, window=60.0)
IDLE_QUICK = Idle(after=15.0, window=31.0)
# ListSessions and GetSession calls at each size: a p99 is then the sixth slowest call, not the
# second. Rounds of 200 to 300 on the same 1000 sessions gave p99s of 4.1 to 8.3 ms
# (docs/benchmarks-notes.md, "ListSessions at 1000 again").
CALLS = 600


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
    known_s: float = 0.0  # from READY=1 after a restart until no live session reads unknown
    reboot_s: float = 0.0
    containment_ms: float = 0.0  # CPU of one containment check over every running session
    containment_procs: int = 0


@dataclass
class Scale:
    idle: Idle
    points: list[Point] = field(default_factory=list)
    create_s: dict[int, float] = field(default_factory=dict)


def ready_seconds(sb: Sandbox) -> float:
    """From the daemon's exec to its READY=1, as systemd recorded them."""
    out = sb.run(
        "systemctl",
        "show",
        "-P",
        "ExecMainStartTimestampMonotonic,ActiveEnterTimestampMonotonic",
        "hostagent",
    ).stdout.split()
    return (int(out[1]) - int(out[0])) / 1e6


async def known_seconds(sb: Sandbox, ready: float, timeout: float = 60.0) -> float:
    """From ready (when `systemctl restart` returned: the daemon's READY=1) until ListSessions
    says what every live session is doing, none unknown; timeout when it never does."""
    client = await Client.connect(True, sb.bus_address)
    try:
        while time.monotonic() - ready < timeout:
            rows = await client.list_sessions()
            if rows and all(r.activity != "unknown" for r in rows):
                break
            await asyncio.sleep(0.02)  # the resolution of the figure, not a synchronisation
        return time.monotonic() - ready
    finally:
        client.close()


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


async def measure(sb: Sandbox, steps: list[int], idle: Idle, quiet: float) -> Scale:
    result = Scale(idle)
    have = 0
    for n in steps:
        client = await Client.connect(True, sb.bus_address)
        t = time.monotonic()
        await grow(client, have, n)
        last_create = time.monotonic()
        result.create_s[n] = last_create - t
        have = n
        await settle(sb, client, quiet)
        lists, gets = await latencies(client, CALLS)
        client.close()
        # The pause is part of the definition of "idle", not a wait for something to happen.
        await asyncio.sleep(max(0.0, last_create + idle.after - time.monotonic()))
        cpu = await probe.cpu_percent(sb, idle.window)
        point = Point(
            n,
            percentile(lists, 50),
            percentile(lists, 99),
            percentile(gets, 50),
            percentile(gets, 99),
            probe.daemon_rss_mb(sb),
            cpu,
        )
        _, point.containment_procs, point.containment_ms = containment_cost(sb)
        sb.daemon_restart()
        point.known_s = await known_seconds(sb, time.monotonic())
        point.restart_s = ready_seconds(sb)
        result.points.append(point)
    return result


# Runs inside the sandbox: the containment guard's own walk over every session's agent (the
# pane's first process, found here by one scan that is not timed), timed as the guard runs it.
CONTAINMENT_WALK = """
import os, statistics, time
from hostagent.daemon.follow.containment import PIPE, TMUX_SERVER, tree
from hostagent.daemon.host.procfs import family, read
procs = [p for p in map(read, map(int, filter(str.isdigit, os.listdir("/proc")))) if p]
servers = {p.pid for p in procs if p.comm == TMUX_SERVER}
panes = [p.pid for p in procs if p.ppid in servers and p.comm != PIPE]
walks = []
for _ in range(5):
    t = time.process_time()
    for pid in panes:
        tree(pid)
    walks.append((time.process_time() - t) * 1000)
print(len(panes), sum(len(family(pid)) for pid in panes), statistics.median(walks))
"""


def containment_cost(sb: Sandbox) -> tuple[int, int, float]:
    """(agents, processes, CPU ms) of one containment check over the running sessions."""
    panes, procs, ms = (
        sb.run("env", f"PYTHONPATH={GUEST_REPO}", "python3", "-c", CONTAINMENT_WALK)
        .check()
        .stdout.split()
    )
    return int(panes), int(procs), float(ms)


def reboots(sb: Sandbox, result: Scale) -> None:
    """Time to READY with N records after a reboot, from the largest N down."""
    by_n = {p.n: p for p in result.points}
    for n in sorted(by_n, reverse=True):
        sb.run(
            "sh",
            "-c",
            f"cd /var/lib/hostagent/sessions && ls | sort | tail -n +{n + 1} | xargs -r rm -f",
        ).check()
        sb.reboot()
        sb.daemon_start()
        by_n[n].reboot_s = ready_seconds(sb)
        sb.daemon_stop()


def run(sb: Sandbox, quick: bool) -> Scale:
    steps = [10, 100] if quick else [10, 100, 1000]
    idle = IDLE_QUICK if quick else IDLE_FULL
    result = asyncio.run(measure(sb, steps, idle, 20 if quick else 300))
    reboots(sb, result)
    return result
