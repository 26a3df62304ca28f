"""What the benches read of the daemon inside the sandbox: its CPU and its RSS.

CPU is the whole service's, read from its cgroup (``cpu.stat``), not the daemon process's own
ticks: the tmux reads and other helpers the daemon runs in its own unit are part of what an
idle session costs, and a process's ticks count its children only once they are reaped.
"""

from __future__ import annotations

import asyncio
import time

from tests.sandbox import Sandbox


def daemon_rss_mb(sb: Sandbox) -> float:
    return int(sb.run("ps", "-o", "rss=", "-p", str(sb.daemon_pid())).stdout.strip() or 0) / 1024


def service_cpu_usec(sb: Sandbox, unit: str = "hostagent.service") -> int:
    cgroup = sb.run("systemctl", "show", "-P", "ControlGroup", unit).check().stdout.strip()
    stat = sb.run("cat", f"/sys/fs/cgroup{cgroup}/cpu.stat").check().stdout
    for line in stat.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value)
    raise RuntimeError(f"no usage_usec in {cgroup}/cpu.stat")


async def cpu_percent(sb: Sandbox, seconds: float) -> float:
    """The service's share of one core over the next `seconds`."""
    before, t0 = service_cpu_usec(sb), time.monotonic()
    await asyncio.sleep(seconds)  # the measurement window, not a synchronisation
    return (service_cpu_usec(sb) - before) / 1e6 / (time.monotonic() - t0) * 100
