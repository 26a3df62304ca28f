"""How many of a session's hook lines are acted on: a bounded flow, so a flood slows no one.

Each valid hook line may write the session's record (a new conversation id) and a journal line.
An agent sends a few a second at most; a session that writes lines without end into its owner's
FIFO (each naming a new id) would otherwise have every one acted on, and every other caller
would wait behind the writes. So each session's lines are taken at most ``RATE`` a second, after
a burst of ``BURST``; while it sends faster, only the newest ``QUEUE`` wait (the newest id and
activity are what count), the rest are dropped, and the journal says so once per flood. The
lines taken in a flood are flagged: their ids are shown at once but written at most once a
second (a write is a millisecond of the loop, and ten a second showed in everyone's p99).

The pane-died line is not a hook of the agent's and never waits here.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from hostagent.daemon.state.background import Background
from hostagent.daemon.state.live import Session

log = logging.getLogger(__name__)

RATE = 10.0  # lines a second a session's hooks may have acted on, on average
BURST = 40.0  # lines acted on at once before the rate applies (a busy turn's tool calls)
QUEUE = 16  # the newest lines that wait while a session sends faster than RATE

Line = tuple[str, dict[str, object]]  # (event, data)
Take = Callable[[Session, str, dict[str, object], bool], Awaitable[None]]


def refill(tokens: float, elapsed: float, rate: float = RATE, burst: float = BURST) -> float:
    """The lines that may be taken now, elapsed seconds after there were tokens: a session's
    here, an owner's FIFO in hookpipe.py."""
    return min(burst, tokens + max(0.0, elapsed) * rate)


@dataclass
class _Flow:
    tokens: float
    stamp: float
    waiting: collections.deque[Line] = field(default_factory=lambda: collections.deque())
    dropped: int = 0
    draining: bool = False


class HookFlow:
    """Hands each session's hook lines to take, bounded as the module says. take's last
    argument says whether the line comes in a flood (its own log lines then stay quiet)."""

    def __init__(self, take: Take, background: Background) -> None:
        self.take = take
        self.background = background
        self._flows: dict[str, _Flow] = {}

    def offer(self, session: Session, event: str, data: dict[str, object]) -> None:
        now = asyncio.get_running_loop().time()
        flow = self._flows.get(session.name)
        if flow is None:
            flow = self._flows[session.name] = _Flow(BURST, now)
        if len(flow.waiting) >= QUEUE:
            flow.waiting.popleft()  # the oldest goes: the newest id and activity count
            flow.dropped += 1
            if flow.dropped == 1:
                log.warning(
                    "session '%s': its hooks send more than %d lines a second; only the "
                    "newest are taken until they slow down",
                    session.name,
                    RATE,
                )
        flow.waiting.append((event, data))
        if not flow.draining:
            flow.draining = True
            self.background.start(
                self._drain(session, flow), f"take session '{session.name}''s hooks"
            )

    def forget(self, name: str) -> None:
        """The session is gone: lines still waiting for it go with it."""
        flow = self._flows.pop(name, None)
        if flow is not None:
            flow.waiting.clear()

    async def _drain(self, session: Session, flow: _Flow) -> None:
        loop = asyncio.get_running_loop()
        try:
            while flow.waiting:
                now = loop.time()
                flow.tokens, flow.stamp = refill(flow.tokens, now - flow.stamp), now
                if flow.tokens < 1:
                    await asyncio.sleep((1 - flow.tokens) / RATE)
                    continue
                flow.tokens -= 1
                event, data = flow.waiting.popleft()
                await self.take(session, event, data, flow.dropped > 0)
        finally:
            flow.draining = False
            if flow.dropped:
                log.info(
                    "session '%s': its hooks slowed down; %d lines were dropped",
                    session.name,
                    flow.dropped,
                )
                flow.dropped = 0
