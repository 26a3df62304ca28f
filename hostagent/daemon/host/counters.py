"""A running scope's accounting counters, read where systemd reads them.

A session's ``MemoryCurrent`` and ``CPUUsageNSec`` are its scope's, as ``systemctl show`` gives
them. On the unified cgroup hierarchy systemd computes both from two files of the scope's cgroup
(``memory.current``, and ``usage_usec`` in ``cpu.stat``), so asking systemd for them costs two bus
round trips per session (the larger part of a ``hostagentctl list``) for what a read of those
files gives in microseconds. So, on that layout, the daemon asks systemd once per run of a scope
where its cgroup is and whether the unit counts memory and CPU at all (``MemoryAccounting=``,
``CPUAccounting=``; systemd has no value for a counter that is off), and reads the files itself.
On the legacy and hybrid layouts systemd reads cgroup v1 controllers with their own rules, and
the daemon asks systemd every time.

Two differences from systemd's figures, both by design: systemd subtracts the CPU time a cgroup
had when the unit started (nothing, for a scope's new cgroup); and an accounting switch turned
with ``systemctl set-property`` on a running session is heard at its next start.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hostagent import UINT64_MAX
from hostagent.daemon.host.systemd import SCOPE_IFACE

CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMORY = "MemoryCurrent"
CPU = "CPUUsageNSec"


@dataclass(frozen=True)
class _Where:
    """A scope's cgroup directory, and the counters its unit keeps."""

    directory: Path
    memory: bool
    cpu: bool


class UnitProperties(Protocol):
    """The one question the counters ask the service manager (ports.SystemdPort has it)."""

    async def unit_property(self, unit: str, interface: str, name: str) -> Any: ...


class ScopeCounters:
    """Each running scope's counters, by systemd's property names."""

    def __init__(self, systemd: UnitProperties, root: Path = CGROUP_ROOT) -> None:
        self.systemd = systemd
        self.root = root
        # The unified hierarchy is mounted at the root itself; the hybrid one has it below.
        self.unified = (root / "cgroup.controllers").exists()
        self._where: dict[tuple[str, str], _Where] = {}  # by (unit, invocation id)

    async def read(self, unit: str, invocation: str, name: str) -> int:
        """The counter (MEMORY or CPU) of a running scope; UINT64_MAX when it has none."""
        where = await self._find(unit, invocation) if self.unified else None
        if where is None:
            value = await self.systemd.unit_property(unit, SCOPE_IFACE, name)
            return UINT64_MAX if value is None else int(value)
        try:
            if name == MEMORY:
                return _memory(where) if where.memory else UINT64_MAX
            return _cpu_nsec(where) if where.cpu else UINT64_MAX
        except FileNotFoundError:
            if not where.directory.exists():  # the scope is gone; a new run is asked again
                self._where.pop((unit, invocation), None)
            return UINT64_MAX  # or no memory controller for it, where systemd has none either
        except (OSError, ValueError):
            return UINT64_MAX

    async def _find(self, unit: str, invocation: str) -> _Where | None:
        key = (unit, invocation)
        if key not in self._where:
            group = await self.systemd.unit_property(unit, SCOPE_IFACE, "ControlGroup")
            if not group:
                return None  # not loaded, or no cgroup yet: systemd has the last word
            memory, cpu = await asyncio.gather(
                self.systemd.unit_property(unit, SCOPE_IFACE, "MemoryAccounting"),
                self.systemd.unit_property(unit, SCOPE_IFACE, "CPUAccounting"),
            )
            if len(self._where) > 4096:  # a scope that ended unread leaves its key; keep few
                self._where.clear()
            self._where[key] = _Where(self.root / str(group).lstrip("/"), bool(memory), bool(cpu))
        return self._where[key]


def _memory(where: _Where) -> int:
    return int(_read(where.directory / "memory.current"))


def _cpu_nsec(where: _Where) -> int:
    for line in _read(where.directory / "cpu.stat").splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) * 1000
    return UINT64_MAX


def _read(path: Path) -> str:
    # os.open and one read: a cgroup file is one short page, and pathlib's read_text costs
    # more than the read itself.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)
