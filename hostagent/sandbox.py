"""A session's sandbox in systemd.exec(5)'s words: what each means, how they are read, and
whether one sandbox confines at least as much as another. The mounts that give them systemd's
meaning are planned in ``sandboxmounts.py``.

A transient scope takes only cgroup properties, because its processes are forked by its caller,
not by systemd. So hostagent does for a session what systemd does for a service between fork
and exec: the held child that becomes the session's tmux server enters a mount namespace of its
own, where these mounts are made, before it drops to the owner (``daemon/host/namespace.py``
makes them). Every process of the session inherits them, and none can lift them.

The words, read as systemd reads them:

- ``ProtectSystem=`` yes (/usr, /boot, /efi read-only), full (and /etc), strict (all of /
  read-only but /dev, /proc and /sys; /home, /root and /run/user are left to ProtectHome=);
- ``ProtectHome=`` yes (/home, /root, /run/user inaccessible), read-only, tmpfs (empty and
  read-only);
- ``ReadWritePaths=``, ``ReadOnlyPaths=``, ``InaccessiblePaths=``: space-separated absolute
  paths, each with systemd's ``-`` prefix for one that may be missing; an empty assignment
  empties the list, as in a unit file;
- ``PrivateTmp=``: /tmp and /var/tmp of the session's own;
- ``NoNewPrivileges=``: no setuid or file capability raises a privilege.

A confined session also has its owner's ``/run/user/UID`` closed (her user manager and session
bus, through which anything could be started outside the sandbox), unless a path word names
exactly it (``sandboxmounts.Closed``); and a session whose words hide a path gets NoNewPrivileges=, since a
setuid program could be led astray by a file it cannot see.

Paths take systemd's specifiers ``%h`` (the owner's home), ``%u`` (her name), ``%U`` (her uid),
``%t`` (the manager's runtime directory: /run, or the user's) and ``%%``, and hostagent's own
``%{cwd}`` (the session's working directory, its worktree when it has one) and ``%{gitdir}`` (the
git directory of that worktree's repository, where a commit is written). Braces are not a
systemd specifier, so no word means one thing to systemd and another here.

Pure: the paths are only looked at by ``daemon/host/namespace.py``.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, replace

from hostagent import shellwords
from hostagent.errors import quote

PROTECT_SYSTEM = ("no", "yes", "full", "strict")
PROTECT_HOME = ("no", "yes", "read-only", "tmpfs")
PATH_WORDS = {
    "ReadWritePaths": "read_write",
    "ReadOnlyPaths": "read_only",
    "InaccessiblePaths": "inaccessible",
}
WORDS = ("ProtectSystem", "ProtectHome", *PATH_WORDS, "PrivateTmp", "NoNewPrivileges")
# Distinct paths one session's lists may hold together: the agent profile's own come to about
# forty (the secrets, the caches, every other CLI's state), a maker's words on top of a child's.
MAX_PATHS = 128
# In UTF-8 bytes, checked before parsing: what a word costs is bounded (shellwords.py).
PATH_MAX = 4096  # the kernel's, its NUL included: a path takes at most 4095 bytes
MAX_LINE = 16 * 1024  # a word's value: a few paths at their longest, quoted, or scores of others
_TRUE = ("1", "yes", "y", "true", "t", "on")
_FALSE = ("0", "no", "n", "false", "f", "off")


class SandboxProblem(ValueError):
    """A word or value systemd would refuse, said for the caller."""


def is_word(name: str) -> bool:
    return name in WORDS


@dataclass(frozen=True)
class Sandbox:
    """What a session is confined to, as its words say it (paths not yet expanded)."""

    protect_system: str = "no"
    protect_home: str = "no"
    read_write: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    inaccessible: tuple[str, ...] = ()
    private_tmp: bool = False
    no_new_privileges: bool = False

    @property
    def confined(self) -> bool:
        return self != Sandbox()

    @property
    def hides(self) -> bool:
        """Whether a path is hidden or emptied: then no setuid program may run in the session
        (NoNewPrivileges= is implied), since one could be led astray by a file it cannot see."""
        return bool(self.inaccessible) or self.protect_home in ("yes", "tmpfs")

    def shown(self) -> list[str]:
        """The words that are set, in systemd's form: what status and the journal say."""
        out = []
        if self.protect_system != "no":
            out.append(f"ProtectSystem={self.protect_system}")
        if self.protect_home != "no":
            out.append(f"ProtectHome={self.protect_home}")
        for word, attr in PATH_WORDS.items():
            paths = getattr(self, attr)
            if paths:
                out.append(_path_word(word, paths))
        if self.private_tmp:
            out.append("PrivateTmp=yes")
        if self.no_new_privileges:
            out.append("NoNewPrivileges=yes")
        return out


def _path_word(word: str, paths: tuple[str, ...]) -> str:
    return f"{word}={' '.join(_quoted(p) for p in paths)}"


def _quoted(path: str) -> str:
    return shlex.quote(path) if re.search(r"[\s'\"\\]", path) else path


def _boolean(word: str, text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise SandboxProblem(f"{word}= takes yes or no, not {quote(text)}")


def _choice(word: str, text: str, choices: tuple[str, ...]) -> str:
    low = text.strip().lower()
    if low in _TRUE:
        return "yes"
    if low in _FALSE:
        return "no"
    if low in choices:
        return low
    raise SandboxProblem(f"{word}= takes {', '.join(choices)}, not {quote(text)}")


_SPECIFIER = re.compile(r"%(\{[a-z]+\}|.?)")
_SPECIFIERS = ("%h", "%u", "%U", "%t", "%%", "%{cwd}", "%{gitdir}")


def _paths(word: str, text: str) -> tuple[str, ...]:
    """A path list as systemd splits it: words separated by spaces, quotes allowed; each an
    absolute, normalized path (after its '-' prefix and its specifiers), or one starting with
    a specifier that makes it so."""
    try:
        items = shellwords.split(text)
    except ValueError as e:
        raise SandboxProblem(f"{word}= has unbalanced quotes: {e}") from None
    if len(items) > MAX_PATHS:
        raise SandboxProblem(f"{word}= names {len(items)} paths; a session has at most {MAX_PATHS}")
    for item in items:
        path = item[1:] if item.startswith("-") else item
        if too_long := shellwords.too_long(path, PATH_MAX - 1):
            raise SandboxProblem(f"{word}= path {too_long} (PATH_MAX, {PATH_MAX}, counts its NUL)")
        if path.startswith("+"):
            raise SandboxProblem(
                f"{word}= path {quote(item)}: the '+' prefix is relative to RootDirectory=, "
                "which a session does not have"
            )
        for m in _SPECIFIER.finditer(path):
            if m.group(0) not in _SPECIFIERS:
                raise SandboxProblem(
                    f"{word}= path {quote(item)} has specifier {quote(m.group(0))}; "
                    f"use {', '.join(_SPECIFIERS)}"
                )
        if not (path.startswith("/") or path.startswith("%")) or _unnormal(path):
            raise SandboxProblem(
                f"{word}= takes absolute, normalized paths (no '.' or '..'), not {quote(item)}"
            )
    return tuple(items)


def _unnormal(path: str) -> bool:
    parts = path.split("/")
    return any(p in (".", "..") for p in parts) or "//" in path


def read(assigned: Iterable[str]) -> Sandbox:
    """The sandbox the NAME=value assignments give, in their order: a later scalar wins, a
    path word adds to its list, and an empty path word empties it (as in a unit file).
    Assignments of other words are passed over. SandboxProblem names a bad one."""
    box = Sandbox()
    for text in assigned:
        word, _, value = text.partition("=")
        if not is_word(word):
            continue
        box = _assign(box, word, value)
    if sum(len(getattr(box, a)) for a in PATH_WORDS.values()) > MAX_PATHS:
        raise SandboxProblem(f"a session's path lists may hold at most {MAX_PATHS} paths")
    return box


def _assign(box: Sandbox, word: str, value: str) -> Sandbox:
    if too_long := shellwords.too_long(value, MAX_LINE):  # before a character is parsed
        raise SandboxProblem(f"{word}= {too_long}")
    if word == "ProtectSystem":
        return replace(box, protect_system=_choice(word, value, PROTECT_SYSTEM))
    if word == "ProtectHome":
        return replace(box, protect_home=_choice(word, value, PROTECT_HOME))
    if word == "PrivateTmp":
        return replace(box, private_tmp=_boolean(word, value))
    if word == "NoNewPrivileges":
        return replace(box, no_new_privileges=_boolean(word, value))
    attr = PATH_WORDS[word]
    paths = _paths(word, value)
    # A path named twice is named once: a child's words repeat its maker's, the profile's.
    known = getattr(box, attr)
    listed: tuple[str, ...] = (
        (*known, *(p for p in dict.fromkeys(paths) if p not in known)) if paths else ()
    )
    return replace(box, **{attr: listed})  # type: ignore[arg-type]  # a path word's field


def check(text: str) -> str:
    """One sandbox assignment read, written back in systemd's words; SandboxProblem if bad."""
    word, _, value = text.partition("=")
    box = _assign(Sandbox(), word, value)
    if word in PATH_WORDS:
        return _path_word(word, getattr(box, PATH_WORDS[word]))
    shown = box.shown()
    return shown[0] if shown else f"{word}=no"


def tighter(box: Sandbox, than: Sandbox) -> bool:
    """Whether box confines at least as much as than does, word by word, as far as can be said
    without the paths themselves: a stronger or equal setting for each word, every path than
    hides or keeps read-only hidden or kept read-only again, and no path made readable that
    than does not name and that may be a closed one (Closed), which naming reopens."""
    return (
        PROTECT_SYSTEM.index(box.protect_system) >= PROTECT_SYSTEM.index(than.protect_system)
        and _home_rank(box.protect_home) >= _home_rank(than.protect_home)
        and (box.private_tmp or not than.private_tmp)
        and (box.no_new_privileges or not than.no_new_privileges)
        and set(than.inaccessible) <= set(box.inaccessible)
        and set(than.read_only) <= set(box.read_only) | set(box.inaccessible)
        and set(box.read_write) <= set(than.read_write)
        and not any(
            _REOPENS.fullmatch(p.removeprefix("-").rstrip("/"))
            for p in set(box.read_only) - set(than.read_only) - set(than.read_write)
        )
    )


# How a path word may spell a closed one (the owner's runtime directory; its bus and systemd on
# the user daemon) without the session's context: %t, %{cwd}, or a path ending in user/UID.
_REOPENS = re.compile(r"(%t|%\{cwd\}|.*/user/(%U|[0-9]+))(/bus|/systemd)?")


def _home_rank(value: str) -> int:
    return {"no": 0, "read-only": 1, "tmpfs": 2, "yes": 2}[value]


@dataclass(frozen=True)
class Context:
    """What a session's specifiers stand for."""

    home: str
    user: str
    uid: int
    runtime_root: str  # %t: /run for the system manager, the user's runtime directory else
    cwd: str
    gitdir: str = ""  # "" when the session's cwd is in no repository hostagent knows


def gitdir(cwd: str, repo: str) -> str:
    """What %{gitdir} stands for: the git directory of the repository a session's worktree
    belongs to, else the one in its working directory."""
    return posixpath.join(repo or cwd, ".git")


def pinned(word: str, cwd: str, repo: str) -> str:
    """word with %{cwd} and %{gitdir} replaced by what they are for the session at cwd (of
    repo): so that the word, carried to another session, means the same paths there."""

    def path(value: str) -> str:
        return shlex.quote(value.replace("%", "%%"))

    return word.replace("%{cwd}", path(cwd)).replace("%{gitdir}", path(gitdir(cwd, repo)))


def expand(path: str, ctx: Context) -> str:
    """A path with its specifiers replaced (its '-' prefix kept); SandboxProblem when one
    stands for nothing here (%{gitdir} outside a repository) or the result is not absolute."""
    table = {
        "%h": ctx.home,
        "%u": ctx.user,
        "%U": str(ctx.uid),
        "%t": ctx.runtime_root,
        "%%": "%",
        "%{cwd}": ctx.cwd,
        "%{gitdir}": ctx.gitdir,
    }
    optional = path.startswith("-")
    body = path[1:] if optional else path

    def one(m: re.Match[str]) -> str:
        value = table[m.group(0)]
        if not value:
            raise SandboxProblem(f"'{path}': {m.group(0)} stands for nothing in this session")
        return value

    body = _SPECIFIER.sub(one, body)
    if not body.startswith("/") or _unnormal(body.rstrip("/") or "/"):
        raise SandboxProblem(f"'{path}' is '{body}' here, not an absolute, normalized path")
    body = posixpath.normpath(body)
    return f"-{body}" if optional else body
