"""The daemon process around its event loop: what it sets up before the loop runs (descriptor
limit, child watching, a frozen heap) and how it ends without waiting on a task that will not.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import logging
import os
import resource
import sys
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("hostagent")

STOP_TASKS_TIMEOUT = 2.0  # seconds a stop waits for its tasks to end once cancelled


async def end_tasks() -> None:
    """Cancel what still runs and give it STOP_TASKS_TIMEOUT to end. A task that ignores its
    cancellation is logged with its stack and left behind: the records are flushed and the bus
    is gone, so nothing is lost by not waiting, and a stop must never hang on one."""
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in pending:
        task.cancel()
    if not pending:
        return
    _, stuck = await asyncio.wait(pending, timeout=STOP_TASKS_TIMEOUT)
    for task in stuck:
        trace = io.StringIO()
        task.print_stack(file=trace)
        log.warning("Stopping without waiting for a task that did not end: %s", trace.getvalue())


def run_loop(coro: Coroutine[Any, Any, int]) -> int:
    """asyncio.run, without its last wait for every task to end (see end_tasks)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro)
    finally:
        # Left-behind tasks would warn as they are collected; the process ends instead.
        sys.stdout.flush()
        sys.stderr.flush()


def watch_children_with_pidfds() -> None:
    """Python 3.11 waits for each subprocess on a thread of its own; a pidfd in the event loop
    costs no thread (3.12 does this by itself)."""
    if sys.version_info < (3, 12) and hasattr(os, "pidfd_open"):
        with contextlib.suppress(OSError):
            os.close(os.pidfd_open(os.getpid()))
            asyncio.set_child_watcher(asyncio.PidfdChildWatcher())


def raise_fd_limit() -> None:
    """Every watched session holds a descriptor: take the hard limit (systemd's default soft
    limit, 1024, would stop at a few hundred sessions)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def freeze_imports() -> None:
    """Move what the imports made (modules, classes, functions: most of the heap, and never
    garbage) out of the collector's sight. A full collection then walks the sessions only,
    which keeps its pause inside ListSessions' latency budget at 1000 sessions."""
    gc.collect()
    gc.freeze()
