"""A session's own directory in its owner's runtime directory: where its files are, a session
an older hostagent started found where it left them, the directory and the owner's link made
over whatever the owner put there, and what a sandboxed session is shown of it all."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from hostagent import sandbox
from hostagent.daemon.host import namespace, sandboxing
from hostagent.daemon.host.runtimedir import prepare_session_dir, remove_session_dir
from hostagent.daemon.state.paths import SessionPaths
from hostagent.identity import Owner


def owner() -> Owner:
    return Owner.from_uid(os.getuid())


def test_a_new_sessions_files_are_in_its_own_directory(tmp_path: Path) -> None:
    paths = SessionPaths.found(tmp_path, "a")
    assert not paths.legacy
    assert (paths.directory, paths.socket) == (tmp_path / "a.d", tmp_path / "a.d" / "tmux.sock")
    assert (paths.fifo, paths.hooks_file) == (tmp_path / "a.d/out", tmp_path / "a.d/hooks.json")


@pytest.mark.parametrize(
    ("there", "legacy"),
    [("socket", True), ("link", False), ("file", False), ("nothing", False)],
)
def test_only_a_live_socket_side_by_side_is_an_older_hostagents(
    tmp_path: Path, there: str, legacy: bool
) -> None:
    where = tmp_path / "a.sock"
    listener = socket.socket(socket.AF_UNIX)
    if there == "socket":
        listener.bind(str(where))
    elif there == "link":
        where.symlink_to("a.d/tmux.sock")
    elif there == "file":
        where.write_text("")
    paths = SessionPaths.found(tmp_path, "a")
    listener.close()
    assert paths.legacy is legacy
    if legacy:
        assert (paths.socket, paths.fifo) == (where, tmp_path / "a.out")


def test_the_directory_and_the_owners_link_are_made_over_what_stands_there(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    paths = SessionPaths.of(run, "a")
    (run / "a.d").write_text("a file where the directory goes")
    (run / "a.sock").symlink_to("/etc/passwd")
    prepare_session_dir(paths, "a", owner())
    assert stat.S_IMODE(os.lstat(run / "a.d").st_mode) == 0o700
    assert (run / "a.d").is_dir() and not (run / "a.d").is_symlink()
    assert os.readlink(run / "a.sock") == "a.d/tmux.sock"
    assert Path("/etc/passwd").exists()
    prepare_session_dir(paths, "a", owner())  # again, as every start does: nothing changes
    assert os.readlink(run / "a.sock") == "a.d/tmux.sock"
    remove_session_dir(paths, "a")
    assert not (run / "a.d").exists() and not (run / "a.sock").is_symlink()


def test_a_sandboxed_session_is_shown_its_own_entries_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "hostagent"
    run = root / "1001"
    run.mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "hooks" / "a.json").write_text("{}")
    who = Owner(1001, 1001, "alice", "/home/alice", "/bin/sh", ())
    veils = sandboxing.apart(SessionPaths.of(run, "a"), who)
    assert veils == [
        namespace.Veil(
            str(run),
            1001,
            1001,
            0o700,
            keep=("a.d", "hooks.fifo"),
            links=(("a.sock", "a.d/tmux.sock"),),
        ),
        namespace.Veil(str(root / "hooks"), 0, 0, 0o755, keep=("a.json",)),
    ]
    # Without a hooks file of its own the root-owned directory is shown empty; a session an
    # older hostagent started has no directory of its own to be shown.
    assert sandboxing.apart(SessionPaths.of(run, "b"), who)[1].keep == ()
    (run / "c.sock").touch()
    legacy = SessionPaths(
        run, run, run / "c.sock", run / "c.out", run / "c.hooks.json", run / "c.mcp.json"
    )
    assert sandboxing.apart(legacy, who) == []


@pytest.mark.parametrize("system", [True, False], ids=["system", "user"])
def test_a_session_with_no_word_is_kept_apart_by_the_system_daemon_alone(
    tmp_path: Path, system: bool
) -> None:
    """No word: on the system daemon, a PID namespace of its own, the same veils as a
    sandboxed session and a Landlock domain, no mounts and no-new-privileges left off (sudo
    works there); on the user daemon,
    nothing (it would take a user namespace or no-new-privileges)."""
    run = tmp_path / "hostagent" / "1001"
    run.mkdir(parents=True)
    who = Owner(1001, 1001, "alice", "/home/alice", "/bin/sh", ())
    paths = SessionPaths.of(run, "a")
    plan = sandboxing.apart_plan(paths, who, system)
    if system == (os.geteuid() == 0):  # what a create with no word gets from this daemon
        ctx = sandboxing.context(who, "/home/alice", "")
        assert sandboxing.session_plan(sandbox.read([]), ctx, who, "", paths) == plan
    if not system:
        assert plan is None
        return
    veils = tuple(sandboxing.apart(paths, who))
    abi = namespace.landlock_abi()
    assert plan == namespace.Plan((), sandboxing.INACCESSIBLE_ROOT, False, abi, veils, True)
    assert plan.veils[0].keep == ("a.d", "hooks.fifo")
