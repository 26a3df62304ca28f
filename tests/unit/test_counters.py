"""A scope's counters: read from its cgroup's files on the unified hierarchy, once systemd has
said where they are and which the unit keeps; asked of systemd on any other layout."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hostagent import UINT64_MAX
from hostagent.daemon.host.counters import CPU, MEMORY, ScopeCounters

UNIT = "hostagent-a.scope"
GROUP = "/hostagent.slice/hostagent-u0.slice/hostagent-a.scope"


class Systemd:
    """systemd's answers about one scope, and the questions it was asked."""

    def __init__(self, **props: Any) -> None:
        self.props = {
            "ControlGroup": GROUP,
            "MemoryAccounting": True,
            "CPUAccounting": True,
            MEMORY: 111,
            CPU: 222,
            **props,
        }
        self.asked: list[str] = []

    async def unit_property(self, unit: str, interface: str, name: str) -> Any:
        self.asked.append(name)
        return self.props.get(name) if unit == UNIT else None


def unified(root: Path, files: dict[str, str]) -> Path:
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    scope = root / GROUP.lstrip("/")
    scope.mkdir(parents=True)
    for name, text in files.items():
        (scope / name).write_text(text)
    return scope


def read(counters: ScopeCounters, name: str, invocation: str = "i1") -> int:
    return asyncio.run(counters.read(UNIT, invocation, name))


CPU_STAT = "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"


@pytest.mark.parametrize(
    ("files", "props", "memory", "cpu"),
    [
        ({"memory.current": "4096\n", "cpu.stat": CPU_STAT}, {}, 4096, 1_500_000),
        # No memory controller in the scope's cgroup: systemd has no value either.
        ({"cpu.stat": CPU_STAT}, {}, UINT64_MAX, 1_500_000),
        # The unit counts neither: systemd says "[not set]" though the kernel keeps both.
        (
            {"memory.current": "4096\n", "cpu.stat": CPU_STAT},
            {"MemoryAccounting": False, "CPUAccounting": False},
            UINT64_MAX,
            UINT64_MAX,
        ),
        ({"memory.current": "4096\n", "cpu.stat": "user_usec 1\n"}, {}, 4096, UINT64_MAX),
        ({"memory.current": "garbage\n", "cpu.stat": CPU_STAT}, {}, UINT64_MAX, 1_500_000),
    ],
)
def test_the_unified_layout_is_read_from_the_scopes_files(
    tmp_path: Path, files: dict[str, str], props: dict[str, Any], memory: int, cpu: int
) -> None:
    unified(tmp_path, files)
    systemd = Systemd(**props)
    counters = ScopeCounters(systemd, root=tmp_path)
    assert (read(counters, MEMORY), read(counters, CPU)) == (memory, cpu)
    assert MEMORY not in systemd.asked and CPU not in systemd.asked


def test_systemd_is_asked_where_the_cgroup_is_once_per_run_of_the_scope(tmp_path: Path) -> None:
    scope = unified(tmp_path, {"memory.current": "1\n", "cpu.stat": CPU_STAT})
    systemd = Systemd()
    counters = ScopeCounters(systemd, root=tmp_path)
    for _ in range(3):
        read(counters, MEMORY), read(counters, CPU)
    assert systemd.asked.count("ControlGroup") == 1
    (scope / "memory.current").write_text("2\n")
    assert read(counters, MEMORY) == 2  # read afresh every time, never kept
    read(counters, MEMORY, invocation="i2")  # the session was resumed: a new run
    assert systemd.asked.count("ControlGroup") == 2


def test_a_scope_gone_is_no_value_and_its_next_run_is_asked_again(tmp_path: Path) -> None:
    scope = unified(tmp_path, {"memory.current": "1\n", "cpu.stat": CPU_STAT})
    systemd = Systemd()
    counters = ScopeCounters(systemd, root=tmp_path)
    assert read(counters, CPU) == 1_500_000
    for f in scope.iterdir():
        f.unlink()
    scope.rmdir()
    assert read(counters, CPU) == UINT64_MAX
    read(counters, CPU)
    assert systemd.asked.count("ControlGroup") == 2


@pytest.mark.parametrize("group", [None, ""])
def test_no_cgroup_from_systemd_means_systemd_answers(tmp_path: Path, group: str | None) -> None:
    unified(tmp_path, {"memory.current": "1\n", "cpu.stat": CPU_STAT})
    counters = ScopeCounters(Systemd(ControlGroup=group), root=tmp_path)
    assert (read(counters, MEMORY), read(counters, CPU)) == (111, 222)


def test_other_layouts_ask_systemd_every_time(tmp_path: Path) -> None:
    (tmp_path / "unified").mkdir()  # the hybrid layout: cgroup2 is mounted below the root
    systemd = Systemd(**{MEMORY: None})
    counters = ScopeCounters(systemd, root=tmp_path)
    assert (read(counters, MEMORY), read(counters, CPU), read(counters, CPU)) == (
        UINT64_MAX,
        222,
        222,
    )
    assert systemd.asked == [MEMORY, CPU, CPU]
