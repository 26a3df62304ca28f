"""The worktree module's pure parts and its refusal without git; the rest runs on a real
repository in tests/integration/test_worktrees.py."""

from __future__ import annotations

import os
import shutil

import pytest

from hostagent.daemon.host import worktree
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


def test_without_git_a_worktree_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)

    async def body() -> None:
        me = Owner.from_uid(os.getuid())
        with pytest.raises(WorktreeFailed, match="git is not installed"):
            await worktree.create(me, "/tmp", "a", "", "", "", "")

    run(body())
