"""Work the daemon starts and does not wait for, under one policy.

A reconcile, the look at an agent that exited, a hook's report: each runs as a task nobody
awaits. asyncio keeps only a weak reference to such a task, so it is held here until it ends;
and when it fails, its exception is logged once, naming what it was doing, instead of vanishing
or reaching asyncio's "exception was never retrieved". A failure never stops the daemon, and a
task cancelled at shutdown is no failure. The fast tests wait for all of them (``settle``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Background:
    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[None], str] = {}

    def start(self, coro: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        """Run coro in the background; what says, for a log line, what it does ("reconcile
        session 'a'")."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks[task] = what
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        what = self._tasks.pop(task, "do background work")
        if not task.cancelled() and task.exception() is not None:
            log.error("Failed to %s", what, exc_info=task.exception())

    def __len__(self) -> int:
        return len(self._tasks)

    async def settle(self) -> None:
        """Wait until every task, and every task those started, has ended."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))
