"""How the daemon runs git on a session's repository without running anything of the
repository's.

The daemon runs git for a session (worktree add, status, diff, remove) as its owner, outside
the session's sandbox. A confined session writes its project, a worktree session its
worktree's ``.git`` file, and one with %{gitdir} writable the repository's git directory; git
takes commands from all of them: hooks, a file-system monitor, filters, external diff. So the
daemon's git runs

- with its git directory named, never found: the repository's ``.git`` from the session's
  record (GIT_DIR, and GIT_COMMON_DIR so that a ``commondir`` file written into it is not
  followed), and a worktree's own administrative directory only when its ``.git`` file names
  one of that repository's; a ``.git`` file pointed elsewhere is refused;
- with every setting that names a command turned off on its command line, which wins over
  every file: hooks (core.hooksPath=/dev/null), the file-system monitor, the filters of each
  driver the repository's own config sets (clean, smudge and process emptied; a driver only
  the owner's ~/.gitconfig defines, git-lfs's, is hers and runs), automatic gc and
  maintenance, and submodule recursion (a submodule has a config of its own); git hands these
  to the git it runs itself. A diff is asked with --no-ext-diff --no-textconv; a status and a
  diff do not look into a submodule's work tree (git runs git there, with the submodule's own
  config, which the session may have written: an embedded repository it made and added).

Nothing here reaches a remote, so no ssh command, credential helper or askpass is run; the
owner's own ~/.gitconfig and root's /etc/gitconfig are read as they are (a session under
ProtectHome=read-only cannot write them).
"""

from __future__ import annotations

import posixpath
import re

ADMIN = "worktrees"  # where a repository keeps its linked worktrees' own git directories

# Settings that name a command, off for every git the daemon runs on a session's repository.
_OFF = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "submodule.recurse=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "core.pager=cat",
)
QUIET = tuple(arg for setting in _OFF for arg in ("-c", setting))
# A repository the session made inside the work tree and added (a submodule, or an embedded
# repository) has a config of its own, which git reads when it runs git in it to see whether
# its work tree changed: not looked into, only its commit compared.
SUBMODULES_QUIET = ("--ignore-submodules=dirty",)
DIFF_QUIET = ("--no-ext-diff", "--no-textconv", *SUBMODULES_QUIET)
# The filter drivers git's config defines, each key with the scope of the file that set it.
LIST_FILTERS = ("config", "--show-scope", "--name-only", "--get-regexp", r"^filter\.")
_FILTER_KEY = re.compile(r"^filter\.(.+)\.(clean|smudge|process)$", re.IGNORECASE)
OWNERS_SCOPES = ("global", "system")  # ~/.gitconfig and /etc/gitconfig: hers and root's


def filter_drivers(listing: str) -> list[str]:
    """The drivers that run a command set in the repository's own config (LIST_FILTERS'
    output), each once, in order. A driver only the owner's or the system's config defines
    (git-lfs, installed in ~/.gitconfig) is hers, and left to run."""
    found: list[str] = []
    for line in listing.splitlines():
        scope, _, key = line.strip().partition("\t")
        m = _FILTER_KEY.match(key)
        if m and scope not in OWNERS_SCOPES and m.group(1) not in found:
            found.append(m.group(1))
    return found


def quieted(drivers: list[str]) -> list[str]:
    """git's options that empty the drivers' commands: an empty filter runs nothing."""
    return [
        arg
        for driver in drivers
        for part in ("clean", "smudge", "process")
        for arg in ("-c", f"filter.{driver}.{part}=")
    ]


def common_dir(repo: str) -> str:
    """The git directory of a session's repository, as its record and %{gitdir} name it."""
    return posixpath.join(repo, ".git")


def admin_dir(gitfile: str, worktree: str, common: str) -> str:
    """The worktree's own git directory that its ``.git`` file names, when it is one of the
    linked worktrees' of the repository whose common git directory is common; "" when the file
    names anything else (a directory of the session's, another repository) or is not one."""
    first = gitfile.split("\n", 1)[0].rstrip("\r")
    if not first.startswith("gitdir: "):
        return ""
    named = first[len("gitdir: ") :]
    if not named or "\0" in named:
        return ""
    path = posixpath.normpath(posixpath.join(worktree, named))
    admin = posixpath.join(common, ADMIN)
    name = posixpath.basename(path)
    if posixpath.dirname(path) != admin or name in ("", ".", ".."):
        return ""
    return path


def environment(base: dict[str, str], git_dir: str, work_tree: str, common: str) -> dict[str, str]:
    """base with git's directories named; common "" to let git follow git_dir as it does (a
    gitfile at the repository's top)."""
    env = {**base, "GIT_DIR": git_dir, "GIT_WORK_TREE": work_tree, "GIT_TERMINAL_PROMPT": "0"}
    if common:
        env["GIT_COMMON_DIR"] = common
    return env
