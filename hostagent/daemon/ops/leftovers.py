"""What a daemon killed in the middle of a create left behind, collected at the next start.

A create makes things before its session's first record: the worktree and its branch (noted
on disk first, state/creates.py), the hooks file, the terminal's output FIFO and the tmux
socket in the owner's runtime directory. A create cut short by a crash has no record, so no
Remove will ever take them, and a create of the same name would trip on them. Recovery calls
this once every record is decided and every orphan scope dealt with, before any client is
served, so no create of today can be mistaken for one of yesterday.

- A noted worktree goes, whatever is in it (the create put it there: a checkout, the included
  files, the setup's output), and so does its branch, if the create made it and nothing was
  committed on it since. One whose scope runs (the crash came after systemd had it) is kept:
  the scope was adopted as an orphan and works in it.
- Runtime files that name no session go, always.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Collection
from pathlib import Path

from hostagent.daemon.host.ports import WorktreePort
from hostagent.daemon.host.worktree import Worktree
from hostagent.daemon.state.creates import PendingCreate, PendingCreates
from hostagent.daemon.state.paths import ROOT_HOOKS_DIR, runtime_dirs
from hostagent.daemon.state.registry import Registry
from hostagent.identity import Owner
from hostagent.session import unit_name

log = logging.getLogger(__name__)


def _socket_or_link(mode: int) -> bool:
    return stat.S_ISSOCK(mode) or stat.S_ISLNK(mode)


# A session's runtime files by their ends, with the file type each must have to be ours: its
# own directory and the owner's link to its socket, and the files an older hostagent kept
# side by side.
RUNTIME_FILES = (
    (".d", stat.S_ISDIR),
    (".sock", _socket_or_link),
    (".hooks.json", stat.S_ISREG),
    (".out", stat.S_ISFIFO),
)
# What a session's own directory holds (state/paths.py), by name, with the type of each.
SESSION_DIR_FILES = {
    "tmux.sock": stat.S_ISSOCK,
    "out": stat.S_ISFIFO,
    "hooks.json": stat.S_ISREG,
    "tmux.launch": stat.S_ISREG,
}


class Leftovers:
    def __init__(
        self, registry: Registry, pending: PendingCreates, worktrees: WorktreePort
    ) -> None:
        self.registry = registry
        self.pending = pending
        self.worktrees = worktrees

    async def collect_creates(self, live_units: Collection[str]) -> list[str]:
        """The worktrees of creates that never wrote their record, removed; the names whose
        leftovers went. live_units: the hostagent scopes that run."""
        collected: list[str] = []
        for pending in self.pending.load():
            if pending.name in self.registry.sessions:
                pass  # the record came first: it names the worktree
            elif unit_name(pending.name) in live_units:
                log.warning(
                    "session '%s': its create was cut short after its scope started; the "
                    "scope runs, so its worktree %s is kept",
                    pending.name,
                    pending.worktree,
                )
            elif await self._discard(pending):
                collected.append(pending.name)
            else:
                continue  # its owner is gone: the note stays for a later start
            self.pending.done(pending.name)
        return collected

    async def _discard(self, pending: PendingCreate) -> bool:
        try:
            owner = Owner.from_uid(pending.owner)
        except KeyError:
            log.warning(
                "session '%s': its create was cut short, and its owner %d no longer exists; "
                "its worktree %s is kept",
                pending.name,
                pending.owner,
                pending.worktree,
            )
            return False
        tree = Worktree(
            pending.worktree,
            pending.branch,
            pending.base_ref,
            pending.repo,
            pending.worktree,
            pending.new_branch,
        )
        await self.worktrees.discard(owner, tree)
        log.info(
            "session '%s': its create was cut short by the daemon's end; removed its worktree %s",
            pending.name,
            pending.worktree,
        )
        return True

    def sweep_runtime(self) -> int:
        """Remove every runtime file (a session's directory and what it holds, the link to
        its socket, a hooks file) that names no session; how many went."""
        removed = 0
        root_hooks = self.registry.runtime_root / ROOT_HOOKS_DIR
        owners = runtime_dirs(self.registry.runtime_root, self.registry.system)
        for directory in [*owners, root_hooks]:
            with contextlib.suppress(OSError):
                for entry in os.scandir(directory):
                    removed += self._sweep(directory, entry, root_hooks)
        if removed:
            log.info("Removed %d runtime files of sessions that were never recorded", removed)
        return removed

    def _sweep(self, directory: Path, entry: os.DirEntry[str], root_hooks: Path) -> int:
        ends = ((".json", stat.S_ISREG),) if directory == root_hooks else RUNTIME_FILES
        for end, is_kind in ends:
            name = entry.name.removesuffix(end)
            if name == entry.name or not name or name in self.registry.sessions:
                continue
            try:
                if not is_kind(entry.stat(follow_symlinks=False).st_mode):
                    return 0
                if end == ".d":
                    _empty(Path(entry.path))
                    os.rmdir(entry.path)
                else:
                    os.unlink(entry.path)
                return 1
            except OSError as e:
                log.warning("Failed to remove %s: %s", entry.path, e)
            return 0
        return 0


def _empty(directory: Path) -> None:
    """Remove what a session's own directory holds, each file checked for its type; anything
    else there stays, and so does the directory."""
    for entry in os.scandir(directory):
        is_kind = SESSION_DIR_FILES.get(entry.name)
        if is_kind is not None and is_kind(entry.stat(follow_symlinks=False).st_mode):
            os.unlink(entry.path)
