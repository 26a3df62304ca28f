"""Nothing forgotten, on a real systemd: a live session keeps its identity (preset,
conversation id, hook token, limits, worktree) whatever happens to its record under
/var/lib/hostagent, because the daemon keeps a second copy of each record under /run, and a
stop and resume afterwards go back into the same conversation."""

from __future__ import annotations

import json

import pytest

from tests.integration.helpers import (
    COPIES_DIR,
    SESSIONS_DIR,
    new_name,
    props,
    record,
    settled,
    until,
    wait_screen,
)
from tests.sandbox import Sandbox

REPO = "/home/alice/ident"
# What a session is, beyond what systemd and tmux can tell of it.
IDENTITY = (
    "uuid",
    "preset",
    "agent_session",
    "hook_token",
    "limits",
    "worktree",
    "branch",
    "argv",
    "cwd",
    "created_at",
)

# Each way the chaos runs damage a record; {path} is the record.
DAMAGE = {
    "empty": ": > {path}",
    "cut-short": "head -c 400 {path} > {path}.cut && mv {path}.cut {path}",
    "garbage": r"printf '\000\377garbage: [\n' > {path}",
    "wrong-name": """sed -i 's/^  "name": .*/  "name": "someone-else",/' {path}""",
    "directory": "rm {path} && mkdir {path}",
    "fifo": "rm {path} && mkfifo {path}",
    "symlink": "rm {path} && ln -s /etc/passwd {path}",
}


def alice(sb: Sandbox, *args: str) -> str:
    return sb.ctl(*args, user="alice", system=True).check().stdout


def repo(sb: Sandbox) -> None:
    if sb.run("test", "-d", f"{REPO}/.git").returncode == 0:
        return
    sb.run(
        "/bin/sh",
        "-c",
        f"git config --global user.email a@example.org && git config --global user.name Alice"
        f" && mkdir -p {REPO} && cd {REPO} && git init -q -b main && echo hi > README"
        " && git add . && git commit -qm start",
        user="alice",
    ).check()


def talking_session(sb: Sandbox) -> tuple[str, dict]:
    """A stand-in agent in its own worktree, under a memory limit, with one message in its
    conversation: everything a record holds that a scope does not."""
    repo(sb)
    name = new_name()
    alice(
        sb,
        "new",
        "--preset",
        "demo-agent",
        "--name",
        name,
        "--cwd",
        REPO,
        "--worktree",
        "-p",
        "MemoryMax=300M",
    )
    wait_screen(sb, name, "> ")
    alice(sb, "send", name, "remember me")
    wait_screen(sb, name, "You said: remember me")
    before = record(sb, name)
    assert before and before["agent_session"] and before["hook_token"] and before["worktree"]
    return name, before


def same_session_resumed(sb: Sandbox, name: str, before: dict) -> None:
    """The identity as it was, the session running, and a stop and resume into the same
    conversation (the stand-in shows its earlier message)."""
    after = record(sb, name)
    assert after is not None
    assert {k: after[k] for k in IDENTITY} == {k: before[k] for k in IDENTITY}
    assert settled(sb, name) == ("running", "active", "running")
    p = props(sb, name)
    assert (p["Preset"], p["AgentSessionId"]) == ("demo-agent", before["agent_session"])
    assert "MemoryMax=300M" in alice(sb, "status", name)
    alice(sb, "stop", name)
    alice(sb, "resume", name)
    command = props(sb, name)["Command"]
    assert ["--resume", before["agent_session"]] in [
        command[i : i + 2] for i in range(len(command))
    ]
    wait_screen(sb, name, "[user] remember me")
    alice(sb, "rm", "--force", name)


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_record_of_a_live_session_is_restored_from_its_copy(
    sb: Sandbox, damage: str
) -> None:
    name, before = talking_session(sb)
    sb.daemon_stop()
    sb.sh(damage.format(path=f"{SESSIONS_DIR}/{name}.yaml")).check()
    sb.daemon_start()
    journal = sb.journal(this_run=True)
    assert f"session '{name}': its record was damaged; restored from its copy" in journal
    assert "1 records restored from their copies" in journal
    # Set aside, and doctor lists it with how to restore one.
    aside = json.loads(sb.ctl("--json", "doctor").stdout)["set_aside_records"]
    assert any(f.startswith(f"{name}.yaml.") for f in aside), aside
    assert "damaged record(s) set aside in /var/lib/hostagent/corrupt" in sb.ctl("doctor").stdout
    same_session_resumed(sb, name, before)


def test_the_state_directory_removed_under_the_daemon_loses_nothing(sb: Sandbox) -> None:
    """Removed while the daemon runs: the next write makes it again with every record the
    daemon holds (a stopped session's too), and a restart finds them all."""
    name, before = talking_session(sb)
    stopped = new_name()
    alice(sb, "new", "--preset", "shell", "--name", stopped, "-p", "TasksMax=77")
    alice(sb, "stop", stopped)
    sb.run("rm", "-rf", "/var/lib/hostagent").check()
    third = new_name()
    alice(sb, "new", "--preset", "shell", "--name", third)  # no "cannot be written"
    assert "removed or replaced while hostagent ran" in sb.journal(lines=20)
    for each in (name, stopped, third):
        assert record(sb, each) is not None, each
    sb.daemon_restart()
    assert props(sb, stopped)["State"] == "stopped"
    assert "TasksMax=77" in sb.ctl("status", stopped, user="alice", system=True).stdout
    alice(sb, "rm", stopped)
    alice(sb, "rm", third)
    same_session_resumed(sb, name, before)


def test_a_restart_with_both_record_and_copy_gone_adopts_the_scope_as_before(
    sb: Sandbox,
) -> None:
    """The copy lives on tmpfs and goes with a reboot; with both lost the scope is still
    adopted (as a shell), never stopped."""
    name, _ = talking_session(sb)
    sb.daemon_stop()
    sb.run("rm", f"{SESSIONS_DIR}/{name}.yaml", f"{COPIES_DIR}/{name}.yaml").check()
    sb.daemon_start()
    assert f"adopted it as session '{name}'" in sb.journal(this_run=True)
    assert props(sb, name)["State"] == "running"
    alice(sb, "rm", "--force", name)


def test_a_removed_hooks_fifo_is_made_again_and_no_hook_is_lost(sb: Sandbox) -> None:
    """The owner's hooks FIFO removed under a running session (a cleanup of /run): the
    session, kept apart from its siblings, still sees the FIFO its start found, and the daemon
    still reads it; her next start makes the FIFO again, and the first session's hooks, which
    still go to the one it sees, arrive all the same."""
    name = new_name()
    alice(sb, "new", "--preset", "demo-agent", "--name", name, "--cwd", "/tmp")
    wait_screen(sb, name, "> ")
    fifo = f"/run/hostagent/{sb.uid('alice')}/hooks.fifo"
    sb.run("rm", fifo).check()
    alice(sb, "send", name, "are you there")
    wait_screen(sb, name, "You said: are you there")
    assert "hook" in alice(sb, "explain", name)
    other = new_name()
    alice(sb, "new", "--preset", "demo-agent", "--name", other, "--cwd", "/tmp")
    until(lambda: sb.run("test", "-p", fifo).returncode == 0, "the hooks FIFO made again")
    assert "removed or replaced; making it again" in sb.journal(lines=40)
    alice(sb, "send", name, "still there")
    wait_screen(sb, name, "You said: still there")
    until(lambda: "idle" in alice(sb, "status", name), f"{name} idle after its turn")
    explained = alice(sb, "explain", name)
    assert "hook" in explained, explained
    alice(sb, "rm", other)
    alice(sb, "rm", name)
