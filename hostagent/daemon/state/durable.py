"""Files written so that a crash leaves the old one or the new one, and the fsyncs that make a
write survive a power cut, run on a thread of their own (the event loop never waits on a disk).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

FLUSH_DELAY = 0.2  # seconds between a write and its fsync


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


class BatchedSync:
    """The fsyncs of the files written into one directory, and of the directory: on a Syncer's
    thread FLUSH_DELAY after a write, with the writes made meanwhile; at once where no event
    loop runs (tools, tests)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._dirty: set[Path] = set()
        self._flush_scheduled = False
        self._syncer = Syncer(self._sync)

    def written(self, path: Path | None) -> None:
        """path was written into the directory (None: a file was removed from it)."""
        if path is not None:
            self._dirty.add(path)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()  # no event loop (tools, tests): sync at once
            return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_later(FLUSH_DELAY, self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        paths, self._dirty = self._dirty, set()
        self._syncer.submit(paths)

    def flush(self, timeout: float | None = None) -> bool:
        """Fsync every file written so far, and the directory. With a timeout (the daemon's
        stop), wait no longer than that: the kernel finishes the writeback anyway, and a stop
        must not hang on a busy disk. True when everything is on disk."""
        paths, self._dirty = self._dirty, set()
        if timeout is None:
            self._sync(paths)
            return True
        return self._syncer.submit(paths).wait(timeout)

    def _sync(self, paths: set[Path]) -> None:
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue  # replaced or deleted since; the newer write is synced itself
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
