"""Files written so that a crash leaves the old one or the new one, and the fsyncs that make a
write survive a power cut, run on a thread of their own (the event loop never waits on a disk).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def replace_file(final: Path, data: bytes) -> None:
    """final holds data, or (OSError) stays as it was: written to a temp file beside it and
    renamed over it. A full disk or a plant leaves no temp file behind."""
    tmp = final.with_name(f".{final.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as f:  # a loop over short writes
            f.write(data)
        os.rename(tmp, final)
    except OSError:
        with contextlib.suppress(OSError):
            if not os.path.isdir(tmp):  # a directory planted there is not ours to remove
                os.unlink(tmp)
        raise


def file_shape(path: Path) -> tuple[int, int, int]:
    """(inode, size, mtime) of the file at path, to tell whether it changed under us; all 0
    when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return 0, 0, 0
    return st.st_ino, st.st_size, st.st_mtime_ns


class Syncer:
    """One daemon thread that fsyncs batches of records. It is never joined at exit, so a busy
    disk can delay durability but never the daemon's stop."""

    def __init__(self, sync: Callable[[set[Path]], None]) -> None:
        self._sync = sync
        self._queue: queue.SimpleQueue[tuple[set[Path], threading.Event]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, paths: set[Path]) -> threading.Event:
        """Queue paths; the event is set once they are on disk."""
        done = threading.Event()
        self._queue.put((paths, done))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hostagent-fsync", daemon=True)
            self._thread.start()
        return done

    def _run(self) -> None:
        while True:
            paths, done = self._queue.get()
            try:
                self._sync(paths)
            except OSError as e:
                log.error("Failed to sync session records to disk: %s", e)
            done.set()
