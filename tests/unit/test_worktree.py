"""The worktree module's pure parts and its refusal without git; the rest runs on a real
repository in tests/integration/test_worktrees.py."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from hostagent.daemon.host import worktree
from hostagent.daemon.host.owner import Helpers
from hostagent.errors import WorktreeFailed
from hostagent.identity import Owner
from tests.unit.fakes import run


@pytest.mark.parametrize(
    ("path", "pattern", "matches"),
    [
        pytest.param(".env", ".env", True, id="name"),
        pytest.param("app/.env", ".env", True, id="name-anywhere"),
        pytest.param("app/.env", "/.env", False, id="anchored-top-only"),
        pytest.param("config/local.yaml", "config/", True, id="directory"),
        pytest.param("config/local.yaml", "*.yaml", True, id="glob"),
        pytest.param("src/main.py", ".env", False, id="other"),
    ],
)
def test_worktreeinclude_patterns(path: str, pattern: str, matches: bool) -> None:
    assert worktree._matches(path, pattern) is matches


@pytest.mark.parametrize(
    ("cwd", "top", "inside"),
    [
        pytest.param("/r", "/r", "/t/a", id="the-top-is-the-tree-not-tree-dot"),
        pytest.param("/r/src", "/r", "/t/a/src", id="below-the-top"),
        pytest.param("/r/src/deep/", "/r", "/t/a/src/deep", id="trailing-slash"),
    ],
)
def test_the_cwd_in_a_new_worktree_is_a_normalized_path(cwd: str, top: str, inside: str) -> None:
    """%{cwd} stands for it, and no path word may hold a '.': '/t/a/.' failed the start."""
    assert worktree.inside("/t/a", cwd, top) == inside


def test_without_git_a_worktree_is_refused_by_name(tmp_path: Path) -> None:
    async def body() -> None:
        me = Owner.from_uid(os.getuid())
        nowhere = worktree.Worktrees(Helpers(), git="")  # no git on the daemon's PATH
        with pytest.raises(WorktreeFailed, match="git is not installed"):
            await nowhere.plan(me, str(tmp_path), "a", "", "", "")

    run(body())


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_what_git_could_not_restore_is_named_and_an_untouched_copy_is_not(
    tmp_path: Path,
) -> None:
    """Real git on a real repository, run as this test's user: the kept-worktree check."""
    import subprocess

    repo, tree = tmp_path / "repo", tmp_path / "tree"

    def git(*args: str, cwd: Path = repo) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=cwd,
            check=True,
            capture_output=True,
        )

    repo.mkdir()
    git("init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".env\nnotes/\n")
    (repo / "README").write_text("hello\n")
    git("add", ".")
    git("commit", "-qm", "start")
    (repo / ".env").write_text("SECRET=1\n")
    git("worktree", "add", "-q", "-b", "b", str(tree))
    me = Owner.from_uid(os.getuid())

    def kept() -> list[str]:
        return asyncio.run(worktree.Worktrees(Helpers()).unrestorable(me, str(repo), str(tree)))

    assert kept() == []
    (tree / ".env").write_text("SECRET=1\n")  # as .worktreeinclude copies it
    assert kept() == []
    (tree / ".env").write_text("SECRET=2\n")  # rotated
    assert kept() == [".env"]
    (tree / ".env").unlink()
    (tree / "notes").mkdir()
    (tree / "notes" / "plan.md").write_text("plan\n")
    assert kept() == ["notes/"]
    git("mv", "README", "odd name\nwith a newline", cwd=tree)
    assert kept() == ["odd name\nwith a newline", "notes/"]
