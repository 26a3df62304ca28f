"""Work nobody awaits: held until it ends, a failure logged once with what it was doing, a
cancellation no failure, and settle waits for the work that work starts."""

from __future__ import annotations

import asyncio
import logging

import pytest

from hostagent.daemon.state.background import Background
from tests.unit.fakes import run


def test_a_failure_is_logged_once_naming_what_failed(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        background = Background()

        async def boom() -> None:
            raise RuntimeError("no tmux")

        async def forever() -> None:
            await asyncio.Event().wait()

        background.start(boom(), "reconcile session 'a'")
        hung = background.start(forever(), "wait for nothing")
        await asyncio.sleep(0)
        hung.cancel()
        await background.settle()
        assert len(background) == 0

    with caplog.at_level(logging.ERROR, logger="hostagent.daemon.state.background"):
        run(body())
    assert [r.getMessage() for r in caplog.records] == ["Failed to reconcile session 'a'"]


def test_settle_waits_for_work_started_by_work() -> None:
    async def body() -> None:
        background = Background()
        done: list[str] = []

        async def second() -> None:
            done.append("second")

        async def first() -> None:
            await asyncio.sleep(0)
            background.start(second(), "second")
            done.append("first")

        background.start(first(), "first")
        await background.settle()
        assert done == ["first", "second"]

    run(body())
