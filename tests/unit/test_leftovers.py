"""A create cut short by a crash leaves nothing behind: its worktree and branch (noted before
they are made) and its runtime files are collected at the next start, and the name can be
created again. Real git on a repository in tmp; the daemon's crash is a second core started
over the same state while the first one is parked before systemd took its start."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from hostagent.daemon.host.owner import Helpers
from hostagent.daemon.host.worktree import Worktrees
from hostagent.daemon.ops.leftovers import Leftovers
from hostagent.daemon.state.creates import PendingCreates
from hostagent.identity import Owner
from hostagent.options import CreateRequest
from hostagent.session import State
from tests.unit.fakes import Host, me, run

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def a_repo(tmp: Path) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("hello\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "start")
    return repo


def branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


async def dead(create: asyncio.Task[object]) -> None:
    """The first daemon's create, ended within the test (it stands for a process that died)."""
    create.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await create


async def parked(host: Host, create: asyncio.Task[object]) -> None:
    """Until the create is held at the gate; its failure, if it fails first."""
    held = asyncio.ensure_future(host.scopes.parked.wait())
    await asyncio.wait([held, create], return_when=asyncio.FIRST_COMPLETED)
    if create.done():
        held.cancel()
        create.result()
        raise AssertionError("the create finished without reaching the gate")


def test_a_create_cut_short_before_its_record_is_undone_at_the_next_start(tmp_path: Path) -> None:
    repo = a_repo(tmp_path)

    async def body() -> None:
        host = await Host.started(tmp_path / "d")
        host.scopes.gate = asyncio.Event()
        host.scopes.gate_before_job = True  # the worktree and runtime files made; no record
        create = asyncio.create_task(
            host.create(me(), "w", "shell", str(repo), CreateRequest(worktree=""))
        )
        await parked(host, create)
        tree = repo / ".git" / "hostagent-worktrees" / "w"
        paths = host.registry.paths(me(), "w")
        assert tree.is_dir() and "hostagent/w" in branches(repo)
        assert paths.hooks_file.exists() or paths.fifo.exists()
        assert host.on_disk("w") is None

        # The daemon dies here: a new one starts over the same state directory.
        again = host.restart()
        report = await again.core.recover()
        assert report.collected == ["w"]
        assert not tree.exists() and "hostagent/w" not in branches(repo)
        assert not paths.fifo.exists() and not paths.hooks_file.exists()
        assert again.lifecycle.pending.load() == []
        # And the name can be had again, worktree and all.
        session = await again.create(me(), "w", "shell", str(repo), CreateRequest(worktree=""))
        assert session.record.state is State.RUNNING and tree.is_dir()
        await dead(create)

    run(body())


def test_a_create_that_wrote_its_record_keeps_its_worktree(tmp_path: Path) -> None:
    repo = a_repo(tmp_path)

    async def body() -> None:
        host = await Host.started(tmp_path / "d")
        host.scopes.gate = asyncio.Event()  # parked after the record, while systemd starts it
        create = asyncio.create_task(
            host.create(me(), "w", "shell", str(repo), CreateRequest(worktree=""))
        )
        await parked(host, create)
        assert host.lifecycle.pending.load() == []  # the record names the worktree now
        again = host.restart()
        report = await again.core.recover()
        assert report.collected == []
        assert again.registry.get("w").record.worktree == str(
            repo / ".git" / "hostagent-worktrees" / "w"
        )
        assert "hostagent/w" in branches(repo)
        await dead(create)

    run(body())


def test_a_failed_create_leaves_no_note_and_no_worktree(tmp_path: Path) -> None:
    repo = a_repo(tmp_path)

    async def body() -> None:
        host = await Host.started(tmp_path / "d")
        host.scopes.crash_with = RuntimeError("unforeseen")
        with pytest.raises(RuntimeError):
            await host.create(me(), "w", "shell", str(repo), CreateRequest(worktree=""))
        assert host.lifecycle.pending.load() == []
        assert branches(repo) == ["main"]

    run(body())


def test_a_branch_someone_committed_on_is_kept_and_the_note_dropped(tmp_path: Path) -> None:
    repo = a_repo(tmp_path)
    owner = Owner.from_uid(me())

    async def body() -> None:
        worktrees = Worktrees(Helpers())
        tree = await worktrees.plan(owner, str(repo), "w", "", "", str(tmp_path / "trees"))
        await worktrees.make(owner, tree, "")
        (Path(tree.path) / "new").write_text("x\n")
        git(Path(tree.path), "add", "new")
        git(Path(tree.path), "commit", "-qm", "work")
        await worktrees.discard(owner, tree)
        assert not Path(tree.path).exists()
        assert "hostagent/w" in branches(repo)

    run(body())


def test_runtime_files_that_name_no_session_are_swept_and_the_others_kept(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path / "d")
        await host.create(me(), "kept", "shell", str(tmp_path), CreateRequest())
        run_dir = host.registry.runtime_dir(me())
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "gone.hooks.json").write_text("{}")
        os.mkfifo(run_dir / "gone.out")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(run_dir / "gone.sock"))
        (run_dir / "kept.hooks.json").write_text("{}")
        (run_dir / "notes.out").mkdir()  # not a FIFO: not ours
        # Today's layout: a directory of its own, and the owner's link to its socket.
        own = run_dir / "lost.d"
        own.mkdir()
        other = socket.socket(socket.AF_UNIX)
        other.bind(str(own / "tmux.sock"))
        os.mkfifo(own / "out")
        (own / "hooks.json").write_text("{}")
        (run_dir / "lost.sock").symlink_to("lost.d/tmux.sock")
        (run_dir / "odd.d").mkdir()
        (run_dir / "odd.d" / "mine.txt").write_text("the owner's")  # not ours: stays
        leftovers = Leftovers(
            host.registry, PendingCreates(tmp_path / "creating"), host.lifecycle.worktrees
        )
        assert leftovers.sweep_runtime() == 5
        left = sorted(p.name for p in run_dir.iterdir())
        assert "gone.hooks.json" not in left and "gone.out" not in left
        assert "gone.sock" not in left and "lost.d" not in left and "lost.sock" not in left
        assert {"kept.hooks.json", "notes.out", "hooks.fifo", "kept.d", "kept.sock"} <= set(left)
        assert (run_dir / "odd.d" / "mine.txt").exists()
        listener.close()
        other.close()

    run(body())
