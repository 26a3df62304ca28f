"""Which session a connection comes from (daemon/bus/placement.py), and the rights a session made
from inside another has (permissions.has_owner_rights): both must fail closed."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest
from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus

from hostagent.daemon.bus import placement as placing
from hostagent.daemon.bus.placement import (
    OUTSIDE,
    Opener,
    Placement,
    Seen,
    placeable,
    read_opener,
    read_pinned,
)
from hostagent.errors import AccessDenied
from hostagent.permissions import has_owner_rights
from hostagent.session import SessionRecord
from tests.unit.fakes import run


@pytest.mark.parametrize(
    ("appeared_by", "seen", "placed"),
    [
        (100, Seen(50, "/"), True),  # started before its connection appeared
        (100, Seen(100, "/"), True),  # within the same tick
        (100, Seen(101, "/"), False),  # started after: the pid was reused
        (100, None, False),  # gone, or the bus would not say
    ],
)
def test_a_connection_is_placed_only_by_the_process_that_opened_it(
    appeared_by: int, seen: Seen | None, placed: bool
) -> None:
    assert placeable(appeared_by, seen) is placed


def test_a_live_process_is_read_and_a_dead_one_is_not() -> None:
    me = read_pinned(os.getpid())
    assert me is not None and me.started <= placing.now()
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: its pid names nothing (or, later, someone else)
    assert read_pinned(child.pid) is None
    assert read_pinned(0) is None


def test_what_the_bus_says_of_a_process_is_read_under_a_pidfd_or_placed_outside() -> None:
    """A pidfd the bus gives is the process itself: read while alive, refused once gone; no
    pid and no pidfd is a peer outside the daemon's PID namespace (dbus-daemon 1.14 names an
    exited process's pid), so outside every session."""
    me = read_opener(Opener(os.getpid(), os.pidfd_open(os.getpid())))
    assert me is not None and me.started == 0 and me.cgroup
    child = subprocess.Popen(["true"])
    held = os.pidfd_open(child.pid)
    child.wait()
    assert read_opener(Opener(child.pid, held)) is None  # its pidfd says: exited
    assert read_opener(Opener(child.pid)) is None  # its pid names nothing
    assert read_opener(Opener()) == OUTSIDE


def name_owner_changed(name: str, old: str, new: str) -> Message:
    return Message(
        message_type=MessageType.SIGNAL,
        sender="org.freedesktop.DBus",
        path="/org/freedesktop/DBus",
        interface="org.freedesktop.DBus",
        member="NameOwnerChanged",
        signature="sss",
        body=[name, old, new],
    )


class Host:
    """What the placement reads, scripted: the pid the bus names for each caller, what a
    pinned read of each pid finds, and the clock."""

    def __init__(self, pids: dict[str, int], seen: dict[int, Seen]) -> None:
        self.pids, self.seen, self.tick = pids, seen, 0

    async def ask(self, sender: str) -> Opener:
        return Opener(self.pids.get(sender, 0))

    def placement(self, bound: int = placing.SIGHTINGS_MAX) -> Placement:
        def unit_of(cgroup: str) -> str | None:
            return "hostagent-a.scope" if cgroup == "inside" else None

        bus = MessageBus(bus_address="unix:path=/nonexistent")

        def read(opener: Opener) -> Seen | None:
            return self.seen.get(opener.pid)

        return Placement(bus, self.ask, read, lambda: self.tick, unit_of, bound)


def test_a_caller_whose_process_is_gone_is_refused_not_taken_as_the_owner() -> None:
    async def body() -> None:
        p = Host({":1.5": 4242, ":1.6": 0}, {}).placement()
        for sender in (":1.5", ":1.6"):
            with pytest.raises(AccessDenied, match="has exited"):
                await p.unit(sender)

    run(body())


def test_a_process_younger_than_its_connection_is_refused() -> None:
    """The connection appeared at tick 10; the process now at its pid started later."""

    async def body() -> None:
        host = Host({":1.7": 4242}, {4242: Seen(11, "/")})
        p = host.placement()
        host.tick = 10
        p._on_message(name_owner_changed(":1.7", "", ":1.7"))
        with pytest.raises(AccessDenied):
            await p.unit(":1.7")
        host.seen[4242] = Seen(9, "inside")
        assert await p.unit(":1.7") == "hostagent-a.scope"

    run(body())


def test_a_placement_is_kept_for_the_connection_and_dropped_when_it_leaves() -> None:
    async def body() -> None:
        host = Host({":1.8": 4242}, {4242: Seen(0, "inside")})
        p = host.placement()
        p._on_message(name_owner_changed(":1.8", "", ":1.8"))
        assert await p.unit(":1.8") == "hostagent-a.scope"
        # Its process gone and its pid someone else's outside: the connection stays placed.
        host.seen[4242] = Seen(0, "/user.slice")
        assert await p.unit(":1.8") == "hostagent-a.scope"
        p._on_message(name_owner_changed(":1.8", ":1.8", ""))
        assert ":1.8" not in p._units and ":1.8" not in p._arrivals

    run(body())


def test_calls_that_come_at_once_ask_the_bus_once() -> None:
    """bob's burst of 300 calls on each of 20 connections: each connection is placed once,
    not once for each of its calls in flight."""

    async def body() -> None:
        host = Host({":1.9": 4242}, {4242: Seen(0, "inside")})
        asked: list[str] = []
        ask = host.ask

        async def counted(sender: str) -> Opener:
            asked.append(sender)
            await asyncio.sleep(0)  # the bus answers later: the others arrive meanwhile
            return await ask(sender)

        host.ask = counted  # type: ignore[method-assign]
        p = host.placement()
        units = await asyncio.gather(*(p.unit(":1.9") for _ in range(8)))
        assert units == ["hostagent-a.scope"] * 8 and asked == [":1.9"]

    run(body())


def test_an_arrival_forgotten_to_bound_the_table_raises_the_floor() -> None:
    async def body() -> None:
        host = Host({}, {})
        p = host.placement(bound=2)  # the daemon began to listen at tick 0
        for tick, name in enumerate([":1.1", ":1.2", ":1.3"], start=100):
            host.tick = tick
            p._on_message(name_owner_changed(name, "", name))
        assert p.appeared_by(":1.1") == 100  # forgotten: no later than the floor
        assert p.appeared_by(":1.3") == 102
        assert p.appeared_by(":1.99") == 100  # never heard of: no later than the floor

    run(body())


def record(uuid: str, preset: str, parent: str = "") -> SessionRecord:
    return SessionRecord(name=uuid, uuid=uuid, owner=1000, preset=preset, cwd="/", parent=parent)


RIGHTS = {"shell": "owner", "claude": "tree"}


@pytest.mark.parametrize(
    ("chain", "owner"),
    [
        ([("s", "shell", "")], True),  # a person's shell, made outside every session
        ([("c", "claude", "")], False),
        ([("s2", "shell", "c"), ("c", "claude", "")], False),  # a shell made by an agent
        ([("s2", "shell", "s"), ("s", "shell", "")], True),  # a shell made from a shell
        ([("s3", "shell", "s2"), ("s2", "shell", "c"), ("c", "claude", "")], False),
        ([("s2", "shell", "gone")], False),  # its maker's rights no longer known
    ],
)
def test_a_session_made_from_inside_gets_no_more_rights_than_its_maker(
    chain: list[tuple[str, str, str]], owner: bool
) -> None:
    records = {u: record(u, p, parent) for u, p, parent in chain}
    first = records[chain[0][0]]
    assert has_owner_rights(first, records, lambda preset: RIGHTS[preset]) is owner
