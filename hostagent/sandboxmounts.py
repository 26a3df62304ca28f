"""The mounts that give a session's sandbox (``sandbox.py``) systemd's meaning, in the order
they are made: parents before what is under them, one per path (the strongest), nothing under
an inaccessible path, as systemd's namespace code does it; and what a confined session has
closed unless a word names it (``Closed``).

Pure: ``daemon/host/namespace.py`` makes the mounts, and only it looks at the paths.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hostagent.sandbox import Context, Sandbox, expand


class Mode(enum.IntEnum):
    """What a mount does to its path. For one path given twice, the lower wins, as in
    systemd's namespace code."""

    INACCESSIBLE = 1
    TMPFS = 2  # empty and read-only
    PRIVATE_TMP = 3  # empty, writable by all, sticky
    READ_ONLY = 4
    READ_WRITE = 5


@dataclass(frozen=True, order=True)
class Mount:
    path: str
    mode: Mode
    optional: bool = field(default=False, compare=False)  # the path may be missing


_SYSTEM_YES = ("/usr", "/boot", "/efi")
_HOME = ("/home", "/run/user", "/root")


@dataclass(frozen=True)
class Closed:
    """A path closed in a confined session unless a path word names exactly it, by mode over
    cover (it, or one above it: then a mount made there later on the host lands unseen)."""

    path: str
    cover: str
    mode: Mode = Mode.INACCESSIBLE


def mounts(
    box: Sandbox,
    ctx: Context,
    keep: Iterable[str] = (),
    close: Iterable[Closed] = (),
    state: Iterable[str] = (),
    resolved: Mapping[str, str] | None = None,
) -> list[Mount]:
    """The mounts that make box, in the order they are made: parents before what is under them,
    one per path (the strongest), nothing under an inaccessible path, as systemd does it.

    keep: paths the session itself must write whatever the words say (its runtime directory),
    made writable after the words, unless a word hides them. close: what is closed unless a path
    word names exactly it (the owner's user manager and session bus, through which anything
    could be started outside the sandbox). state: the paths the session's CLI keeps its state
    in, writable as keep's. resolved: each path as its owner resolves it (sandboxpaths.py), so
    that no link in a path carries a mount elsewhere."""
    real = resolved or {}
    found: list[Mount] = []
    named: set[str] = set()
    if box.protect_system in ("yes", "full"):
        system = (*_SYSTEM_YES, "/etc") if box.protect_system == "full" else _SYSTEM_YES
        found += [Mount(p, Mode.READ_ONLY, True) for p in system]
    elif box.protect_system == "strict":
        found.append(Mount("/", Mode.READ_ONLY))
        # The API file systems stay as they are, and ProtectHome= decides about the homes:
        # made writable again here, and weaker than any other word for the same path.
        found += [Mount(p, Mode.READ_WRITE, True) for p in ("/dev", "/proc", "/sys", *_HOME)]
    home_mode = {"yes": Mode.INACCESSIBLE, "read-only": Mode.READ_ONLY, "tmpfs": Mode.TMPFS}
    if box.protect_home in home_mode:
        found += [Mount(p, home_mode[box.protect_home], True) for p in _HOME]
    if box.private_tmp:
        found += [Mount(p, Mode.PRIVATE_TMP) for p in ("/tmp", "/var/tmp")]
    for attr, mode in (
        ("read_write", Mode.READ_WRITE),
        ("read_only", Mode.READ_ONLY),
        ("inaccessible", Mode.INACCESSIBLE),
    ):
        for raw in getattr(box, attr):
            path = expand(raw, ctx)
            body = path.lstrip("-")
            named.add(body)
            found.append(Mount(real.get(body, body), mode, path.startswith("-")))
    state_mounts = [Mount(real.get(p, p), Mode.READ_WRITE, True) for p in state]
    # A closed path reopens only for a word that names it as it is: not for one that resolves
    # to it through a link, nor for a state path.
    found += [Mount(c.cover, c.mode, True) for c in close if c.path not in named]
    found += [Mount(p, Mode.READ_WRITE, True) for p in keep]
    return _ordered([*found, *state_mounts])


def _ordered(found: list[Mount]) -> list[Mount]:
    strongest: dict[str, Mount] = {}
    for m in found:
        before = strongest.get(m.path)
        # The strongest mode wins; of two alike, the one that must exist.
        if before is None or (m.mode, m.optional) < (before.mode, before.optional):
            strongest[m.path] = m
    out: list[Mount] = []
    hidden: list[str] = []
    for m in sorted(strongest.values(), key=lambda m: (_depth(m.path), m.path)):
        if any(_under(m.path, h) for h in hidden):
            continue  # nothing under an inaccessible or empty path can be reached to be made
        if m.mode in (Mode.INACCESSIBLE, Mode.TMPFS, Mode.PRIVATE_TMP):
            hidden.append(m.path)
        out.append(m)
    return out


def hidden(path: str, made: Iterable[Mount]) -> bool:
    """Whether path is, or is under, a path that made (mounts' answer) hides or empties."""
    return any(
        m.mode in (Mode.INACCESSIBLE, Mode.TMPFS, Mode.PRIVATE_TMP)
        and (path == m.path or _under(path, m.path))
        for m in made
    )


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def _under(path: str, parent: str) -> bool:
    return parent == "/" or path.startswith(parent.rstrip("/") + "/")
