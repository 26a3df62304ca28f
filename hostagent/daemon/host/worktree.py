"""A git worktree per session, so agents working on one repository never share files.

Everything here runs git (and the setup command) as the session's owner, never as root: a
repository is the user's, and what git writes in it must be hers. A new worktree goes on a new
branch (``hostagent/NAME`` unless the caller names one) from a base (HEAD unless named), by
default in ``hostagent-worktrees/`` inside the repository's git directory, which keeps it on the
same filesystem, owned by the same user, and out of ``git status``. Ignored files the agent
needs (``.env``, local settings) are copied in when the repository's ``.worktreeinclude``
names them. A failure at any step leaves nothing: no worktree, no branch.

git runs outside the session's sandbox on files the session may have written: it runs as
gitasowner.py runs it, as gitrun.py says, its git directory taken from the record and nothing
of the repository's run.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import shutil
from dataclasses import dataclass

from hostagent.daemon.host import gitrun
from hostagent.daemon.host.gitasowner import COMMON_DIR, GIT_TIMEOUT, GitAsOwner, read_as_owner
from hostagent.daemon.host.owner import USER_CODE_OUTPUT, Helpers, OutputTooLarge
from hostagent.errors import WorktreeFailed, quote
from hostagent.identity import Owner
from hostagent.session import SessionRecord

log = logging.getLogger(__name__)

DIFF_MAX = 8 * 1024 * 1024  # bytes of diff a reply may carry
INCLUDE_FILE = ".worktreeinclude"
DIRECTORY = "hostagent-worktrees"


@dataclass(frozen=True)
class Worktree:
    path: str  # the worktree's top
    branch: str
    base_ref: str  # the commit the branch started from
    repo: str  # the main worktree's top
    cwd: str  # the caller's cwd, at the same place inside the worktree
    new_branch: bool  # made for this worktree (not an existing branch reused)
    top: str = ""  # the worktree the caller's cwd is in, which git adds the new one from


class Worktrees:
    """The worktrees of sessions, with git run as each one's owner (ports.WorktreePort)."""

    def __init__(self, helpers: Helpers, git: str | None = None) -> None:
        """git: its program ("": none); looked for on the daemon's PATH when not given.
        Without one, every worktree is refused, and says why."""
        self.helpers = helpers
        self.git = GitAsOwner(git if git is not None else shutil.which("git"), helpers)

    async def plan(
        self, owner: Owner, cwd: str, name: str, branch: str, base: str, directory: str
    ) -> Worktree:
        """The worktree session name would get in the repository that holds cwd: every check
        made, nothing made yet (a create notes it on disk first, so that a crash in make
        leaves nothing the next start cannot find)."""
        code, top, err = await self.git.run(owner, "-C", cwd, "rev-parse", "--show-toplevel")
        if code != 0 and "dubious ownership" in err:
            raise WorktreeFailed(
                f"The repository at {quote(cwd)} belongs to another user; a session's worktree "
                "needs a repository its owner owns and can write."
            )
        if code != 0 or not top:
            raise WorktreeFailed(f"Working directory {quote(cwd)} is not in a git repository.")
        what = "Failed to find the repository's git directory"
        common = await self.git.ok(owner, "-C", top, *COMMON_DIR, what=what)
        repo = os.path.dirname(common) if os.path.basename(common) == ".git" else top
        code, base_ref, _ = await self.git.run(
            owner, "-C", top, "rev-parse", "--verify", "--quiet", f"{base or 'HEAD'}^{{commit}}"
        )
        if code != 0:
            raise WorktreeFailed(f"Base {quote(base or 'HEAD')} does not name a commit in {top}.")
        chosen = branch or f"hostagent/{name}"
        path = os.path.join(directory or os.path.join(common, DIRECTORY), name)
        code, _, _ = await self.git.run(
            owner, "-C", top, "show-ref", "--verify", "--quiet", f"refs/heads/{chosen}"
        )
        reuse = code == 0
        if reuse and not branch:
            raise WorktreeFailed(
                f"Branch '{chosen}' already exists; reuse it with --worktree={chosen} "
                "(when no worktree has it checked out), or pick another name."
            )
        return Worktree(
            path, chosen, base_ref, repo, inside(path, cwd, top), new_branch=not reuse, top=top
        )

    async def make(self, owner: Owner, tree: Worktree, setup: str) -> None:
        """Make the planned worktree: checked out, the caller's directory made in it, the
        included files copied, the setup run; on any failure nothing of it stays."""
        add = (
            ["worktree", "add", "-b", tree.branch, tree.path, tree.base_ref]
            if tree.new_branch
            else ["worktree", "add", tree.path, tree.branch]
        )
        env = self.git.repo_env(owner, tree.repo)
        quiet = await self.git.filters(owner, env)  # the checkout's
        what = f"Failed to create the worktree at {tree.path}"
        await self.git.ok(owner, *add, what=what, env=env, quiet=quiet)
        try:
            # The same place inside the worktree; git keeps no empty directories, so make it.
            made = await self.helpers.run(owner, ["/bin/mkdir", "-p", "--", tree.cwd], 10.0)
            if made is None or made[0] != 0:
                raise WorktreeFailed(f"Failed to make {tree.cwd} in the new worktree.")
            await self._copy_included(owner, tree.top, tree.path)
            if setup:
                await self._setup(owner, tree.path, setup)
        except BaseException:
            await self.discard(owner, tree)
            raise
        log.info("worktree %s on branch %s from %s", tree.path, tree.branch, tree.base_ref[:12])

    def attached(self, record: SessionRecord, tree: Worktree) -> SessionRecord:
        """A new session's record with its worktree, its cwd moved to the same place inside."""
        return dataclasses.replace(
            record,
            cwd=tree.cwd,
            worktree=tree.path,
            branch=tree.branch,
            base_ref=tree.base_ref,
            repo=tree.repo,
        )

    async def _copy_included(self, owner: Owner, top: str, path: str) -> None:
        """Copy the ignored files that .worktreeinclude names (git's pattern syntax, one a line)."""
        text = await read_as_owner(self.helpers, owner, os.path.join(top, INCLUDE_FILE))
        patterns = [p.strip() for p in text.splitlines() if p.strip() and not p.startswith("#")]
        if not patterns:
            return
        ignored = ("ls-files", "--others", "--ignored", "--exclude-standard")
        what = "Failed to list the repository's ignored files"
        out = await self.git.ok(owner, "-C", top, *ignored, what=what)
        chosen = [f for f in out.splitlines() if any(_matches(f, p) for p in patterns)]
        if chosen:
            copy = 'cd "$1" && shift && exec cp -a --parents -- "$@" "$0"'
            argv = ["/bin/sh", "-c", copy, path, top, *chosen]
            result = await self.helpers.run(owner, argv, GIT_TIMEOUT)
            if result is None or result[0] != 0:
                raise WorktreeFailed(f"Failed to copy the files {INCLUDE_FILE} names into {path}.")

    async def _setup(self, owner: Owner, path: str, command: str) -> None:
        try:
            result = await self.helpers.run(
                owner,
                ["/bin/sh", "-c", 'cd "$0" && exec /bin/sh -c "$1"', path, command],
                GIT_TIMEOUT,
                runs_user_code="worktree setup",
                limit=USER_CODE_OUTPUT,
            )
        except OutputTooLarge as e:
            raise WorktreeFailed(f"The worktree setup command printed {e}.") from None
        if result is None:
            raise WorktreeFailed(
                f"The worktree setup command did not finish in {GIT_TIMEOUT:.0f}s."
            )
        code, out, err = result
        if code != 0:
            said = (err or out).decode(errors="replace").strip().splitlines()[-3:]
            raise WorktreeFailed(
                f"The worktree setup command failed (exit {code}): " + " | ".join(said)
            )

    async def discard(self, owner: Owner, tree: Worktree) -> None:
        """Remove a worktree a create made, for a session that never came to be (a failed
        create, or one a crash cut short), and its branch if the create made it and nothing
        was committed on it since; best effort. What is in the worktree was put there by the
        create (checkout, included files, setup), never by a session."""
        env = self.git.repo_env(owner, tree.repo)
        await self.git.run(owner, "worktree", "remove", "--force", tree.path, env=env)
        await self.git.run(owner, "worktree", "prune", env=env)  # a checkout cut short
        if not tree.new_branch:
            return
        code, tip, _ = await self.git.run(
            owner, "rev-parse", "--verify", "--quiet", f"refs/heads/{tree.branch}", env=env
        )
        if code == 0 and tip != tree.base_ref:
            log.warning(
                "Branch %s of a create that never finished holds commits; kept", tree.branch
            )
            return
        await self.git.run(owner, "branch", "-D", tree.branch, env=env)

    async def unrestorable(self, owner: Owner, repo: str, path: str) -> list[str]:
        """What in the worktree git could not bring back once it is removed, as git status names
        it: changes to tracked files, untracked files, and ignored ones (a rotated .env, notes)
        unless the main worktree holds the same (a file .worktreeinclude copied in, untouched).
        ["?"] when git cannot say (its .git file names no worktree of the repository)."""
        env = await self.git.tree_env(owner, repo, path)
        if env is None:
            return ["?"]
        quiet = await self.git.filters(owner, env)  # a changed file's, which status cleans
        status = ("status", "--porcelain=v1", "-z", "--ignored", *gitrun.SUBMODULES_QUIET)
        code, out, _ = await self.git.run(owner, *status, strip=False, env=env, quiet=quiet)
        if code != 0:
            return ["?"]
        changed: list[str] = []
        ignored: list[str] = []
        entries = iter(out.split("\0"))
        for entry in entries:
            if len(entry) < 4:
                continue
            (ignored if entry[:2] == "!!" else changed).append(entry[3:])
            if entry[0] in "RC":
                next(entries, None)  # a rename's or copy's old path
        return changed + await self._not_in_main(owner, repo, path, ignored)

    async def _not_in_main(
        self, owner: Owner, repo: str, path: str, ignored: list[str]
    ) -> list[str]:
        """The ignored files (or directories) of the worktree that the main worktree does not hold
        the same; all of them when that cannot be told."""
        if not ignored:
            return []
        script = (
            "wt=$1 top=$2; shift 2; for f; do "
            'diff -rq -- "$wt/$f" "$top/$f" >/dev/null 2>&1 || printf "%s\\0" "$f"; done'
        )
        result = await self.helpers.run(
            owner, ["/bin/sh", "-c", script, "sh", path, repo, *ignored], GIT_TIMEOUT
        )
        if result is None or result[0] != 0:
            return ignored
        return [f for f in result[1].decode(errors="surrogateescape").split("\0") if f]

    async def remove(self, owner: Owner, repo: str, path: str, force: bool) -> str:
        """Remove a session's worktree (the branch stays); a note for the caller when it is kept."""
        if not os.path.isdir(path):
            return ""
        if not force:
            kept = await self.unrestorable(owner, repo, path)
            if kept:
                first = "" if kept == ["?"] else f" (first: {quote(kept[0])})"
                return (
                    f"Worktree {path} holds {len(kept)} changed, untracked or ignored file(s) git "
                    f"could not restore{first} and was kept; remove it with 'git -C {repo} worktree "
                    f"remove --force {path}', or remove the session with --force."
                )
        # Unforced, git's own check runs git status in the worktree, through its .git file:
        # unrestorable found it one of the repository's a moment ago.
        env = self.git.repo_env(owner, repo)
        args = ["worktree", "remove", *(["--force"] if force else []), path]
        what = f"Failed to remove the worktree at {path}"
        quiet = await self.git.filters(owner, env)
        await self.git.ok(owner, *args, what=what, env=env, quiet=quiet)
        return ""

    async def remove_of(self, owner: Owner, record: SessionRecord, force: bool) -> str:
        """Remove the session's worktree, if it has one; a note for the caller when something was
        kept or could not be removed."""
        if not record.worktree:
            return ""
        try:
            return await self.remove(owner, record.repo, record.worktree, force)
        except WorktreeFailed as e:
            return e.message

    async def diff(self, owner: Owner, repo: str, path: str, base_ref: str, stat: bool) -> str:
        """What the session changed against its base, committed and not, as git diff shows it."""
        env = await self.git.tree_env(owner, repo, path)
        if env is None:
            raise WorktreeFailed(
                f"The .git file of {path} does not name a worktree of {repo}; git is not run "
                "on a repository the session pointed it to."
            )
        args = ["diff", *gitrun.DIFF_QUIET, *(["--stat"] if stat else []), base_ref, "--"]
        quiet = await self.git.filters(owner, env)
        out = await self.git.ok(
            owner, *args, what="Failed to diff the worktree", env=env, quiet=quiet
        )
        if len(out.encode()) > DIFF_MAX:
            raise WorktreeFailed(
                f"The diff is larger than {DIFF_MAX // (1024 * 1024)} MiB; run "
                f"'git -C {path} diff {base_ref}' yourself."
            )
        return out


def inside(path: str, cwd: str, top: str) -> str:
    """The place in the worktree at path that cwd is in the tree at top, normalized: %{cwd}
    stands for it, and a path word holds no '.' (the top itself was 'path/.')."""
    return os.path.normpath(os.path.join(path, os.path.relpath(cwd, top)))


def _matches(path: str, pattern: str) -> bool:
    pattern = pattern.rstrip("/")
    if pattern.startswith("/"):
        return fnmatch.fnmatch(path, pattern[1:]) or path.startswith(pattern[1:] + "/")
    return any(
        fnmatch.fnmatch(part, pattern) or fnmatch.fnmatch(path, pattern) for part in path.split("/")
    )
