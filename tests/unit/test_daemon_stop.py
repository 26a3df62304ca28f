"""The daemon's stop never waits on a task that ignores its cancellation: it logs the task's
stack and goes (a CI run once saw the stop hang in asyncio.run's last wait for every task)."""

from __future__ import annotations

import asyncio

import pytest

from hostagent.daemon import main


async def stubborn() -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue  # what a buggy library task does


def test_a_task_that_ignores_cancellation_does_not_hold_the_stop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(main, "STOP_TASKS_TIMEOUT", 0.05)
    tasks: list[asyncio.Task[None]] = []

    async def body() -> int:
        tasks.append(asyncio.get_running_loop().create_task(stubborn()))
        tasks.append(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))
        await asyncio.sleep(0)
        await main._end_tasks()
        return 7

    assert main._run(body()) == 7  # asyncio.run would wait for the stubborn task forever
    stubborn_task, polite = tasks
    assert polite.cancelled() and not stubborn_task.done()
    assert "did not end" in caplog.text and "stubborn" in caplog.text
    loop = stubborn_task.get_loop()
    loop.close()
    asyncio.set_event_loop(None)
