"""The bus objects and the exporter on a private ``dbus-daemon --session`` bus, with the daemon's
core on fakes (tests/unit/fakes.py) and the real client library on the other end. No root, no
systemd: what is checked here is the wire (names, signatures, errors, signals)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest
from dbus_fast import Message, Variant
from dbus_fast.aio import MessageBus

from hostagent import BUS_NAME, MANAGER_INTERFACE, MANAGER_PATH, SESSION_INTERFACE
from hostagent.bus.call import PROPERTIES, CallError, add_match, call
from hostagent.client.follow import Follower, Link
from hostagent.client.library import Client
from hostagent.daemon.bus.auth import Authorizer
from hostagent.daemon.bus.export import Exporter
from hostagent.daemon.bus.intake import Intake
from hostagent.daemon.bus.placement import Placement, now, read_opener
from hostagent.daemon.host.scope import unit_in_cgroup
from hostagent.errors import (
    InvalidArgs,
    LimitsExceeded,
    NoSuchSession,
    NotRunning,
    SessionExists,
)
from hostagent.options import CreateRequest
from tests.unit.fakes import Host, me, run


async def serve(tmp: Path, address: str) -> tuple[Host, MessageBus, list[str]]:
    host = await Host.started(tmp)
    bus = await MessageBus(bus_address=address, negotiate_unix_fd=True).connect()
    reloads: list[str] = []
    intake = Intake.guard(bus)
    exporter = Exporter(bus, lambda sender: True)
    intake.limit_of, intake.refuse = exporter.largest, exporter.refuse
    auth = Authorizer(bus, use_polkit=False)
    placement = Placement(bus, auth.caller_process, read_opener, now, unit_in_cgroup)
    frontend = host.core.front(auth, placement, exporter, lambda: reloads.append("reload"))
    frontend.export_all()
    await exporter.follow_callers()
    await placement.follow()
    await bus.request_name(BUS_NAME)
    host.exporter = exporter
    return host, bus, reloads


def test_the_manager_and_session_objects_over_a_real_bus(tmp_path: Path, bus_address: str) -> None:
    async def body() -> None:
        _, server, reloads = await serve(tmp_path, bus_address)
        client = await Client.connect(system=False, address=bus_address)
        signals: list[tuple[str, list[Any]]] = []

        def on_message(msg: Message) -> None:
            if msg.member in ("SessionNew", "SessionRemoved", "PropertiesChanged"):
                signals.append((msg.member, list(msg.body)))

        client.bus.add_message_handler(on_message)
        await add_match(client.bus, f"type='signal',sender='{BUS_NAME}'")
        path = await client.create("a", "shell", str(tmp_path), {"args": Variant("as", ["x"])})
        assert path == "/org/hostagent/HostAgent1/session/a"
        rows = await client.list_sessions()
        assert [(r.name, r.state) for r in rows] == [("a", "running")]
        props = await client.properties("a")
        assert (props["State"], props["Command"]) == ("running", ["/bin/sh", "x"])
        with pytest.raises(SessionExists):
            await client.create("a", "shell", str(tmp_path), {})
        with pytest.raises(InvalidArgs, match="Unknown option"):
            await client.create("b", "shell", str(tmp_path), {"nope": Variant("s", "")})
        with pytest.raises(NoSuchSession):
            await client.stop("nope")
        with pytest.raises(InvalidArgs):
            await client.capture("a", -1)  # validated before anything else
        await client.stop("a")  # through the Manager: the Session object's handler
        with pytest.raises(NotRunning):
            await client.stop("a")
        await client.reload()
        assert reloads == ["reload"]
        await client.remove("a")
        assert await client.list_sessions() == []
        kinds = [s[0] for s in signals]
        assert kinds[0] == "SessionNew" and kinds[-1] == "SessionRemoved"
        states = [s[1][1]["State"].value for s in signals if s[0] == "PropertiesChanged"]
        # The scripted systemd stops at once: stopping and stopped in one turn of the loop are
        # one change on the bus, as systemd's own queue sends them.
        assert states[-1] == "stopped" and "stopping" not in states
        await client.aclose()
        server.disconnect()

    run(body())


def test_a_bad_signature_and_an_unknown_method_get_named_errors(
    tmp_path: Path, bus_address: str
) -> None:
    async def body() -> None:
        _, server, _ = await serve(tmp_path, bus_address)
        client = await MessageBus(bus_address=bus_address).connect()
        with pytest.raises(CallError) as bad:
            await call(client, BUS_NAME, MANAGER_PATH, MANAGER_INTERFACE, "GetSession", "u", [1])
        assert bad.value.name == "org.freedesktop.DBus.Error.InvalidArgs"
        with pytest.raises(CallError) as unknown:
            await call(client, BUS_NAME, MANAGER_PATH, MANAGER_INTERFACE, "Nope")
        assert unknown.value.name == "org.freedesktop.DBus.Error.UnknownMethod"
        (xml,) = await call(
            client, BUS_NAME, MANAGER_PATH, "org.freedesktop.DBus.Introspectable", "Introspect"
        )
        assert '<method name="CreateSession">' in xml
        client.disconnect()
        server.disconnect()
        await asyncio.sleep(0)

    run(body())


def test_a_follower_believes_only_the_daemon(tmp_path: Path, bus_address: str) -> None:
    """Signals sent straight to a client (unicast signals bypass match rules) by anyone but the
    daemon change nothing in its picture: bob cannot make alice's notifier alert."""

    async def body() -> None:
        host, server, _ = await serve(tmp_path, bus_address)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        changed = asyncio.Event()
        follower = Follower(lambda: Client.connect(system=False, address=bus_address), changed.set)
        await follower.start()
        while not (follower.link is Link.CONNECTED and "a" in follower.sessions):
            changed.clear()
            await asyncio.wait_for(changed.wait(), 5)
        assert follower.client is not None
        target = follower.client.bus.unique_name
        bob = await MessageBus(bus_address=bus_address).connect()
        forged = [
            Message.new_signal(
                MANAGER_PATH,
                MANAGER_INTERFACE,
                "SessionNew",
                "so",
                ["evil", "/org/hostagent/HostAgent1/session/evil"],
            ),
            Message.new_signal(
                "/org/hostagent/HostAgent1/session/a",
                PROPERTIES,
                "PropertiesChanged",
                "sa{sv}as",
                [SESSION_INTERFACE, {"Activity": Variant("s", "blocked")}, []],
            ),
            Message.new_signal(
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "NameOwnerChanged",
                "sss",
                [BUS_NAME, "", bob.unique_name],
            ),
        ]
        for msg in forged:
            msg.destination = target
            bob.send(msg)
        for bus in (bob, follower.client.bus):  # round trips order what came before
            await call(
                bus,
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "GetId",
            )
        assert "evil" not in follower.sessions
        assert follower.sessions["a"].activity != "blocked"
        assert follower.link is Link.CONNECTED
        follower.close()
        bob.disconnect()
        server.disconnect()

    run(body())


def test_a_wait_whose_caller_left_is_dropped_and_calls_per_caller_are_capped(
    tmp_path: Path, bus_address: str
) -> None:
    async def body() -> None:
        host, server, _ = await serve(tmp_path, bus_address)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        exporter = host.exporter
        assert exporter is not None
        exporter._turns.in_flight = 3
        waiter = await Client.connect(system=False, address=bus_address)
        path = waiter.session_path("a")

        def wait() -> Awaitable[list[Any]]:
            return waiter._call(
                path, SESSION_INTERFACE, "WaitForActivity", "ast", [["blocked"], 0], timeout=None
            )

        forever = [asyncio.ensure_future(wait()) for _ in range(3)]
        await asyncio.sleep(0)  # the three send their calls now, in this order
        # A property read (not a method call, so not counted) is answered after the daemon
        # has taken the three.
        await waiter._call(path, PROPERTIES, "Get", "ss", [SESSION_INTERFACE, "State"])
        with pytest.raises(LimitsExceeded):
            await wait()
        assert len(host.registry.get("a").waiters) == 3
        # The caller leaves without a word: a watcher sees the bus say so, and a round trip
        # of the daemon's own connection orders that news before it.
        watcher = await MessageBus(bus_address=bus_address).connect()
        gone = asyncio.get_running_loop().create_future()

        def on_message(msg: Message) -> None:
            if msg.member == "NameOwnerChanged" and msg.body[0] == waiter.bus.unique_name:
                if not gone.done():
                    gone.set_result(None)

        watcher.add_message_handler(on_message)
        await add_match(watcher, "type='signal',member='NameOwnerChanged'")
        waiter.close()
        await asyncio.wait_for(gone, 5)
        await call(
            server, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId"
        )
        if exporter._waits:  # cancelled; let them end
            await asyncio.wait(list(exporter._waits), timeout=5)
        assert host.registry.get("a").waiters == set()
        for fut in forever:
            fut.cancel()
        await asyncio.gather(*forever, return_exceptions=True)
        watcher.disconnect()
        server.disconnect()

    run(body())
