"""git run as a session's owner on its repository or one of its worktrees, as gitrun.py says:
never as root, every setting that names a command off, the git directory named in the
environment rather than found (a worktree's own only when its ``.git`` file names one of the
repository's), the repository's filters emptied. A git that cannot run, or runs too long or
prints too much, is a WorktreeFailed that says so.
"""

from __future__ import annotations

import logging
import os

from hostagent.daemon.host import gitrun
from hostagent.daemon.host.owner import DEFAULT_PATH, Helpers, OutputTooLarge
from hostagent.errors import WorktreeFailed
from hostagent.identity import Owner

log = logging.getLogger(__name__)

GIT_TIMEOUT = 120.0  # a worktree of a large repository takes a while to check out
COMMON_DIR = ("rev-parse", "--path-format=absolute", "--git-common-dir")


class GitAsOwner:
    """One git program, run as each session's owner."""

    def __init__(self, program: str | None, helpers: Helpers) -> None:
        """program: git's ("" or None: none, and every run is refused, saying why)."""
        self.program = program
        self.helpers = helpers

    async def run(
        self,
        owner: Owner,
        *args: str,
        timeout: float = GIT_TIMEOUT,
        strip: bool = True,
        env: dict[str, str] | None = None,
        quiet: tuple[str, ...] = (),
    ) -> tuple[int, str, str]:
        """git args run as owner, with every setting that names a command off (gitrun.QUIET,
        and quiet: the filters'), in env when given (the git directory named)."""
        git = self.program
        if not git:
            raise WorktreeFailed("git is not installed; install it (apt install git) and retry.")
        what = args[2] if len(args) > 2 and args[0] == "-C" else args[0]
        argv = [git, *gitrun.QUIET, *quiet, *args]
        try:
            # Still the owner's code where this git reads the owner's own config.
            result = await self.helpers.run(owner, argv, timeout, env=env, runs_user_code="git")
        except OutputTooLarge as e:
            raise WorktreeFailed(f"git {what} printed {e}.") from None
        if result is None:
            raise WorktreeFailed(f"git {what} did not finish in time.")
        code, out, err = result
        if not strip:  # names of files, to hand back to a command as they are
            return code, out.decode(errors="surrogateescape"), err.decode(errors="replace").strip()
        return code, out.decode(errors="replace").strip(), err.decode(errors="replace").strip()

    async def ok(
        self,
        owner: Owner,
        *args: str,
        what: str,
        env: dict[str, str] | None = None,
        quiet: tuple[str, ...] = (),
    ) -> str:
        """run's output; WorktreeFailed, what and git's last line, when git fails."""
        code, out, err = await self.run(owner, *args, env=env, quiet=quiet)
        if code != 0:
            raise WorktreeFailed(
                f"{what}: {(err or out).splitlines()[-1] if (err or out) else code}"
            )
        return out

    def repo_env(self, owner: Owner, repo: str) -> dict[str, str]:
        """git's environment for the repository itself: its .git named, and, when that is a
        directory (not the gitfile of an unusual layout), its common directory too."""
        dot = gitrun.common_dir(repo)
        named = dot if _real_dir(dot) else ""
        return gitrun.environment(_base(owner), dot, repo, named)

    async def tree_env(self, owner: Owner, repo: str, path: str) -> dict[str, str] | None:
        """git's environment for a worktree of the repository: its own git directory as its
        .git file names it, when that is one of the repository's; None when it is not."""
        common = gitrun.common_dir(repo)
        if not _real_dir(common):  # a bare repository's worktree, a submodule's: as git finds it
            env = self.repo_env(owner, repo)
            code, common, _ = await self.run(owner, *COMMON_DIR, env=env)
            if code != 0:
                return None
        admin = gitrun.admin_dir(
            await read_as_owner(self.helpers, owner, os.path.join(path, ".git")), path, common
        )
        if not admin:
            log.warning("worktree %s: its .git file names no worktree of %s", path, repo)
            return None
        return gitrun.environment(_base(owner), admin, path, common)

    async def filters(self, owner: Owner, env: dict[str, str]) -> tuple[str, ...]:
        """The options that empty every filter the config git would read in env defines."""
        _, out, _ = await self.run(owner, *gitrun.LIST_FILTERS, env=env)
        return tuple(gitrun.quieted(gitrun.filter_drivers(out)))


async def read_as_owner(helpers: Helpers, owner: Owner, path: str) -> str:
    """The file at path as owner reads it; "" when owner cannot."""
    result = await helpers.run(owner, ["/bin/cat", "--", path], 10.0)
    return result[1].decode(errors="replace") if result and result[0] == 0 else ""


def _real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def _base(owner: Owner) -> dict[str, str]:
    """The fixed environment a helper of the owner's gets (owner.Helpers.run's)."""
    return {"PATH": DEFAULT_PATH, "HOME": owner.home, "LANG": "C.UTF-8"}
