"""The sidecar store: one YAML record per session, written atomically, read defensively.

A write goes to a temp file in the same directory and is renamed over the old record: a crash
of the daemon leaves the old record or the new one, never half of either. The fsyncs that make
this survive a power cut run on a worker thread shortly after (durable.py), batched, so that
disk latency never stalls the event loop; at shutdown ``flush`` waits for them, a few
seconds at most.
A record proves itself (recordfile.py); one that does not is moved to ``corrupt/`` and logged,
and never stops the other sessions from loading.

Each record has a second copy under the daemon's runtime directory (/run/hostagent/records on
the system daemon): on tmpfs, out of reach of anything that removes /var/lib/hostagent (an
admin's mistake, a purge with sessions live), and gone at reboot with the sessions it
describes. Every write numbers the record (``revision``); a load takes the copy where the
record is missing, damaged or older, so a live session keeps its preset, conversation id, hook
token, limits and worktree. A record lost with its copy too is adopted from what systemd and
tmux say (recover.py). A save that finds the state directory gone or replaced makes it again and
writes every record the daemon holds.

What the daemon holds is never lost while it runs: ``check`` (every 30 s, and at a stop of the
daemon) writes again, from memory, a record or a copy that was removed or changed under it,
and makes the copies' directory again when it is gone.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import yaml

from hostagent.daemon.state.durable import BatchedSync, file_shape, replace_file
from hostagent.daemon.state.recordfile import SUFFIX, RecordError, dump, parse, read
from hostagent.session import SessionRecord

log = logging.getLogger(__name__)


class SidecarStore:
    """Records under ``directory``, and their copies under ``copies`` when given; only the
    daemon reads or writes them."""

    def __init__(self, directory: Path, copies: Path | None = None) -> None:
        self.directory = directory
        self.sessions_dir = directory / "sessions"
        self.corrupt_dir = directory / "corrupt"
        self.screens_dir = directory / "screens"
        self.copies_dir = copies
        self._syncs = BatchedSync(self.sessions_dir)
        self.quarantined: list[str] = []  # names whose records the last load lost for good
        self.restored: list[str] = []  # names the last load took from their copies
        self.last_error = 0  # the errno of the last save that failed
        # Every record the daemon holds (the registry says), to write again into a state
        # directory that was removed or replaced under the running daemon.
        self.holdings: Callable[[], Iterable[SessionRecord]] = tuple
        self._revisions: dict[str, int] = {}
        # The sessions directory, held open: a removed one shows no links, and its inode
        # cannot be reused by a new directory while held.
        self._dir_fd = -1
        self._prepared = False  # prepare() ran: from then on a lost directory is made again
        self._copy_failing = False  # said once, until a copy is written again
        # What each record and copy looked like on disk when last written or read (inode,
        # size, mtime): one that looks otherwise was removed or changed under the daemon.
        self._shapes: dict[Path, tuple[int, int, int]] = {}

    def prepare(self) -> None:
        for d in (self.directory, self.sessions_dir, self.corrupt_dir, self.screens_dir):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(d, 0o700)
        self._prepared = True
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1
        self._dir_fd = os.open(self.sessions_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if self.copies_dir is not None:
            try:
                self.copies_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.chmod(self.copies_dir, 0o700)
            except OSError as e:
                self._copy_failed(e)

    def remedy(self, error: int | None = None) -> str:
        """What an admin does about records that cannot be written, by the error's errno
        (the last failed save's when not given)."""
        error = self.last_error if error is None else error
        where = self.directory
        if error == errno.EROFS:
            return f"{where} is on a read-only file system; remount it read-write"
        if error in (errno.EACCES, errno.EPERM):
            return f"hostagent may not write in {where}; make it root's again (mode 0700)"
        if error in (errno.ENOENT, errno.ENOTDIR):
            return f"{where} is gone; restart hostagent to make it again"
        return f"free space in {where}"

    def path_of(self, name: str) -> Path:
        return self.sessions_dir / f"{name}{SUFFIX}"

    def save(self, record: SessionRecord) -> None:
        """Write the record, then its copy; OSError when the record cannot be written (the
        old one stays whole, and its copy with it)."""
        name = record.name
        self._check_directory(name)
        revision = self._revisions.get(name, 0) + 1
        text = self._write(record, revision)
        self._revisions[name] = revision
        self._write_copy(name, text)

    def _write(self, record: SessionRecord, revision: int) -> str:
        text = dump(record, revision)
        final = self.path_of(record.name)
        try:
            replace_file(final, text.encode())
        except OSError as e:
            self.last_error = e.errno or 0
            raise
        self._syncs.written(final)
        self._shapes[final] = file_shape(final)
        return text

    def check(self) -> None:
        """What the daemon holds, on disk again: the state directory with every record (made
        again if it was removed or replaced; every save asks first too), and each record or
        copy removed or changed under the daemon, written again from memory (the server asks
        every 30 s and at its stop)."""
        self._check_directory("")
        for held in list(self.holdings()):
            path = self.path_of(held.name)
            if file_shape(path) == self._shapes.get(path):
                copy = self._copy_path(held.name)
                if copy is not None and file_shape(copy) != self._shapes.get(copy):
                    log.warning(
                        "session '%s': its record's copy was removed or changed; written again",
                        held.name,
                    )
                    self._write_copy(held.name, dump(held, self._revisions.get(held.name, 0)))
                continue
            log.warning(
                "session '%s': its record was removed or changed under hostagent; "
                "written again from what the daemon holds",
                held.name,
            )
            try:
                self.save(held)
            except OSError:  # a full disk, a plant: the copy at least (the registry retries)
                self._write_copy(held.name, dump(held, self._revisions.get(held.name, 0) + 1))

    def _check_directory(self, saving: str) -> None:
        """The state directory the daemon prepared is still there; if it was removed or
        replaced, make it again and write every record held (but the one being saved) into
        it, so that nothing the daemon knows is lost at its next start."""
        if not self._prepared:
            return
        try:
            kept, now = os.fstat(self._dir_fd), os.stat(self.sessions_dir)
            if kept.st_nlink and (kept.st_dev, kept.st_ino) == (now.st_dev, now.st_ino):
                return
        except OSError:
            pass
        log.error(
            "The state directory %s was removed or replaced while hostagent ran; "
            "making it again and writing every session's record into it",
            self.directory,
        )
        try:
            self.prepare()
        except OSError as e:
            log.error("Failed to make %s again: %s", self.directory, e)
            return  # the save says why, with its remedy
        for held in self.holdings():
            if held.name == saving:
                continue
            revision = self._revisions.get(held.name, 0) + 1
            try:
                text = self._write(held, revision)
            except OSError as e:
                log.error("session '%s': Failed to write its record: %s", held.name, e)
                continue
            self._revisions[held.name] = revision
            self._write_copy(held.name, text)

    def _copy_path(self, name: str) -> Path | None:
        return None if self.copies_dir is None else self.copies_dir / f"{name}{SUFFIX}"

    def _write_copy(self, name: str, text: str) -> None:
        """The record's second copy, on tmpfs: best effort (the record itself is written), a
        failure said once until a copy succeeds again. A copies' directory removed under the
        daemon is made again."""
        path = self._copy_path(name)
        if path is None:
            return
        try:
            if not path.parent.is_dir():
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                log.warning("The copies' directory %s was gone; made it again", path.parent)
            replace_file(path, text.encode())
        except OSError as e:
            self._copy_failed(e)
            return
        self._shapes[path] = file_shape(path)
        self._copy_failing = False

    def _copy_failed(self, e: OSError) -> None:
        if not self._copy_failing:
            log.warning(
                "Failed to keep a copy of session records in %s (%s); a record lost from "
                "%s can then not be restored",
                self.copies_dir,
                e.strerror,
                self.sessions_dir,
            )
        self._copy_failing = True

    def delete(self, name: str) -> None:
        # The copy first: a crash between the two leaves the record, never a copy that would
        # bring a removed session back.
        if self.copies_dir is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.copies_dir / f"{name}{SUFFIX}")
        self._revisions.pop(name, None)
        self._shapes.pop(self.path_of(name), None)
        self._shapes.pop(self._copy_path(name) or self.path_of(name), None)
        try:
            os.unlink(self.path_of(name))
        except FileNotFoundError:
            return
        self._syncs.written(None)

    def flush(self, timeout: float | None = None) -> bool:
        """Fsync every record written so far, and the directory; with a timeout (the daemon's
        stop), no longer than that (durable.BatchedSync.flush). True when all is on disk."""
        return self._syncs.flush(timeout)

    # ---- a session's last screen, kept from its end until it is resumed or removed ----------

    def save_screen(self, name: str, text: str) -> None:
        """Best effort: a screen that cannot be written is only a screen lost."""
        with contextlib.suppress(OSError):
            replace_file(self.screens_dir / f"{name}.txt", text.encode(errors="replace"))

    def load_screen(self, name: str) -> str | None:
        try:
            return (self.screens_dir / f"{name}.txt").read_text(errors="replace")
        except OSError:
            return None

    def delete_screen(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.screens_dir / f"{name}.txt")

    def load_all(self) -> list[SessionRecord]:
        """Every trustworthy record, each the newer of the record and its copy; a damaged
        record is quarantined and logged, and taken from its copy when that is whole."""
        found: dict[str, tuple[SessionRecord, int]] = {}
        texts: dict[str, str] = {}
        damaged: set[str] = set()
        for name, path in _record_files(sorted(self.sessions_dir.iterdir())):
            try:
                text = read(path)
                found[name] = parse(text, name)
                texts[name] = text
            except LOAD_ERRORS as e:
                self.quarantine(path, str(e).splitlines()[0] if str(e) else type(e).__name__)
                damaged.add(name)
        self.restored = []
        for name, (copy, revision) in sorted(self._load_copies(texts).items()):
            have = found.get(name)
            if have is not None and have[1] >= revision:
                if have[1] > revision:  # a stale copy: the record's text is the newer
                    self._write_copy(name, texts[name])
                continue
            why = "damaged" if name in damaged else "missing" if have is None else "older"
            log.warning(
                "session '%s': its record was %s; restored from its copy in %s",
                name,
                why,
                self.copies_dir,
            )
            found[name] = (copy, revision)
            self.restored.append(name)
            try:
                self._write(copy, revision)
            except OSError as e:  # the next change writes it, or says why it cannot
                log.error("session '%s': Failed to write its record: %s", name, e)
        self.quarantined = sorted(damaged - set(self.restored))
        self._revisions = {name: revision for name, (_, revision) in found.items()}
        for name in found:  # as read: what check() holds them to
            kept: list[Path | None] = [self.path_of(name), self._copy_path(name)]
            for file in kept:
                if file is not None:
                    self._shapes[file] = file_shape(file)
        # Records that have no copy yet (written by an older hostagent, or before a reboot
        # emptied /run) get one now: the record's own text, as read.
        for name, (record, revision) in found.items():
            if self.copies_dir is not None and not (self.copies_dir / f"{name}{SUFFIX}").exists():
                self._write_copy(name, texts.get(name) or dump(record, revision))
        return [record for record, _ in found.values()]

    def _load_copies(self, records: dict[str, str]) -> dict[str, tuple[SessionRecord, int]]:
        """The whole copies that differ from their record's text (records: the whole
        records' texts); a damaged one is dropped (its record, if whole, makes it again).
        A copy the same to the byte as its record says nothing new, and is not parsed: that
        halves a restart's reading at 1000 records."""
        copies: dict[str, tuple[SessionRecord, int]] = {}
        if self.copies_dir is None:
            return copies
        try:
            paths = sorted(self.copies_dir.iterdir())
        except OSError:
            return copies
        for name, path in _record_files(paths):
            try:
                text = read(path)
                if records.get(name) != text:
                    copies[name] = parse(text, name)
            except LOAD_ERRORS as e:
                log.warning("Copy %s is unusable (%s); dropped", path, e)
                with contextlib.suppress(OSError):
                    path.unlink()
        return copies

    def set_aside(self) -> list[str]:
        """The damaged records in corrupt/, oldest first: kept for an admin to restore."""
        try:
            found = [(p.lstat().st_mtime, p.name) for p in self.corrupt_dir.iterdir()]
        except OSError:
            return []
        return [name for _, name in sorted(found)]

    def quarantine(self, path: Path, reason: str) -> None:
        target = self.corrupt_dir / f"{path.name}.{int(time.time())}"
        try:
            os.rename(path, target)
        except OSError as e:
            log.error("Failed to quarantine record %s: %s", path, e)
            return
        log.error("Record %s is unusable (%s); moved to %s", path, reason, target)


LOAD_ERRORS = (OSError, RecordError, yaml.YAMLError, UnicodeDecodeError)


def _record_files(paths: list[Path]) -> Iterator[tuple[str, Path]]:
    """(session name, path) of each record among paths; a temp file an interrupted write left
    is removed (the record it was to replace is whole)."""
    for path in paths:
        if path.name.startswith("."):
            if path.name.endswith(".tmp"):
                try:
                    path.unlink(missing_ok=True)
                except OSError as e:
                    log.error("Failed to remove %s, left by an interrupted write: %s", path, e)
            continue
        if path.name.endswith(SUFFIX):
            yield path.name[: -len(SUFFIX)], path
