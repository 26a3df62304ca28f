"""The owner's runtime directory, where each session's directory (its socket, FIFO and hooks
file) and the owner's hooks FIFO live.

The directory is the owner's own (0700), so the owner can put anything in it: a symlink, a
directory where the daemon's FIFO belongs. The daemon never follows what is there and never
fails over it: whatever stands where a file of the daemon's goes is moved aside first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from pathlib import Path

from hostagent.daemon.state.paths import LINK_TARGET, SessionPaths, owner_link
from hostagent.errors import SpawnFailed
from hostagent.identity import Owner

log = logging.getLogger(__name__)


def prepare_runtime_dir(path: Path, owner: Owner) -> None:
    """A 0700 directory owned by owner, for its tmux sockets; refuse anything else there."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        raise SpawnFailed(f"Runtime directory {path} is not a directory; remove it.")
    if st.st_uid != owner.uid and os.geteuid() == 0:
        os.chown(path, owner.uid, owner.gid, follow_symlinks=False)
    os.chmod(path, 0o700, follow_symlinks=False)


def prepare_session_dir(paths: SessionPaths, name: str, owner: Owner) -> None:
    """The session's own directory, 0700 and the owner's as hers is, and the owner's link to
    its socket beside it (paths.owner_link); both made again where something else stands."""
    prepare_runtime_dir(paths.runtime_dir, owner)
    directory = paths.directory
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            make_room(directory)
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(directory, owner.uid, owner.gid, follow_symlinks=False)
    os.chmod(directory, 0o700, follow_symlinks=False)
    link, target = owner_link(paths.runtime_dir, name), LINK_TARGET.format(name=name)
    with contextlib.suppress(OSError):
        if os.readlink(link) == target:
            return
    make_room(link)
    tmp = link.with_name(f".{link.name}.{secrets.token_hex(6)}")
    os.symlink(target, tmp)
    os.replace(tmp, link)


def remove_session_dir(paths: SessionPaths, name: str) -> None:
    """What prepare_session_dir made, once its files are gone (a removed session's)."""
    link = owner_link(paths.runtime_dir, name)
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.lstat(link).st_mode):
            os.unlink(link)
    if not paths.legacy:
        with contextlib.suppress(OSError):
            os.rmdir(paths.directory)


def make_room(path: Path, keep_fifo: bool = False) -> None:
    """Clear path for a file of the daemon's: a file or link is removed, a directory (which
    may hold the owner's things) is renamed aside, and a FIFO is kept when keep_fifo."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if keep_fifo and stat.S_ISFIFO(mode):
        return
    if not stat.S_ISDIR(mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    aside = path.with_name(f"{path.name}.moved-{secrets.token_hex(4)}")
    log.warning("%s is a directory where hostagent's file goes; moved it to %s", path, aside)
    os.rename(path, aside)


def write_file(path: Path, text: str) -> None:
    """Write path (0644, the daemon's) inside a directory its owner controls, following
    nothing there: O_EXCL on a fresh random name never follows a planted symlink, and the
    rename replaces whatever the directory entry was."""
    make_room(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
