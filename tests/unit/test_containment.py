"""Containment, pure parts: which cgroup a process is in, which of an agent's processes left
its scope, and what an exited agent left behind."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from hostagent.daemon.follow.containment import describe, escaped, left_behind, tree
from hostagent.daemon.host.procfs import Process as Proc
from hostagent.daemon.host.procfs import cgroup_path, children_of
from hostagent.daemon.host.procfs import read as read_proc

SCOPE = "/hostagent.slice/hostagent-a.scope"


@pytest.mark.parametrize(
    ("lines", "path"),
    [
        (["0::/hostagent.slice/hostagent-a.scope"], SCOPE),  # unified
        # A unified container on a hybrid host also lists the host's v1 hierarchies at "/".
        (["9:name=systemd:/", "4:memory:/", "0::/system.slice/y.scope"], "/system.slice/y.scope"),
        (["12:pids:/x", "1:name=systemd:/system.slice/y.scope"], "/system.slice/y.scope"),
        # legacy with the unified hierarchy mounted but unused: everything at its root
        (["1:name=systemd:/system.slice/y.service", "0::/"], "/system.slice/y.service"),
        ("0::/hostagent.slice/hostagent-a.scope\n", SCOPE),  # the file's text, as read
        ([], ""),
    ],
)
def test_the_cgroup_systemd_tracks(lines: list[str] | str, path: str) -> None:
    """One parser for the unified, hybrid and legacy layouts (host/procfs.py)."""
    assert cgroup_path(lines) == path


def test_only_the_agents_descendants_outside_its_cgroup_have_escaped() -> None:
    procs = {
        1: Proc(1, 0, "systemd", "/init.scope", False),
        10: Proc(10, 1, "tmux: server", SCOPE, False),
        11: Proc(11, 10, "codex", SCOPE, False),  # the agent
        12: Proc(12, 11, "node", SCOPE, False),
        13: Proc(13, 12, "sleep", "/system.slice/run-u7.scope", False),  # moved out
        14: Proc(14, 11, "sh", "/system.slice/x.scope", True),  # a zombie: gone already
        20: Proc(20, 1, "sleep", "/system.slice/other.scope", False),  # not the agent's
    }
    assert [p.pid for p in escaped(procs, 11)] == [13]
    assert escaped(procs, 99) == []


def test_what_an_exited_agent_left_behind_is_everything_but_tmux_and_zombies() -> None:
    found = left_behind(
        [
            Proc(10, 1, "tmux: server", SCOPE, False),
            Proc(30, 1, "codex", SCOPE, False),
            Proc(31, 10, "node", SCOPE, True),
            Proc(32, 10, "cat", SCOPE, False),  # tmux's pipe-pane
            Proc(33, 1, "cat", SCOPE, False),  # a cat of the agent's, reparented: left
            None,  # exited meanwhile
        ]
    )
    assert [p.comm for p in found] == ["codex", "cat"]
    assert describe(found, "left behind by the agent") == (
        "2 processes left behind by the agent: codex (30), cat (33)"
    )
    many = [Proc(i, 1, "w", SCOPE, False) for i in range(7)]
    assert describe(many, "x").endswith("w (4) and 2 more")


def test_a_sessions_init_is_not_left_behind_but_a_process_named_as_it_is() -> None:
    """The PID namespace's init (pidone.py) is the one process whose parent is outside the
    scope; a process of the agent's that takes its name has its parent inside."""
    found = left_behind(
        [
            Proc(9, 4, "hostagent-init", SCOPE, False),  # its parent: the forker, outside
            Proc(10, 9, "tmux: server", SCOPE, False),
            Proc(33, 9, "hostagent-init", SCOPE, False),  # the agent's, reparented to init
        ]
    )
    assert [p.pid for p in found] == [33]


def test_this_process_reads_as_itself() -> None:
    me = read_proc(os.getpid())
    assert me is not None and me.ppid == os.getppid() and not me.zombie


def test_a_tree_is_read_from_its_root_down_without_listing_all_of_proc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guard's cost follows the sessions' processes: it reads the agent's tree through the
    kernel's children lists, and never lists /proc itself."""
    listed: list[str] = []
    real_listdir = os.listdir

    def listdir(path: str) -> list[str]:
        listed.append(path)
        return real_listdir(path)

    with subprocess.Popen(["sh", "-c", "sleep 30 & wait"]) as shell:
        until_children(shell.pid)
        monkeypatch.setattr(os, "listdir", listdir)
        found = tree(shell.pid)
        monkeypatch.undo()
        shell.kill()
    assert [p.comm for p in found.values()] == ["sh", "sleep"]
    assert "/proc" not in listed and all(path.endswith("/task") for path in listed)


def test_a_lone_process_costs_no_read_of_its_own() -> None:
    """An idle shell has no descendants, so nothing of it can have left its cgroup: the guard
    reads its children list and nothing more."""
    with subprocess.Popen(["sleep", "30"]) as lone:
        assert tree(lone.pid) == {}
        lone.kill()


def until_children(pid: int) -> None:
    """Until the shell's child runs sleep (its fork and exec are the events; bounded)."""
    for _ in range(2000):
        kids = [read_proc(child) for child in children_of(pid)]
        if any(kid is not None and kid.comm == "sleep" for kid in kids):
            return
        time.sleep(0.005)
    raise AssertionError("the shell never started its sleep")
