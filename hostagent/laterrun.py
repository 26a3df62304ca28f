"""What runs later outside a session is not the session's to write, by default.

A confined session may write its project, and its CLI's state; some files there name commands
that something outside every sandbox runs later: git runs a repository's hooks and the
commands its config names (core.fsmonitor, filters, diff drivers) for whoever runs git there
next, the owner included; another session's worktree is that session's code; an agent CLI runs
the hooks and servers its settings file names the next time its owner starts it. So in a
confined session these are made read-only, unless a ReadWritePaths= word names one exactly:

- the repository's git directory's ``hooks`` and ``config`` (its ``info/`` is left writable:
  attributes there choose among the drivers a config defines, as the work tree's own
  ``.gitattributes`` does, and define none);
- ``hostagent-worktrees/`` in it, where the other sessions' worktrees are (the session's own
  stays writable when it was);
- the files its preset's ``trusted:`` names (the CLI's settings files).

Nothing is guarded where the words leave the home writable: the session writes ~/.bashrc
there, and whatever else runs later. Each path is made read-only only where the words left it
writable, by the sandbox's own mechanism: a read-only bind of the path, under the writable
one. A mount point cannot be renamed or unlinked, so every directory from the writable mount
down to the path is made a mount point of its own too (writable as it was): the session cannot
move the git directory aside and put one of its own in its place (a symbolic link is not made
one: a link can be replaced). A path missing when the session starts has nothing to be mounted
on, and is not kept from the session (docs/presets.md).

Pure: the paths are only looked at by ``daemon/host/namespace.py``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable

from hostagent.sandbox import Context, Sandbox, expand
from hostagent.sandboxmounts import Mode, Mount, _ordered, _under

WORKTREES = "hostagent-worktrees"  # where hostagent puts sessions' worktrees, in the git dir


def later_run(ctx: Context, trusted: Iterable[str] = ()) -> list[str]:
    """The paths whose contents run later outside the session at ctx: its repository's hooks,
    config and other sessions' worktrees (when it is in one), and its CLI's trusted files."""
    paths = []
    if ctx.gitdir:
        paths += [posixpath.join(ctx.gitdir, p) for p in ("hooks", "config", WORKTREES)]
    paths += [posixpath.normpath(p) for p in trusted if p.startswith("/") and p != "/"]
    return paths


def guarded(
    found: list[Mount],
    box: Sandbox,
    ctx: Context,
    paths: Iterable[str],
    linked: Callable[[str], bool] = lambda path: False,
) -> list[Mount]:
    """found (sandbox.mounts' answer) with paths made read-only where found leaves them
    writable and no ReadWritePaths= word names them exactly; every directory between the
    writable mount and such a path made a mount point; the session's cwd kept writable when a
    path made read-only holds it (its own worktree, among the others'). Nothing where the
    home is writable: there the session writes what runs later anyway (~/.bashrc).

    linked: whether a path is a symbolic link. A directory made a mount point of its own is
    a copy of what is there, link followed: never made of a link, which could lead anywhere
    writable (a read-only mount only takes writing away, wherever it leads)."""
    if writable(ctx.home, found):
        return found
    named = {expand(p, ctx).lstrip("-") for p in box.read_write}
    added: list[Mount] = []
    for path in paths:
        if path in named or not writable(path, found):
            continue
        added.append(Mount(path, Mode.READ_ONLY, True))
        root = _covering(path, found)
        added += [Mount(d, Mode.READ_WRITE, True) for d in _between(root, path) if not linked(d)]
        if _under(ctx.cwd, path) and writable(ctx.cwd, found) and not linked(ctx.cwd):
            added.append(Mount(ctx.cwd, Mode.READ_WRITE, True))
    return _ordered([*found, *added]) if added else found


def writable(path: str, found: Iterable[Mount]) -> bool:
    """Whether found leave path as writable as the host has it: the nearest mount at or above
    it is a writable one, or there is none."""
    m = _nearest(path, found)
    return m is None or m.mode == Mode.READ_WRITE


def _nearest(path: str, found: Iterable[Mount]) -> Mount | None:
    above = [m for m in found if m.path == path or _under(path, m.path)]
    return max(above, key=lambda m: len(m.path), default=None)


def _covering(path: str, found: Iterable[Mount]) -> str:
    m = _nearest(posixpath.dirname(path), found)
    return m.path if m is not None else "/"


def _between(root: str, path: str) -> list[str]:
    """The directories under root that hold path, root and path left out, shallowest first."""
    out: list[str] = []
    d = posixpath.dirname(path)
    while d != root and _under(d, root) and d != "/":
        out.append(d)
        d = posixpath.dirname(d)
    return out[::-1]
