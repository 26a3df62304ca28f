"""Each caller's method calls, taken a few at a time.

The daemon serves every caller on one thread, and dbus-fast hands it each call as it is read.
A caller who sends a hundred calls at once (the hostile suite's burst of captures) had every
one of them started on arrival, and a bystander's call read just after them waited for all of
them. So a caller has at most ``MAX_RUNNING`` calls running; its others wait in a queue of its
own and start one by one as its earlier calls end, while another caller's call starts as soon
as it arrives. A call that waits for something to happen (``Method.waits``) takes no turn. Past
``MAX_IN_FLIGHT`` calls running and queued, the exporter refuses a caller's next one.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_IN_FLIGHT = 256  # method calls one connection may have running or queued
MAX_RUNNING = 8  # of those, running at once (waits aside)

Start = Callable[[], "asyncio.Task[None]"]


@dataclass
class _Caller:
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    running: int = 0  # tasks that take a turn
    queued: collections.deque[tuple[Start, bool]] = field(default_factory=collections.deque)


class Turns:
    """Callers' method calls, by unique bus name."""

    def __init__(self, in_flight: int = MAX_IN_FLIGHT, running: int = MAX_RUNNING) -> None:
        self.in_flight = in_flight
        self.running = running
        self._callers: dict[str, _Caller] = {}

    def full(self, sender: str) -> bool:
        """Whether sender has in_flight calls running or queued."""
        caller = self._callers.get(sender)
        return caller is not None and len(caller.tasks) + len(caller.queued) >= self.in_flight

    def take(self, sender: str, start: Start, waits: bool) -> None:
        """Start a call of sender's now, or once its turn comes."""
        caller = self._callers.setdefault(sender, _Caller())
        if waits or caller.running < self.running:
            self._begin(sender, caller, start, waits)
        else:
            caller.queued.append((start, waits))

    def tasks(self, sender: str) -> list[asyncio.Task[None]]:
        caller = self._callers.get(sender)
        return list(caller.tasks) if caller else []

    def left(self, sender: str) -> None:
        """sender left the bus: its queued calls are never started (nobody would read their
        replies); those running go on to their end."""
        caller = self._callers.get(sender)
        if caller is not None:
            caller.queued.clear()
            if not caller.tasks:
                del self._callers[sender]

    def _begin(self, sender: str, caller: _Caller, start: Start, waits: bool) -> None:
        task = start()
        caller.tasks.add(task)
        if not waits:
            caller.running += 1
        task.add_done_callback(lambda t: self._done(sender, caller, t, waits))

    def _done(self, sender: str, caller: _Caller, task: asyncio.Task[None], waits: bool) -> None:
        caller.tasks.discard(task)
        if not waits:
            caller.running -= 1
        while caller.queued and caller.running < self.running:
            self._begin(sender, caller, *caller.queued.popleft())
        if not caller.tasks and not caller.queued and self._callers.get(sender) is caller:
            del self._callers[sender]
