"""What each user's sessions used, per hour and preset: the books GetUsage and budgets read.

A session's record holds what its own conversations used, but a record goes with its
session: a user who removes a session must not get its tokens back, and an admin summing last
week wants the sessions removed since. So every increase a usage reading finds is also entered
here, by owner, hour and preset, and kept for a year. One small JSON file per owner under the
state directory (``usage/UID.json``), replaced whole at each entry and fsynced as the records
are; it also notes the day an admin lifted the owner's budget.

An entry is idempotent: the books keep, per session and conversation, the figures they have
entered (``counted``), and enter only what a reading adds to those, in the same write. So the
books and the records agree after any crash, in whichever order their two writes reached the
disk: a reading that reached the books but not the record adds nothing when it is read again,
and one that reached the record but not the books is entered when the books are loaded, from
the records the daemon holds.

Each write moves the books it replaces to ``UID.json.prev``, so books that cannot be read (a
power cut after the rename and before the data) are set aside in the state directory's
``corrupt/`` and the previous ones loaded, which the records then bring up to date. With
neither readable, the books are rebuilt from the records alone: each session's figures and
what it used today, so the day's budget still holds for the sessions there are; what removed
sessions used is lost with them, and the journal says so.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from hostagent.budgets import day_of, hour_of
from hostagent.daemon.state.durable import Syncer, replace_file
from hostagent.session import SessionRecord, now_usec
from hostagent.usage import Usage, since, total

log = logging.getLogger(__name__)

KEPT_USEC = 400 * 86_400 * 1_000_000  # hours older than this are dropped at the next entry

# A session's figures as its record keeps them: conversation id -> Usage.to_dict().
Figures = Mapping[str, dict[str, Any]]


def figures_total(figures: Figures) -> Usage:
    return total(Usage.from_dict(u) for u in figures.values())


class Books:
    """One owner's: usage by hour (its first microsecond) and preset, the lifted day, and
    what has been entered of each session (its uuid) by conversation."""

    def __init__(
        self,
        hours: dict[int, dict[str, Usage]],
        lifted: int,
        counted: dict[str, dict[str, dict[str, Any]]] | None = None,
    ) -> None:
        self.hours = hours
        self.lifted = lifted
        # None in books written before they kept marks: taken from the records at load.
        self.counted = counted

    def to_json(self) -> bytes:
        hours = {
            str(h): {p: u.to_dict() for p, u in by_preset.items()}
            for h, by_preset in sorted(self.hours.items())
        }
        return json.dumps({"hours": hours, "lifted": self.lifted, "counted": self.counted}).encode()

    @classmethod
    def from_json(cls, data: object) -> Books:
        if not isinstance(data, dict) or not isinstance(data.get("hours"), dict):
            raise ValueError("not usage books")
        hours: dict[int, dict[str, Usage]] = {}
        for hour, by_preset in data["hours"].items():
            if isinstance(by_preset, dict):
                hours[int(hour)] = {
                    str(p): Usage.from_dict(u) for p, u in by_preset.items() if isinstance(u, dict)
                }
        lifted = data.get("lifted", 0)
        counted = data.get("counted")  # books older than the marks have none
        if counted is not None and not isinstance(counted, dict):
            raise ValueError("not usage books")
        return cls(hours, lifted if isinstance(lifted, int) else 0, counted)

    def add(self, hour: int, preset: str, used: Usage) -> None:
        by_preset = self.hours.setdefault(hour, {})
        by_preset[preset] = by_preset.get(preset, Usage()) + used


class Ledger:
    def __init__(
        self, directory: Path, corrupt: Path, records: Callable[[], Iterable[SessionRecord]]
    ) -> None:
        """corrupt: where unreadable books are set aside; records: every record the daemon
        holds (the registry's), what torn books are rebuilt from."""
        self.directory = directory
        self.corrupt = corrupt
        self._books: dict[int, Books] = {}
        self._syncer = Syncer(self._sync)
        self.records = records

    def _path(self, uid: int) -> Path:
        return self.directory / f"{uid}.json"

    def books(self, uid: int) -> Books:
        books = self._books.get(uid)
        if books is None:
            books = self._books[uid] = self._load(uid)
            self._agree(uid, books)
        return books

    def _load(self, uid: int) -> Books:
        """The books on disk: the last ones written, else the ones before (the records bring
        them up to date), else rebuilt from the records alone."""
        path = self._path(uid)
        for candidate in (path, self._previous(uid)):
            try:
                return Books.from_json(json.loads(candidate.read_bytes()))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as e:
                self._set_aside(candidate, e)
        if not self._seen_on_disk(uid):
            return Books({}, 0, {})
        return self._rebuilt(uid)

    def _previous(self, uid: int) -> Path:
        return self.directory / f"{uid}.json.prev"

    def _seen_on_disk(self, uid: int) -> bool:
        """Whether uid had books (set aside now): none at all is a new owner, not a loss."""
        with contextlib.suppress(OSError):
            return any(p.name.startswith(f"usage-{uid}.json") for p in self.corrupt.iterdir())
        return False

    def _set_aside(self, path: Path, error: Exception) -> None:
        kept = self.corrupt / f"usage-{path.name}.{int(time.time())}"
        try:
            self.corrupt.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.rename(path, kept)
        except OSError as e:
            log.error(
                "Usage books %s are unreadable (%s); failed to set them aside: %s", path, error, e
            )
            return
        log.error("Usage books %s are unreadable (%s); kept as %s", path, error, kept)

    def _rebuilt(self, uid: int) -> Books:
        """Books for uid from the records alone: each session's figures, and today's use."""
        books = Books({}, 0, {})
        today = day_of(now_usec())
        for held in self.records():
            if held.owner != uid:
                continue
            assert books.counted is not None
            books.counted[held.uuid] = dict(held.usage)
            if held.usage_day == today:
                books.add(hour_of(today), held.preset, Usage.from_dict(held.usage_today))
        log.error(
            "Usage books of uid %d rebuilt from the sessions' records: today's use of the "
            "sessions there are holds; what removed sessions used, and a budget lifted "
            "today, are lost",
            uid,
        )
        self._save(uid, books)
        return books

    def _agree(self, uid: int, books: Books) -> None:
        """Books just loaded, brought up to what the records the daemon holds say: what a
        crash kept from them is entered now (books without marks take theirs from there)."""
        unmarked = books.counted is None
        counted = books.counted = books.counted if books.counted is not None else {}
        changed = False
        now = now_usec()
        for held in self.records():
            if held.owner != uid:
                continue
            if unmarked:
                counted[held.uuid] = dict(held.usage)
                changed = True
            else:
                changed |= self._count(books, held.uuid, held.preset, now, held.usage)
        if changed:
            self._save(uid, books)

    def owners(self) -> Iterator[int]:
        """Every owner with books, on disk or in memory."""
        seen = set(self._books)
        with contextlib.suppress(OSError):
            for path in self.directory.iterdir():
                if path.suffix == ".json" and path.stem.isdigit():
                    seen.add(int(path.stem))
        yield from sorted(seen)

    def _save(self, uid: int, books: Books | None = None) -> None:
        """Best effort, as a screen is: books that cannot be written stay in memory, and what
        they did not write is entered again at the next reading (their marks say so)."""
        path = self._path(uid)
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, self._previous(uid))  # synced already: whole after a power cut
            replace_file(path, (books or self.books(uid)).to_json())
        except OSError as e:
            log.warning("Failed to write the usage books of uid %d: %s", uid, e)
            return
        self._syncer.submit({path})

    def _sync(self, paths: set[Path]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def enter(self, uid: int, session: str, preset: str, at_usec: int, found: Figures) -> None:
        """Enter what a reading of session (its uuid) found, per conversation, beyond what the
        books have entered of it."""
        books = self.books(uid)
        if self._count(books, session, preset, at_usec, found):
            self._save(uid)

    def _count(self, books: Books, session: str, preset: str, at_usec: int, found: Figures) -> bool:
        """found entered into books beyond their marks of session; whether anything changed."""
        assert books.counted is not None
        marks = books.counted.get(session, {})
        merged = {**marks, **found}
        if merged == marks and session in books.counted:
            return False
        added = since(figures_total(marks), figures_total(merged))
        books.counted[session] = dict(merged)
        if added.tokens or added.calls:
            books.add(hour_of(at_usec), preset, added)
        for old in [h for h in books.hours if h < at_usec - KEPT_USEC]:
            del books.hours[old]
        return True

    def forget(self, uid: int, session: str) -> None:
        """A removed session reads no more: its marks go (what it used stays in the hours)."""
        books = self.books(uid)
        if books.counted is not None and books.counted.pop(session, None) is not None:
            self._save(uid)

    def used(self, uid: int, since_usec: int, until_usec: int) -> dict[str, Usage]:
        """By preset, what uid's sessions used in the hours that start in [since, until)."""
        found: dict[str, list[Usage]] = {}
        for hour, by_preset in self.books(uid).hours.items():
            if since_usec <= hour < until_usec:
                for preset, used in by_preset.items():
                    found.setdefault(preset, []).append(used)
        return {preset: total(used) for preset, used in found.items()}

    def lift(self, uid: int, day_usec: int) -> None:
        self.books(uid).lifted = day_usec
        self._save(uid)

    def lifted(self, uid: int, day_usec: int) -> bool:
        return self.books(uid).lifted == day_usec
