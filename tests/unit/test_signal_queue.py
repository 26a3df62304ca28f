"""The bus frontend's signal queue: a create's reply goes out before the signals its last steps
caused, a session changed twice in one step sends one PropertiesChanged, and nothing is sent
out of order (a session's removal comes after its changes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dbus_fast.aio import MessageBus

from hostagent import MANAGER_INTERFACE, SESSION_INTERFACE
from hostagent.activity import Verdict
from hostagent.daemon.bus.auth import Authorizer
from hostagent.daemon.bus.manager import BusFrontend
from hostagent.daemon.bus.session import session_path
from hostagent.options import CreateRequest
from hostagent.session import Activity
from tests.unit.fakes import FakeExporter, Host, ShownWatch, me, placed, run


def frontend_of(host: Host) -> tuple[BusFrontend, FakeExporter]:
    exporter = FakeExporter()
    bus = MessageBus(bus_address="unix:path=/nonexistent")
    auth = Authorizer(bus, use_polkit=False)
    return host.core.front(auth, placed(bus, {}), exporter, lambda: None), exporter


def test_a_create_returns_before_its_running_state_is_signalled(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        _, exporter = frontend_of(host)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        path = session_path("a")
        # The scripted systemd never makes the create wait, so nothing went out before it
        # returned; on the real bus, SessionNew goes out while the create waits on systemd.
        assert exporter.emitted == []
        assert host.registry.get("a").record.state.value == "running"  # a Get says so already
        await asyncio.sleep(0)  # one turn of the loop: the queue goes out, in order
        assert exporter.emitted == [
            ("/org/hostagent/HostAgent1", MANAGER_INTERFACE, "SessionNew"),
            (path, SESSION_INTERFACE, "PropertiesChanged"),
        ]

    run(body())


def test_two_changes_in_one_step_are_one_signal_and_a_removal_comes_after(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        frontend, exporter = frontend_of(host)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        await asyncio.sleep(0)
        session, path = host.registry.get("a"), session_path("a")
        exporter.emitted.clear()
        shown = ShownWatch()
        session.watch = shown
        for activity in (Activity.WORKING, Activity.BLOCKED):
            shown.verdict = Verdict(activity, "screen", "test", "")
            host.registry.announce(session)
        assert exporter.emitted == []
        await asyncio.sleep(0)
        assert exporter.emitted == [(path, SESSION_INTERFACE, "PropertiesChanged")]
        assert frontend.objects["a"]._published["Activity"].value == "blocked"
        exporter.emitted.clear()
        shown.verdict = Verdict(Activity.IDLE, "screen", "test", "")
        host.registry.announce(session)
        host.registry.forget(session)  # in the same step: the change is sent first
        assert exporter.emitted == [
            (path, SESSION_INTERFACE, "PropertiesChanged"),
            ("/org/hostagent/HostAgent1", MANAGER_INTERFACE, "SessionRemoved"),
        ]
        await asyncio.sleep(0)
        assert len(exporter.emitted) == 2  # nothing left in the queue for a removed session

    run(body())
