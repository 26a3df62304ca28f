"""What each user's sessions used, per hour and preset: the books GetUsage and budgets read.

A session's record holds what its own conversations used, but a record goes with its
session: a user who removes a session must not get its tokens back, and an admin summing last
week wants the sessions removed since. So every increase a usage reading finds is also entered
here, by owner, hour and preset, and kept for a year. One small JSON file per owner under the
state directory (``usage/UID.json``), replaced whole at each entry; it also notes the day an
admin lifted the owner's budget. A file that cannot be read starts empty books, and says so.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from hostagent.budgets import hour_of
from hostagent.daemon.state.durable import replace_file
from hostagent.usage import Usage, total

log = logging.getLogger(__name__)

KEPT_USEC = 400 * 86_400 * 1_000_000  # hours older than this are dropped at the next entry


class Books:
    """One owner's: usage by hour (its first microsecond) and preset, and the lifted day."""

    def __init__(self, hours: dict[int, dict[str, Usage]], lifted: int) -> None:
        self.hours = hours
        self.lifted = lifted

    def to_json(self) -> bytes:
        hours = {
            str(h): {p: u.to_dict() for p, u in by_preset.items()}
            for h, by_preset in sorted(self.hours.items())
        }
        return json.dumps({"hours": hours, "lifted": self.lifted}).encode()

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
        return cls(hours, lifted if isinstance(lifted, int) else 0)


class Ledger:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._books: dict[int, Books] = {}

    def _path(self, uid: int) -> Path:
        return self.directory / f"{uid}.json"

    def books(self, uid: int) -> Books:
        books = self._books.get(uid)
        if books is None:
            books = Books({}, 0)
            try:
                books = Books.from_json(json.loads(self._path(uid).read_bytes()))
            except FileNotFoundError:
                pass
            except (OSError, ValueError) as e:
                log.warning("Usage books of uid %d unreadable, starting empty ones: %s", uid, e)
            self._books[uid] = books
        return books

    def owners(self) -> Iterator[int]:
        """Every owner with books, on disk or in memory."""
        seen = set(self._books)
        with contextlib.suppress(OSError):
            for path in self.directory.iterdir():
                if path.suffix == ".json" and path.stem.isdigit():
                    seen.add(int(path.stem))
        yield from sorted(seen)

    def _save(self, uid: int) -> None:
        """Best effort, as a screen is: books that cannot be written stay in memory."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            replace_file(self._path(uid), self.books(uid).to_json())
        except OSError as e:
            log.warning("Failed to write the usage books of uid %d: %s", uid, e)

    def enter(self, uid: int, preset: str, at_usec: int, used: Usage) -> None:
        books = self.books(uid)
        hour = hour_of(at_usec)
        by_preset = books.hours.setdefault(hour, {})
        by_preset[preset] = by_preset.get(preset, Usage()) + used
        for old in [h for h in books.hours if h < at_usec - KEPT_USEC]:
            del books.hours[old]
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
