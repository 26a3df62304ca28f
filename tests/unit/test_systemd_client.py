"""The systemd client against a scripted systemd on a private ``dbus-daemon --session`` bus.

The stand-in owns org.freedesktop.systemd1 and can do what PID 1 does when it re-executes
(`systemctl daemon-reexec`, a systemd package upgrade): leave the bus in the middle of a call
without answering, and come back under a new unique name. Signals from a bus client posing as
systemd or as the bus driver must change nothing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import pytest
from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from hostagent.bus.call import PROPERTIES
from hostagent.daemon.host.systemd import (
    MANAGER_IFACE,
    SYSTEMD,
    SYSTEMD_PATH,
    UNIT_IFACE,
    Systemd,
    unit_path,
)
from tests.unit.fakes import run


class FakeManager:
    """One incarnation of systemd on the bus."""

    ASKED_ID = bytes(range(16))  # the InvocationID a Get answers

    def __init__(self, bus: MessageBus, leave_on: str = "") -> None:
        self.bus = bus
        self.leave_on = leave_on  # a member whose call makes it leave without a reply
        self.calls: list[str] = []
        self.started_id: bytes | None = None  # what a started unit's signal says, if anything
        bus.add_message_handler(self._on_message)

    @classmethod
    async def start(cls, bus_address: str, leave_on: str = "") -> FakeManager:
        bus = await MessageBus(bus_address=bus_address).connect()
        manager = cls(bus, leave_on)
        await bus.request_name(SYSTEMD)
        return manager

    def _on_message(self, msg: Message) -> Message | bool | None:
        if msg.message_type != MessageType.METHOD_CALL:
            return None
        if msg.interface == PROPERTIES and msg.member == "Get":
            self.calls.append("Get")
            return Message.new_method_return(msg, "v", [Variant("ay", self.ASKED_ID)])
        if msg.interface != MANAGER_IFACE:
            return None
        self.calls.append(msg.member or "")
        if msg.member == self.leave_on:
            asyncio.get_running_loop().call_soon(self.bus.disconnect)
            return True  # handled: no reply, ever
        if msg.member == "StopUnit":
            job = f"/org/freedesktop/systemd1/job/{len(self.calls)}"
            self.bus.send(
                Message.new_signal(
                    SYSTEMD_PATH,
                    MANAGER_IFACE,
                    "JobRemoved",
                    "uoss",
                    [len(self.calls), job, msg.body[0], "done"],
                )
            )
            return Message.new_method_return(msg, "o", [job])
        if msg.member == "StartTransientUnit":
            return self._started(msg)
        return Message.new_method_return(msg)

    def _started(self, msg: Message) -> Message:
        """As PID 1 does: the reply, then the unit's changes, then its job's JobRemoved."""
        unit, job = msg.body[0], f"/org/freedesktop/systemd1/job/{len(self.calls)}"
        changed = {"ActiveState": Variant("s", "active")}
        if self.started_id is not None:
            changed["InvocationID"] = Variant("ay", self.started_id)
        reply = Message.new_method_return(msg, "o", [job])
        self.bus.send(reply)
        self.bus.send(
            Message.new_signal(
                unit_path(unit),
                PROPERTIES,
                "PropertiesChanged",
                "sa{sv}as",
                [UNIT_IFACE, changed, []],
            )
        )
        self.bus.send(
            Message.new_signal(
                SYSTEMD_PATH,
                MANAGER_IFACE,
                "JobRemoved",
                "uoss",
                [len(self.calls), job, unit, "done"],
            )
        )
        return True  # type: ignore[return-value]  # answered above, before the signals


class Heard:
    """Who a client's connect tells of units' changes, keeping what it is told."""

    def __init__(self) -> None:
        self.units: list[tuple[str, str]] = []
        self.results: list[tuple[str, str]] = []

    def on_unit(self, unit: str, state: str) -> None:
        self.units.append((unit, state))

    def on_result(self, unit: str, result: str) -> None:
        self.results.append((unit, result))


def test_a_call_that_meets_systemd_re_executing_is_made_again_once_it_is_back(
    bus_address: str,
) -> None:
    async def body() -> None:
        first = await FakeManager.start(bus_address, leave_on="StopUnit")
        daemon = await MessageBus(bus_address=bus_address).connect()
        systemd = Systemd(daemon)
        await systemd.connect(Heard())
        assert first.calls == ["Subscribe"]
        stop = asyncio.ensure_future(systemd.stop_unit("hostagent-a.scope"))
        left: Callable[[], Awaitable[None]] = first.bus.wait_for_disconnect  # untyped
        await left()  # it leaves when the call reaches it
        second = await FakeManager.start(bus_address)
        job = await stop
        assert job is not None
        assert await systemd.wait_job(job, 5) == "done"
        # The new incarnation was subscribed again, and got the call once more.
        assert sorted(second.calls) == ["StopUnit", "Subscribe"]
        daemon.disconnect()
        second.bus.disconnect()

    run(body())


def test_nobody_but_the_bus_can_say_who_systemd_is(bus_address: str) -> None:
    async def body() -> None:
        real = await FakeManager.start(bus_address)
        daemon = await MessageBus(bus_address=bus_address).connect()
        systemd = Systemd(daemon)
        await systemd.connect(Heard())
        owner = systemd._owner
        bob = await MessageBus(bus_address=bus_address).connect()
        # A unicast NameOwnerChanged naming bob as systemd, sent straight to the daemon.
        forged = Message.new_signal(
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "NameOwnerChanged",
            "sss",
            [SYSTEMD, owner, bob.unique_name],
        )
        forged.destination = daemon.unique_name
        bob.send(forged)
        # Then bob's JobRemoved for a job of the daemon's: it must not be believed.
        job = "/org/freedesktop/systemd1/job/7"
        fake_done = Message.new_signal(
            SYSTEMD_PATH, MANAGER_IFACE, "JobRemoved", "uoss", [7, job, "x.scope", "failed"]
        )
        fake_done.destination = daemon.unique_name
        bob.send(fake_done)
        # Two round trips order everything: bob's messages have reached the bus before his
        # own call returns, and the daemon's before its own call returns.
        for bus in (bob, daemon):
            await bus.call(
                Message(
                    destination="org.freedesktop.DBus",
                    path="/org/freedesktop/DBus",
                    interface="org.freedesktop.DBus",
                    member="GetId",
                )
            )
        assert systemd._owner == owner
        with pytest.raises(TimeoutError):
            await systemd.wait_job(job, 0.2)
        for bus in (daemon, bob, real.bus):
            bus.disconnect()

    run(body())


@pytest.mark.parametrize(
    ("signalled", "recorded", "asked"),
    [
        (bytes.fromhex("00112233445566778899aabbccddeeff"), "00112233445566778899aabbccddeeff", []),
        (None, FakeManager.ASKED_ID.hex(), ["Get"]),  # a systemd that did not say it
        (b"", FakeManager.ASKED_ID.hex(), ["Get"]),  # said as empty: not started yet
    ],
)
def test_a_started_scopes_invocation_id_is_taken_from_its_own_signal(
    bus_address: str, signalled: bytes | None, recorded: str, asked: list[str]
) -> None:
    """systemd sends a unit's changes before its job's JobRemoved, so the id a create records
    needs no Get of its own; where the signal did not carry it, it is asked for."""

    async def body() -> None:
        manager = await FakeManager.start(bus_address)
        manager.started_id = signalled
        daemon = await MessageBus(bus_address=bus_address).connect()
        systemd = Systemd(daemon)
        systemd._pidfds_work = False  # the private bus passes no descriptors
        await systemd.connect(Heard())
        unit = "hostagent-a.scope"
        job = await systemd.start_scope(unit, os.getpid(), [])
        assert await systemd.wait_job(job, 5) == "done"
        assert await systemd.started_invocation(unit) == recorded
        assert [c for c in manager.calls if c == "Get"] == asked
        for bus in (daemon, manager.bus):
            bus.disconnect()

    run(body())
