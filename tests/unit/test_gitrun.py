"""The daemon's git runs nothing of the repository's: the pure parts of gitrun.py, and the
worktree module's git on a real repository a session has booby-trapped (hooks, fsmonitor,
filters, a .git file pointed elsewhere, a commondir file), run as this test's user."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hostagent.daemon.host import gitrun, worktree
from hostagent.daemon.host.owner import Helpers
from hostagent.errors import WorktreeFailed
from hostagent.identity import Owner


@pytest.mark.parametrize(
    ("listing", "drivers"),
    [
        pytest.param("", [], id="none"),
        pytest.param(
            "local\tfilter.lfs.clean\nlocal\tfilter.lfs.smudge\nlocal\tfilter.lfs.process\n",
            ["lfs"],
            id="one-driver-once",
        ),
        pytest.param(
            "local\tfilter.a.b.clean\nlocal\tfilter.x.required\n", ["a.b"], id="dotted-subsection"
        ),
        pytest.param("worktree\tfilter.evil.PROCESS\n", ["evil"], id="any-case,worktree-scope"),
        pytest.param("command\tfilter.c.clean\n", ["c"], id="command-scope"),
        pytest.param("local\tfilter.x.required\nlocal\tdiff.x.textconv\n", [], id="no-command"),
        pytest.param(
            "global\tfilter.lfs.clean\nsystem\tfilter.s.smudge\n", [], id="the-owners-and-roots-run"
        ),
        pytest.param(
            "global\tfilter.lfs.clean\nlocal\tfilter.lfs.process\n",
            ["lfs"],
            id="the-owners-driver-changed-by-the-repository",
        ),
    ],
)
def test_the_filter_drivers_that_run_a_command_are_found(listing: str, drivers: list[str]) -> None:
    assert gitrun.filter_drivers(listing) == drivers


def test_a_driver_is_quieted_by_emptying_each_of_its_commands() -> None:
    assert gitrun.quieted(["x"]) == [
        "-c",
        "filter.x.clean=",
        "-c",
        "filter.x.smudge=",
        "-c",
        "filter.x.process=",
    ]


@pytest.mark.parametrize(
    ("gitfile", "admin"),
    [
        pytest.param("gitdir: /r/.git/worktrees/a\n", "/r/.git/worktrees/a", id="absolute"),
        pytest.param("gitdir: ../../.git/worktrees/a\n", "/r/.git/worktrees/a", id="relative"),
        pytest.param("gitdir: /r/.git/worktrees/a/../b", "/r/.git/worktrees/b", id="normalized"),
        pytest.param("gitdir: /evil/.git/worktrees/a\n", "", id="other-repository"),
        pytest.param("gitdir: /r/.git\n", "", id="the-repository-itself"),
        pytest.param("gitdir: /r/.git/worktrees/a/x\n", "", id="below-an-admin-dir"),
        pytest.param("gitdir: /r/.git/worktrees/..\n", "", id="up"),
        pytest.param("gitdir: /r/.git/worktrees\n", "", id="the-admin-root"),
        pytest.param("[core]\n\tfsmonitor = x\n", "", id="not-a-gitfile"),
        pytest.param("", "", id="empty"),
    ],
)
def test_a_worktree_git_file_is_followed_only_into_its_repository(gitfile: str, admin: str) -> None:
    assert gitrun.admin_dir(gitfile, "/r/w/t", "/r/.git") == admin


def test_the_git_directory_is_named_and_commondir_not_followed() -> None:
    env = gitrun.environment({"HOME": "/h"}, "/r/.git", "/r", "/r/.git")
    assert env == {
        "HOME": "/h",
        "GIT_DIR": "/r/.git",
        "GIT_WORK_TREE": "/r",
        "GIT_COMMON_DIR": "/r/.git",
        "GIT_TERMINAL_PROMPT": "0",
    }
    assert "GIT_COMMON_DIR" not in gitrun.environment({}, "/r/.git", "/r", "")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def _trap(gitdir: Path, marker: Path) -> None:
    """Every way a config or hooks directory makes git run a command, each touching marker."""
    touch = f"touch {marker}"
    hooks = gitdir / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("post-checkout", "reference-transaction", "post-index-change", "pre-auto-gc"):
        (hooks / hook).write_text(f"#!/bin/sh\n{touch}\n")
        (hooks / hook).chmod(0o755)
    with (gitdir / "config").open("a") as f:
        f.write(
            f'[core]\n\tfsmonitor = "{touch}; false"\n'
            f'[filter "trap"]\n\tclean = "{touch}; cat"\n\tsmudge = "{touch}; cat"\n'
            f'\tprocess = "{touch}; false"\n'
            f'[diff]\n\texternal = "{touch}; true"\n'
            f'[diff "trap"]\n\ttextconv = "{touch}; cat"\n\tcommand = "{touch}; true"\n'
        )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_daemons_git_runs_nothing_a_session_wrote(tmp_path: Path) -> None:
    """Hooks, fsmonitor, filters and external diff in the repository's own config; a commondir
    file sending git to a trapped copy; a worktree's .git file pointed at another repository:
    the worktree module's make, diff, status and remove run none of them."""
    repo, marker = tmp_path / "repo", tmp_path / "RAN"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / ".gitattributes").write_text("*.txt filter=trap diff=trap\n")
    (repo / "a.txt").write_text("hello\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "start")
    _trap(repo / ".git", marker)
    me = Owner.from_uid(os.getuid())
    trees = worktree.Worktrees(Helpers())

    async def made() -> worktree.Worktree:
        tree = await trees.plan(me, str(repo), "s1", "", "", "")
        await trees.make(me, tree, "")
        return tree

    tree = asyncio.run(made())
    assert tree.cwd == tree.path  # made from the top: its top, normalized for %{cwd}
    assert not marker.exists(), "the create ran the repository's code"
    path = Path(tree.path)
    (path / "a.txt").write_text("changed\n")
    assert "changed" in asyncio.run(trees.diff(me, str(repo), tree.path, tree.base_ref, False))
    assert asyncio.run(trees.unrestorable(me, str(repo), tree.path)) == ["a.txt"]
    assert not marker.exists(), "diff or status ran the repository's code"

    # An embedded repository the session made and added, with a filter of its own.
    sub = path / "sub"
    sub.mkdir()
    _git(sub, "init", "-q", "-b", "main")
    (sub / ".gitattributes").write_text("* filter=own\n")
    (sub / "f").write_text("f\n")
    _git(sub, "add", ".")
    _git(sub, "commit", "-qm", "sub")
    with (sub / ".git" / "config").open("a") as f:
        f.write(f'[filter "own"]\n\tclean = "touch {marker}; cat"\n')
    _git(path, *gitrun.QUIET, "add", "sub")  # as the session would, its own trap kept off
    (sub / "f").write_text("changed\n")
    os.utime(sub / "f", (0, 0))  # stat data unlike the index's: git must look at the file
    assert "sub" in asyncio.run(trees.diff(me, str(repo), tree.path, tree.base_ref, True))
    assert "sub" in asyncio.run(trees.unrestorable(me, str(repo), tree.path))
    assert not marker.exists(), "git ran a filter of a repository the session added"

    # A commondir file in the git directory would send git to a copy the session made.
    evil = tmp_path / "evil"
    shutil.copytree(repo / ".git", evil)
    (repo / ".git" / "commondir").write_text(f"{evil}\n")
    assert "a.txt" in asyncio.run(trees.diff(me, str(repo), tree.path, tree.base_ref, True))
    (repo / ".git" / "commondir").unlink()

    # The worktree's .git file pointed at another repository: refused, not followed.
    (path / ".git").write_text(f"gitdir: {evil}\n")
    with pytest.raises(WorktreeFailed, match="does not name a worktree of"):
        asyncio.run(trees.diff(me, str(repo), tree.path, tree.base_ref, False))
    assert asyncio.run(trees.unrestorable(me, str(repo), tree.path)) == ["?"]
    assert "was kept" in asyncio.run(trees.remove(me, str(repo), tree.path, force=False))
    with pytest.raises(WorktreeFailed, match="does not point back"):  # git's own check
        asyncio.run(trees.remove(me, str(repo), tree.path, force=True))
    assert not marker.exists(), "a .git file pointed elsewhere ran its repository's code"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_trap_does_run_under_plain_git(tmp_path: Path) -> None:
    """The trap the test above sets works against git as a person runs it: the test shows
    the daemon's git turned it off, not that it was never armed."""
    repo, marker = tmp_path / "repo", tmp_path / "RAN"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("hello\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "start")
    _trap(repo / ".git", marker)
    _git(repo, "worktree", "add", "-q", str(tmp_path / "t"))
    assert marker.exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_bare_repositorys_worktree_is_made_diffed_and_removed(tmp_path: Path) -> None:
    """A layout whose top's .git is a gitfile (a bare repository with its worktrees): the common
    git directory is had from git, and the worktree's .git file checked against it."""
    seed, bare, top = tmp_path / "seed", tmp_path / "repo.git", tmp_path / "main"
    seed.mkdir()
    _git(seed, "init", "-q", "-b", "main")
    (seed / "a.txt").write_text("hello\n")
    _git(seed, "add", ".")
    _git(seed, "commit", "-qm", "start")
    _git(tmp_path, "clone", "-q", "--bare", str(seed), str(bare))
    _git(bare, "worktree", "add", "-q", str(top), "main")
    me = Owner.from_uid(os.getuid())
    trees = worktree.Worktrees(Helpers())

    async def made() -> worktree.Worktree:
        tree = await trees.plan(me, str(top), "s1", "", "", "")
        await trees.make(me, tree, "")
        return tree

    tree = asyncio.run(made())
    assert tree.repo == str(top) and tree.path == str(bare / "hostagent-worktrees" / "s1")
    (Path(tree.path) / "a.txt").write_text("changed\n")
    assert "+changed" in asyncio.run(trees.diff(me, tree.repo, tree.path, tree.base_ref, False))
    assert asyncio.run(trees.unrestorable(me, tree.repo, tree.path)) == ["a.txt"]
    assert asyncio.run(trees.remove(me, tree.repo, tree.path, force=True)) == ""
    assert not Path(tree.path).exists()
