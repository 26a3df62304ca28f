"""A caller's calls run a few at a time and the rest wait their turn, while another caller's
call starts at once; waits take no turn; a caller who leaves has its queued calls dropped."""

from __future__ import annotations

import asyncio

from hostagent.daemon.bus.turns import MAX_RUNNING, Turns


class Calls:
    """Calls that run until their gate opens, and the order they started in."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    def start(self, name: str):  # type: ignore[no-untyped-def]
        async def run() -> None:
            self.started.append(name)
            await self.gates.setdefault(name, asyncio.Event()).wait()

        return lambda: asyncio.get_running_loop().create_task(run())

    def finish(self, name: str) -> None:
        self.gates.setdefault(name, asyncio.Event()).set()


async def settle() -> None:
    """Let every task that can run, run, and every done callback follow (a bounded number of
    loop turns: each started call, and each end, takes two)."""
    for _ in range(4 * MAX_RUNNING):
        await asyncio.sleep(0)


def test_a_burst_runs_a_few_at_a_time_and_another_caller_goes_first() -> None:
    async def body() -> None:
        turns, calls = Turns(), Calls()
        for i in range(3 * MAX_RUNNING):
            turns.take(":1.bob", calls.start(f"bob{i}"), waits=False)
        turns.take(":1.alice", calls.start("alice"), waits=False)
        await settle()
        assert calls.started == [f"bob{i}" for i in range(MAX_RUNNING)] + ["alice"]
        calls.finish("bob0")
        calls.finish("bob1")
        await settle()
        assert calls.started[-2:] == [f"bob{MAX_RUNNING}", f"bob{MAX_RUNNING + 1}"]
        assert len(turns.tasks(":1.bob")) == MAX_RUNNING
        for i in range(3 * MAX_RUNNING):
            calls.finish(f"bob{i}")
        calls.finish("alice")
        await settle()
        assert len(calls.started) == 3 * MAX_RUNNING + 1 and turns._callers == {}

    asyncio.run(body())


def test_waits_take_no_turn_but_count_in_flight() -> None:
    async def body() -> None:
        turns, calls = Turns(in_flight=MAX_RUNNING + 2), Calls()
        for i in range(2):
            turns.take(":1.bob", calls.start(f"wait{i}"), waits=True)
        for i in range(MAX_RUNNING):
            turns.take(":1.bob", calls.start(f"call{i}"), waits=False)
        await settle()
        assert len(calls.started) == MAX_RUNNING + 2 and turns.full(":1.bob")
        assert not turns.full(":1.alice")

    asyncio.run(body())


def test_a_caller_who_left_has_its_queued_calls_dropped() -> None:
    async def body() -> None:
        turns, calls = Turns(), Calls()
        for i in range(MAX_RUNNING + 5):
            turns.take(":1.bob", calls.start(f"bob{i}"), waits=False)
        await settle()
        turns.left(":1.bob")
        for i in range(MAX_RUNNING):
            calls.finish(f"bob{i}")
        await settle()
        assert len(calls.started) == MAX_RUNNING and turns._callers == {}

    asyncio.run(body())
