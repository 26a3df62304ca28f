"""Where users run hostagent: the
cgroup layout the machine booted, the accounting it gives, and the dbus-fast shim that only
the old dbus-fast needs. The suite runs on Debian 12 and 13 (HOSTAGENT_SANDBOX_OS)."""

from __future__ import annotations

import re

import pytest

from tests.integration.helpers import create, machine_pid, props, wait_screen
from tests.sandbox import GUEST_REPO, Sandbox

pytestmark = pytest.mark.core  # The core, run again on Debian 13 (dev/test).

UINT64_MAX = 2**64 - 1


def test_the_machine_boots_the_layout_asked_for(sb: Sandbox) -> None:
    fs = sb.run("stat", "-fc", "%T", "/sys/fs/cgroup").check().stdout.strip()
    assert fs == ("cgroup2fs" if sb.layout == "unified" else "tmpfs")
    version = sb.run("systemctl", "--version").check().stdout.split()[1]
    assert int(version) >= 252


def counting(sb: Sandbox, loops: int) -> str:
    """A session of alice's that spends some CPU time counting, then sleeps: its name, once
    the count is done."""
    name = create(
        sb,
        "shell",
        "--",
        "-c",
        f"i=0; while [ $i -lt {loops} ]; do i=$((i+1)); done; echo counted; sleep 600",
        user="alice",
    )
    wait_screen(sb, name, "counted")
    return name


def test_cpu_time_is_accounted_and_list_shows_it(sb: Sandbox) -> None:
    name = counting(sb, 200000)
    try:
        cpu = props(sb, name)["CPUUsageNSec"]
        if sb.layout == "hybrid" and cpu == UINT64_MAX:
            pytest.skip(
                "hybrid layout: systemd 252 reads CPU time from the cpuacct controller, "
                "which this host does not lend"
            )
        assert 0 < cpu < UINT64_MAX
        (row,) = sb.ctl("list", name, user="alice", system=True).check().stdout.splitlines()[1:2]
        assert re.fullmatch(r"\d+(ms|s|m\d\ds)", row.split()[7]), row
    finally:
        sb.ctl("rm", name)


def test_the_counters_are_the_ones_systemctl_shows(sb: Sandbox) -> None:
    # The daemon reads them from the scope's cgroup files on the unified layout and asks
    # systemd on the hybrid one; either way they are systemd's figures. CPU time only grows, so
    # systemd's reading, taken between two of ours, lies between them.
    name = counting(sb, 100000)
    try:
        unit = props(sb, name)["Unit"]
        before = counters(props(sb, name))
        shown = (
            sb.run("systemctl", "show", "-p", "CPUUsageNSec", "-p", "MemoryCurrent", unit)
            .check()
            .stdout
        )
        after = counters(props(sb, name))
        systemd = {
            k: (UINT64_MAX if v == "[not set]" else int(v))
            for k, _, v in (line.partition("=") for line in shown.splitlines())
        }
        assert before["CPUUsageNSec"] <= systemd["CPUUsageNSec"] <= after["CPUUsageNSec"]
        memory = (before["MemoryCurrent"], systemd["MemoryCurrent"], after["MemoryCurrent"])
        if UINT64_MAX in memory:
            assert set(memory) == {UINT64_MAX}, memory  # none has a value, or all do
        else:
            assert max(memory) < 1.5 * min(memory), memory
    finally:
        sb.ctl("rm", name)


def counters(p: dict) -> dict[str, int]:
    """The two counters, with --json's null (no value) as the bus's UINT64_MAX."""
    return {k: UINT64_MAX if p[k] is None else p[k] for k in ("CPUUsageNSec", "MemoryCurrent")}


def test_memory_is_accounted_where_the_controller_is(sb: Sandbox) -> None:
    if "memory" not in sb.controllers():
        pytest.skip(
            f"{sb.layout} layout: this host binds the memory controller to cgroup v1, "
            "so the machine's cgroups have none"
        )
    name = create(sb, "demo-agent", user="alice")
    try:
        wait_screen(sb, name, "> ")
        memory = props(sb, name)["MemoryCurrent"]
        assert 0 < memory < UINT64_MAX
        (row,) = sb.ctl("list", name, user="alice", system=True).check().stdout.splitlines()[1:2]
        assert row.split()[6] != "-", row
    finally:
        sb.ctl("rm", name)


def test_the_string_length_shim_is_on_only_for_the_dbus_fast_that_needs_it(sb: Sandbox) -> None:
    probe = (
        sb.run(
            "python3",
            "-c",
            "import dbus_fast.__version__ as v; "
            "from hostagent.bus import compat; print(v.__version__, compat.BROKEN)",
            env={"PYTHONPATH": GUEST_REPO},
        )
        .check()
        .stdout.split()
    )
    # Debian 12's 1.84 measures strings in characters (fixed upstream in October 2023);
    # Debian 13's 2.44 measures bytes, and the shim leaves its bodies alone.
    expected = {"debian12": ("1.84", "True"), "debian13": ("2.44", "False")}[sb.system]
    assert (probe[0].rpartition(".")[0], probe[1]) == expected, probe
    # Either way a reply full of non-ASCII reaches the caller whole.
    name = create(sb, "shell", user="alice")
    try:
        text = "héllo · ❯ 世界"
        sb.ctl("send", name, f"echo '{text}'", user="alice", system=True).check()
        wait_screen(sb, name, text)
    finally:
        sb.ctl("rm", name)


@pytest.mark.parametrize("daemon", ["system", "user"])
def test_every_pane_stays_in_the_sessions_scope(sb: Sandbox, daemon: str) -> None:
    """tmux 3.4+ built with systemd (Debian 13's) moves each new pane into a scope of the
    user's own manager when its server can reach the user bus; the agent, and a pane a user
    splits off later, must stay in the session's scope and under its limits."""
    system = daemon == "system"
    if not system:
        sb.daemon_start(user="alice")
    try:
        made = sb.ctl("new", "--preset", "shell", user="alice", system=system).check()
        name = made.stdout.strip()
        sock = f"/run/hostagent/{sb.uid('alice')}/{name}.sock"
        if not system:
            sock = f"/run/user/{sb.uid('alice')}/hostagent/{name}.sock"
        sb.run("tmux", "-S", sock, "split-window", "-t", "main", user="alice").check()
        listed = ("list-panes", "-s", "-F", "#{pane_pid}")
        numbers = sb.run("tmux", "-S", sock, *listed, user="alice").check().stdout.split()
        panes = [machine_pid(sb, name, n) for n in numbers]
        assert len(panes) == 2
        for pid in panes:
            cgroup = sb.run("cat", f"/proc/{pid}/cgroup").check().stdout
            assert f"/hostagent-{name}.scope" in cgroup, cgroup
        env = sb.run("cat", f"/proc/{panes[0]}/environ").check().stdout.split("\0")
        assert f"XDG_RUNTIME_DIR=/run/user/{sb.uid('alice')}" in env
        sb.ctl("rm", name, user="alice", system=system).check()
    finally:
        if not system:
            sb.daemon_stop(user="alice")
