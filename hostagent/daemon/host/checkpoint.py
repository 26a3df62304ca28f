"""Named points inside an operation where a test can park the daemon.

Races and crashes are tested deterministically: the test parks one side at a chosen point, acts
(a second call, or SIGKILL of the daemon), then lets it go. A point is armed when a FIFO with its
name (or ``POINT@SESSION``, for one session's operations) exists in the directory that
``HOSTAGENT_CHECKPOINT_DIR`` names; reaching it blocks until a writer has opened the FIFO and
closed it again. Without the variable, which only the test
sandbox's drop-in sets, ``reached`` returns at once and touches nothing on disk.

The directory must be owned by root (or by the daemon's user) and not writable by others, so
nobody else can park a daemon.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat

log = logging.getLogger(__name__)

ENV = "HOSTAGENT_CHECKPOINT_DIR"

# The points, named once, so tests and docs name the same ones.
CREATE_MADE = "create-made"  # its worktree and runtime files are made; no record, no scope
CREATE_RECORDED = "create-recorded"  # the record says starting; the scope holds only the shim
SCOPE_STARTED = "scope-started"  # the scope holds the held child; tmux not let go yet
SPAWN_STARTED = "spawn-started"  # the scope runs; the record does not say so yet
STOP_RECORDED = "stop-recorded"  # the record says stopping; no stop job yet
STOP_DONE = "stop-done"  # the scope is gone; the record still says stopping
RESUME_RECORDED = "resume-recorded"  # the record says starting for a resume; no scope yet
REMOVE_STOPPED = "remove-stopped"  # the scope is gone; the record still exists
LOCK_WAIT = "lock-wait"  # an operation found its session's lock taken by another
USAGE_ENTERED = "usage-entered"  # a reading's news are in the books, not yet in the record
RECOVERY_LISTED = "recovery-listed"  # recovery listed the units; no record decided yet


def _armed(point: str) -> str | None:
    directory = os.environ.get(ENV)
    if not directory:
        return None
    try:
        st = os.stat(directory)
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & stat.S_IWOTH:
            return None
        path = os.path.join(directory, point)
        return path if stat.S_ISFIFO(os.stat(path).st_mode) else None
    except OSError:
        return None


def _wait_for_writer(path: str) -> None:
    # open() blocks until a writer opens the FIFO; read() returns at its close.
    with open(path, "rb") as fifo:
        fifo.read()


async def reached(point: str, session: str = "") -> None:
    """Park here if point is armed: for every operation (a FIFO named point), or for the named
    session's alone (point@NAME), so that another client's operation passing the same point
    (a bystander's create) cannot take a test's park."""
    path = (_armed(f"{point}@{session}") if session else None) or _armed(point)
    if path is None:
        return
    log.warning("Parked at checkpoint %s", os.path.basename(path))
    await asyncio.to_thread(_wait_for_writer, path)
    log.warning("Left checkpoint %s", point)
