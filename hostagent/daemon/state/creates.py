"""Creates under way, noted on disk before they make anything a record would not name.

A create writes its session's first record while systemd starts the scope; what it makes
before that (a git worktree and its branch, which a setup command can take minutes to fill)
would be unknown to a daemon killed meanwhile, and a create of the same name would then fail
on the branch left behind. So such a create first notes here what it is about to make, fsynced,
and drops the note once the record names it (or once it has undone it). The next start collects
what every note left behind (ops/leftovers.py). One small JSON file per create, under the state
directory's ``creating/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from hostagent.daemon.state.durable import replace_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingCreate:
    """A create that is about to make a worktree for session name of owner."""

    name: str
    owner: int
    worktree: str  # its path
    repo: str  # the main worktree's top, which git runs in
    branch: str
    base_ref: str  # the commit the branch starts from: a branch still there is unused
    new_branch: bool  # the create makes the branch (else it reuses one, which stays)


class PendingCreates:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    async def note(self, pending: PendingCreate) -> None:
        """Noted and on disk (OSError: not noted, and the create must not go on)."""
        data = json.dumps(dataclasses.asdict(pending)).encode()
        await asyncio.to_thread(self._write, self._path(pending.name), data)

    def _write(self, path: Path, data: bytes) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        replace_file(path, data)
        for target, flags in ((path, os.O_RDONLY), (self.directory, os.O_DIRECTORY)):
            fd = os.open(target, flags | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def done(self, name: str) -> None:
        """The create's record names what it made, or it undid it: nothing left to collect."""
        with contextlib.suppress(FileNotFoundError):
            try:
                os.unlink(self._path(name))
            except OSError as e:  # collected again at the next start, which finds the record
                log.warning("Failed to remove the note of the create of '%s': %s", name, e)

    def load(self) -> list[PendingCreate]:
        """Every note a killed create left; one that cannot be read is dropped and logged
        (its write was cut short: nothing was made after it)."""
        found: list[PendingCreate] = []
        try:
            paths = sorted(self.directory.iterdir())
        except FileNotFoundError:
            return []
        except OSError as e:
            log.error(
                "Failed to list %s, what killed creates left is not collected: %s",
                self.directory,
                e,
            )
            return []
        for path in paths:
            if path.suffix != ".json" or path.name.startswith("."):
                if path.name.endswith(".tmp"):
                    with contextlib.suppress(OSError):
                        path.unlink()
                continue
            try:
                found.append(PendingCreate(**json.loads(path.read_bytes())))
            except (OSError, ValueError, TypeError) as e:
                log.warning("Note %s of a killed create is unreadable (%s); dropped", path, e)
                with contextlib.suppress(OSError):
                    path.unlink()
        return found
