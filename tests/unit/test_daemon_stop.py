"""The daemon's start and stop around its predecessor: the stop never waits on a task that
ignores its cancellation (a CI run saw the stop hang in asyncio.run's last wait for every
task), and a start takes the bus name over once the bus has let the previous daemon go."""

from __future__ import annotations

import asyncio

import pytest
from dbus_fast.aio import MessageBus

from hostagent import BUS_NAME
from hostagent.bus.call import DBUS, DBUS_PATH, call
from hostagent.daemon import process, server


async def stubborn() -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue  # what a buggy library task does


def test_a_task_that_ignores_cancellation_does_not_hold_the_stop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(process, "STOP_TASKS_TIMEOUT", 0.05)
    tasks: list[asyncio.Task[None]] = []

    async def body() -> int:
        tasks.append(asyncio.get_running_loop().create_task(stubborn()))
        tasks.append(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))
        await asyncio.sleep(0)
        await process.end_tasks()
        return 7

    assert process.run_loop(body()) == 7  # asyncio.run would wait for the stubborn task forever
    stubborn_task, polite = tasks
    assert polite.cancelled() and not stubborn_task.done()
    assert "did not end" in caplog.text and "stubborn" in caplog.text
    loop = stubborn_task.get_loop()
    loop.close()
    asyncio.set_event_loop(None)


def test_a_start_waits_for_the_name_the_previous_daemon_held(bus_address: str) -> None:
    async def body() -> None:
        previous = await MessageBus(bus_address=bus_address).connect()
        await previous.request_name(BUS_NAME)
        new = await MessageBus(bus_address=bus_address).connect()
        owning = asyncio.ensure_future(server._own_name(new))
        # The request is queued behind the previous daemon; it is granted once that goes.
        await call(new, DBUS, DBUS_PATH, DBUS, "GetId")
        assert not owning.done()
        previous.disconnect()
        assert await asyncio.wait_for(owning, 5)
        new.disconnect()

    asyncio.run(body())
