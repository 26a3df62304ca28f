"""Where the daemon's tmux clients run (host/enclosure.py, host/inside.py): the decisions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hostagent.daemon.host.enclosure import (
    Enclosure,
    at_limit,
    hierarchies,
    in_unit,
    named,
    namespaces_to_join,
    procs_files,
    tracking,
)
from hostagent.daemon.host.inside import NoEnclosure, session_of_socket
from hostagent.daemon.host.tmux import Tmux, TmuxError
from hostagent.identity import Owner

NEWNS, NEWUSER, NEWPID = 0x00020000, 0x10000000, 0x20000000


@pytest.mark.parametrize(
    ("sock", "name"),
    [
        ("/run/hostagent/1001/work.d/tmux.sock", "work"),
        ("/run/hostagent/1001/work.sock", "work"),  # a legacy session's
        ("/run/user/1001/hostagent/a-b_c.d/tmux.sock", "a-b_c"),
        ("/run/hostagent/1001/.d/tmux.sock", None),
        ("/run/hostagent/1001/work.d/other.sock", "other"),  # read as a legacy name
        ("/run/hostagent/1001/work.d/out", None),
        ("/run/hostagent/1001/bad name.d/tmux.sock", None),
        ("/tmp/tmux-1001/default", None),
    ],
)
def test_a_socket_names_its_session(sock: str, name: str | None) -> None:
    assert session_of_socket(Path(sock)) == name


HYBRID = "9:name=systemd:/hostagent.slice/hostagent-w.scope\n8:pids:/hostagent.slice/hostagent-w.scope\n1:cpu,cpuacct:/\n0::/hostagent.slice/hostagent-w.scope\n"


@pytest.mark.parametrize(
    ("text", "tracked"),
    [
        (
            "0::/user.slice/user-1001.slice/hostagent-w.scope\n",
            "/user.slice/user-1001.slice/hostagent-w.scope",
        ),
        (HYBRID, "/hostagent.slice/hostagent-w.scope"),
        ("1:name=systemd:/x.scope\n0::/\n", "/x.scope"),  # legacy: the unified one at its root
        ("1:name=systemd:/x.scope\n", "/x.scope"),
        ("", ""),
    ],
)
def test_a_process_is_tracked_by_the_hierarchy_systemd_uses(text: str, tracked: str) -> None:
    assert tracking(hierarchies(text)) == tracked


@pytest.mark.parametrize(
    ("ours", "theirs", "files"),
    [
        (
            "0::/system.slice/hostagent.service\n",
            "0::/u.slice/w.scope\n",
            ["/sys/fs/cgroup/u.slice/w.scope/cgroup.procs"],
        ),
        ("0::/w.scope\n", "0::/w.scope\n", []),  # already there (the user daemon's own test)
        (
            "9:name=systemd:/system.slice/hostagent.service\n8:pids:/system.slice/hostagent.service\n"
            "1:cpu,cpuacct:/\n0::/system.slice/hostagent.service\n",
            HYBRID,
            [
                "/sys/fs/cgroup/unified/hostagent.slice/hostagent-w.scope/cgroup.procs",
                "/sys/fs/cgroup/systemd/hostagent.slice/hostagent-w.scope/cgroup.procs",
                "/sys/fs/cgroup/pids/hostagent.slice/hostagent-w.scope/cgroup.procs",
            ],
        ),
    ],
)
def test_joining_writes_each_hierarchy_that_differs_the_tracked_one_first(
    ours: str, theirs: str, files: list[str]
) -> None:
    unified = "/sys/fs/cgroup/unified" if "name=systemd" in theirs else "/sys/fs/cgroup"
    assert procs_files(hierarchies(ours), hierarchies(theirs), unified) == files


@pytest.mark.parametrize(
    ("argv", "named_as"),
    [
        (
            ["setpriv", "--", "tmux", "-S", "/run/s.sock", "capture-pane"],
            ["setpriv", "--", "tmux", "-S", "/proc/self/fd/5", "capture-pane"],
        ),
        (
            ["tmux", "-S", "/run/other.sock", "capture-pane"],
            ["tmux", "-S", "/run/other.sock", "capture-pane"],
        ),
        (["tmux", "-L", "/run/s.sock"], ["tmux", "-L", "/run/s.sock"]),
    ],
)
def test_the_client_names_the_socket_as_the_daemon_reached_it(
    argv: list[str], named_as: list[str]
) -> None:
    assert named(argv, "/run/s.sock", "/proc/self/fd/5") == named_as


@pytest.mark.parametrize(
    ("cgroup", "unit", "inside"),
    [
        ("/user.slice/user-1001.slice/hostagent-w.scope", "hostagent-w.scope", True),
        ("/user.slice/hostagent-w.scope/sub", "hostagent-w.scope", True),
        ("/system.slice/hostagent.service", "hostagent-w.scope", False),
        ("/user.slice/hostagent-w.scope2", "hostagent-w.scope", False),
        ("", "hostagent-w.scope", False),  # gone
        ("/x.scope", "", False),
    ],
)
def test_a_process_is_in_a_unit_by_its_cgroups_names(cgroup: str, unit: str, inside: bool) -> None:
    assert in_unit(cgroup, unit) is inside


@pytest.mark.parametrize(
    ("theirs", "flags"),
    [
        ({"mnt": 1, "user": 10, "pid": 5}, 0),  # a session with no namespace of its own
        ({"mnt": 2, "user": 10, "pid": 6}, NEWNS | NEWPID),  # the system daemon's
        ({"mnt": 2, "user": 11, "pid": 5}, NEWNS | NEWUSER),  # the user daemon's sandbox
    ],
)
def test_only_the_sessions_own_namespaces_are_joined(theirs: dict[str, int], flags: int) -> None:
    assert namespaces_to_join({"mnt": 1, "user": 10, "pid": 5}, theirs) == flags


def test_with_a_locator_every_tmux_command_runs_inside_its_session() -> None:
    """The daemon's Tmux never runs a client outside: each command goes to execute_inside
    with the enclosure found for its socket, and a socket of no running session is refused
    by name, with nothing run."""
    ran: list[tuple[list[str], Enclosure]] = []
    outside: list[list[str]] = []
    here = Enclosure(4242, "hostagent-w.scope", 6)

    async def locate(sock: Path) -> Enclosure:
        if sock.parent.name != "w.d":
            raise NoEnclosure("session 'gone' has no process in hostagent-gone.scope")
        return here

    async def inside(owner, argv, enclosure, timeout, stdin, *, limit=0, stdout=-1):  # type: ignore[no-untyped-def]
        ran.append((argv, enclosure))
        return 0, b"the screen\n", b""

    async def plain(owner, argv, timeout, stdin, *, limit=0, stdout=-1):  # type: ignore[no-untyped-def]
        outside.append(argv)
        return 0, b"", b""

    tmux = Tmux(plain, locate=locate, execute_inside=inside)
    owner = Owner.from_uid(0)
    text = asyncio.run(tmux.capture(owner, Path("/run/hostagent/0/w.d/tmux.sock"), 0))
    assert text == "the screen\n" and ran[0][1] == here and "capture-pane" in ran[0][0]
    with pytest.raises(TmuxError, match="has no process"):
        asyncio.run(tmux.capture(owner, Path("/run/hostagent/0/gone.d/tmux.sock"), 0))
    assert len(ran) == 1 and outside == []


@pytest.mark.parametrize(
    ("counts", "full"),
    [
        ([], False),
        ([("3\n", "max\n"), ("59\n", "60\n")], False),
        ([("3\n", "max\n"), ("60\n", "60\n")], True),  # the user's slice, above the session
        ([("40\n", "40\n"), ("41\n", "max\n")], True),
    ],
)
def test_no_client_is_moved_into_a_cgroup_at_its_task_limit(
    counts: list[tuple[str, str]], full: bool
) -> None:
    assert at_limit(counts) is full
