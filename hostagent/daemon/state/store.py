"""The sidecar store: one YAML record per session, written atomically, read defensively.

A write goes to a temp file in the same directory and is renamed over the old record: a crash
of the daemon leaves the old record or the new one, never half of either. The fsyncs that make
this survive a power cut run on a worker thread shortly after (FLUSH_DELAY), batched, so that
disk latency never stalls the event loop; at shutdown ``flush`` waits for them, a few
seconds at most.
A record proves itself: it names its format version, carries every field it needs, and (from
version 2 on) ends with a checksum of its content. One that does not parse, lacks a field, fails
its checksum, names another session, or comes from a future schema is moved to ``corrupt/`` and
logged; it never stops the other sessions from loading, and recovery adopts its live scope from
what systemd and tmux say.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from hostagent.session import (
    SCHEMA_VERSION,
    DormantReason,
    Limits,
    SessionRecord,
    State,
    name_problem,
)
from hostagent.yamlfile import LOADER

log = logging.getLogger(__name__)

# libyaml's safe dumper where PyYAML has it (Debian's and PyPI's do): ten times faster, which
# a start with a thousand records feels.
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

SUFFIX = ".yaml"
FLUSH_DELAY = 0.2  # seconds between a write and its fsync


CHECKSUM = "checksum"  # the last key of a version 2 record: sha256 of everything before it
# Fields every record has had since version 1; a record without one of them was cut short.
REQUIRED = ("name", "uuid", "owner", "preset", "cwd", "state", "unit", "boot_id", "created_at")


class RecordError(Exception):
    """A sidecar that cannot be trusted."""


def checksum(data: dict[str, Any]) -> str:
    """The checksum of a record's fields, independent of how YAML laid them out."""
    fields = {k: v for k, v in data.items() if k != CHECKSUM}
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def record_to_dict(record: SessionRecord) -> dict[str, Any]:
    """The record as it is written, its checksum last."""
    data = dataclasses.asdict(record)
    data["state"] = record.state.value
    data["dormant_reason"] = record.dormant_reason.value
    data[CHECKSUM] = checksum(data)
    return data


def record_from_dict(data: Any, expected_name: str | None = None) -> SessionRecord:
    if not isinstance(data, dict):
        raise RecordError("not a mapping")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordError(f"bad schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise RecordError(f"schema_version {version} is newer than {SCHEMA_VERSION}")
    if version >= 2 and data.get(CHECKSUM) != checksum(data):
        raise RecordError("its checksum is missing or wrong (cut short, or changed by hand)")
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise RecordError(f"field {missing[0]!r} is missing (cut short?)")
    fields = {f.name: f for f in dataclasses.fields(SessionRecord)}
    defaults = SessionRecord()
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            continue  # written by a newer minor version; harmless to drop
        values[key] = _coerce(key, value, getattr(defaults, key))
    record = SessionRecord(**values)
    problem = name_problem(record.name)
    if problem:
        raise RecordError(f"name {record.name!r} {problem}")
    if expected_name is not None and record.name != expected_name:
        raise RecordError(f"holds session {record.name!r}, not {expected_name!r}")
    return record


def _coerce(key: str, value: Any, default: Any) -> Any:
    try:
        if isinstance(default, State):
            return State(value)
        if isinstance(default, DormantReason):
            return DormantReason(value or "")
        if isinstance(default, Limits):
            if not isinstance(value, dict):
                raise TypeError
            return Limits(**{k: int(v) for k, v in value.items() if hasattr(default, k)})
        # bool is an int to Python, not to a record: neither stands for the other.
        if isinstance(value, bool) != isinstance(default, bool):
            raise TypeError
        if not isinstance(value, type(default)):
            raise TypeError
        if isinstance(default, list) and not all(isinstance(x, str) for x in value):
            raise TypeError
        if isinstance(default, dict) and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise TypeError
    except (TypeError, ValueError):
        raise RecordError(f"field {key!r} has a bad value {value!r}") from None
    return value


class SidecarStore:
    """Records under ``directory``; only the daemon reads or writes them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.sessions_dir = directory / "sessions"
        self.corrupt_dir = directory / "corrupt"
        self.screens_dir = directory / "screens"
        self._dirty: set[Path] = set()
        self._flush_scheduled = False
        self._syncer = _Syncer(self._sync)
        self.quarantined: list[str] = []  # names whose records the last load_all moved aside
        self.last_error = 0  # the errno of the last save that failed

    def prepare(self) -> None:
        for d in (self.directory, self.sessions_dir, self.corrupt_dir, self.screens_dir):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(d, 0o700)

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
        text = yaml.dump(record_to_dict(record), Dumper=_Dumper, sort_keys=False)
        final = self.path_of(record.name)
        tmp = final.with_name(f".{final.name}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with open(fd, "wb") as f:  # a loop over short writes
                f.write(text.encode())
            os.rename(tmp, final)
        except OSError as e:
            self.last_error = e.errno or 0
            # A full disk or a plant: the old record stays whole, and no temp file is left.
            with contextlib.suppress(OSError):
                if not os.path.isdir(tmp):
                    os.unlink(tmp)
            raise
        self._written(final)

    def delete(self, name: str) -> None:
        try:
            os.unlink(self.path_of(name))
        except FileNotFoundError:
            return
        self._written(None)

    # ---- a session's last screen, kept from its end until it is resumed or removed ----------

    def save_screen(self, name: str, text: str) -> None:
        """Best effort: a screen that cannot be written is only a screen lost."""
        path = self.screens_dir / f"{name}.txt"
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with open(fd, "wb") as f:
                f.write(text.encode(errors="replace"))
            os.rename(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def load_screen(self, name: str) -> str | None:
        try:
            return (self.screens_dir / f"{name}.txt").read_text(errors="replace")
        except OSError:
            return None

    def delete_screen(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.screens_dir / f"{name}.txt")

    # ---- durability ---------------------------------------------------------------------

    def _written(self, path: Path | None) -> None:
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
        """Fsync every record written so far, and the directory. With a timeout (the daemon's
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

    def load_all(self) -> list[SessionRecord]:
        """Every trustworthy record; the others are quarantined and logged."""
        records = []
        self.quarantined = []
        for path in sorted(self.sessions_dir.iterdir()):
            if path.name.startswith("."):
                if path.name.endswith(".tmp"):
                    try:
                        path.unlink(missing_ok=True)  # an interrupted write; the record is intact
                    except OSError as e:
                        log.error("Failed to remove %s, left by an interrupted write: %s", path, e)
                continue
            if not path.name.endswith(SUFFIX):
                continue
            try:
                records.append(self._load(path))
            except (OSError, RecordError, yaml.YAMLError, UnicodeDecodeError) as e:
                self.quarantine(path, str(e).splitlines()[0] if str(e) else type(e).__name__)
                self.quarantined.append(path.name[: -len(SUFFIX)])
        return records

    def _load(self, path: Path) -> SessionRecord:
        # O_NONBLOCK: a FIFO planted here must not hang the daemon's start.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RecordError("not a regular file")
        with os.fdopen(fd, encoding="utf-8") as f:
            data = yaml.load(f, Loader=LOADER)  # a safe loader, C or Python
        return record_from_dict(data, expected_name=path.name[: -len(SUFFIX)])

    def quarantine(self, path: Path, reason: str) -> None:
        target = self.corrupt_dir / f"{path.name}.{int(time.time())}"
        try:
            os.rename(path, target)
        except OSError as e:
            log.error("Failed to quarantine record %s: %s", path, e)
            return
        log.error("Record %s is unusable (%s); moved to %s", path, reason, target)

    def _sync_dir(self) -> None:
        fd = os.open(self.sessions_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _Syncer:
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
