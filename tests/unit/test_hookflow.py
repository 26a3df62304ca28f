"""A session's hook lines are taken at a bounded rate: a flood keeps the newest, drops the
rest, and is logged once (hostagent/daemon/follow/hooks/hookflow.py)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from hostagent.daemon.follow.hooks import hookflow
from hostagent.daemon.follow.hooks.hookflow import BURST, QUEUE, RATE, HookFlow, refill
from hostagent.daemon.state.background import Background


@pytest.mark.parametrize(
    ("tokens", "elapsed", "after"),
    [
        (0.0, 0.0, 0.0),
        (0.0, 1.0, RATE),
        (BURST - 1, 10.0, BURST),  # never more than a burst
        (5.0, -3.0, 5.0),  # a clock that went back gives nothing
    ],
)
def test_a_sessions_allowance_refills_at_the_rate(
    tokens: float, elapsed: float, after: float
) -> None:
    assert refill(tokens, elapsed) == after


def test_a_flood_keeps_the_newest_lines_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    taken: list[tuple[str, bool]] = []

    async def take(session: object, event: str, data: dict[str, object], flood: bool) -> None:
        taken.append((str(data["session_id"]), flood))

    async def body() -> None:
        background = Background()
        flow = HookFlow(take, background)
        session = SimpleNamespace(name="bobs")
        for i in range(10_000):  # as fast as a FIFO delivers them: no turn for the drain
            flow.offer(session, "SessionStart", {"session_id": f"id-{i}"})  # type: ignore[arg-type]
        await background.settle()

    with caplog.at_level(logging.INFO, logger=hookflow.__name__):
        asyncio.run(body())
    assert [i for i, _ in taken] == [f"id-{i}" for i in range(10_000 - QUEUE, 10_000)]
    assert all(flood for _, flood in taken)  # their id changes are not logged one by one
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "only the newest are taken" in said[0]
    assert f"{10_000 - QUEUE} lines were dropped" in said[1]


def test_lines_beyond_the_burst_wait_for_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A steady stream faster than RATE is taken at RATE: nothing is lost while the queue
    holds, and the flow is not called a flood."""
    monkeypatch.setattr(hookflow, "RATE", 1000.0)
    monkeypatch.setattr(hookflow, "BURST", 4.0)
    taken: list[float] = []

    async def take(session: object, event: str, data: dict[str, object], flood: bool) -> None:
        assert not flood
        taken.append(asyncio.get_running_loop().time())

    async def body() -> None:
        background = Background()
        flow = HookFlow(take, background)
        session = SimpleNamespace(name="a")
        for i in range(12):
            flow.offer(session, "Stop", {"session_id": str(i)})  # type: ignore[arg-type]
        await background.settle()

    asyncio.run(body())
    assert len(taken) == 12
    # After the burst of 4, the other 8 took at least 8 / 1000 s (a bound the test can see).
    assert taken[-1] - taken[3] >= 7 / 1000
