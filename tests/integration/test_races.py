"""Races and crashes, driven deterministically by parking the daemon at a checkpoint
(hostagent/daemon/host/checkpoint.py) on a real systemd.

After each, the sidecar, the unit and the D-Bus object must tell the same story.
"""

from __future__ import annotations

import subprocess

import pytest

from hostagent.daemon.host import checkpoint
from tests.integration.helpers import (
    create,
    new_name,
    props,
    record,
    settled,
    unit_state,
    until,
)
from tests.sandbox import Sandbox


def background_ctl(sb: Sandbox, *args: str) -> subprocess.Popen:
    return sb.popen("hostagentctl", "--system", *args)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def stopped_session(sb: Sandbox) -> str:
    name = create(sb, "shell")
    sb.ctl("stop", name).check()
    return name


def during_resume(sb: Sandbox, name: str, *other: str) -> tuple[int, int]:
    """Resume name, park it with its scope running, run hostagentctl *other meanwhile, and let
    both finish; their exit codes. The other call is known to have reached the daemon: it is
    parked at the session lock that the resume holds."""
    with sb.park(checkpoint.SPAWN_STARTED) as resume_parked:
        resume = background_ctl(sb, "resume", name)
        resume_parked.wait()
        assert unit_state(sb, name) == "active"  # the scope already runs mid-resume
        with sb.park(checkpoint.LOCK_WAIT) as other_parked:
            proc = background_ctl(sb, *other)
            other_parked.wait()
            other_parked.release()
        resume_parked.release()
    return finish(resume)[0], finish(proc)[0]


def test_kill_during_resume_waits_for_it_and_leaves_no_ghost(sb: Sandbox) -> None:
    name = stopped_session(sb)
    assert during_resume(sb, name, "kill", "--whom", "all", name) == (0, 0)
    assert settled(sb, name) == ("stopped", "", "stopped")
    sb.ctl("rm", name).check()


def test_two_resumes_at_once_one_wins_the_other_gets_already_running(sb: Sandbox) -> None:
    name = stopped_session(sb)
    with sb.park(checkpoint.SPAWN_STARTED) as parked:
        first = background_ctl(sb, "resume", name)
        parked.wait()
        second = sb.run(
            "busctl",
            "call",
            "org.hostagent.HostAgent1",
            "/org/hostagent/HostAgent1",
            "org.hostagent.HostAgent1.Manager",
            "ResumeSession",
            "s",
            name,
        )
        idempotent = sb.ctl("resume", name)  # hostagentctl, as systemctl start: nothing to do
        parked.release()
    assert second.returncode != 0
    assert "is already starting" in second.stderr
    assert (idempotent.returncode, idempotent.stderr) == (0, "")
    assert finish(first)[0] == 0
    assert settled(sb, name) == ("running", "active", "running")
    sb.ctl("rm", name).check()


def test_remove_during_resume_leaves_neither_record_nor_scope(sb: Sandbox) -> None:
    name = stopped_session(sb)
    assert during_resume(sb, name, "rm", name) == (0, 0)
    assert settled(sb, name) == (None, "", None)


def scope_commands(sb: Sandbox, name: str) -> list[str]:
    """The command names of every process in the session's scope."""
    cgroup = sb.run("systemctl", "show", "-P", "ControlGroup", f"hostagent-{name}.scope")
    procs = sb.run("cat", sb.cgroup_file(cgroup.stdout.strip(), "systemd", "cgroup.procs"))
    return [sb.run("cat", f"/proc/{pid}/comm").stdout.strip() for pid in procs.stdout.split()]


def test_a_new_sessions_record_is_written_while_its_scope_starts_before_anything_runs(
    sb: Sandbox,
) -> None:
    """The first record is written once systemd has the scope's start job, and before tmux
    is let go: parked right after that write, the record says starting, the scope comes up
    holding only what holds the start (the init of the session's PID namespace, which runs
    the shim once let go), and nothing of the session (no tmux) runs until the create goes
    on."""
    name = new_name()
    with sb.park(checkpoint.CREATE_RECORDED) as parked:
        proc = background_ctl(sb, "new", "--preset", "shell", "--name", name)
        parked.wait()
        assert (record(sb, name) or {}).get("state") == "starting"
        until(lambda: unit_state(sb, name) == "active", "the scope runs while the daemon waits")
        assert scope_commands(sb, name) == ["hostagent-init"]
        parked.release()
    assert finish(proc)[0] == 0
    assert settled(sb, name) == ("running", "active", "running")
    assert any(command.startswith("tmux") for command in scope_commands(sb, name))
    sb.ctl("rm", name).check()


# (operation, point, state after the daemon restarts)
CRASHES = [
    ("create", checkpoint.CREATE_RECORDED, "failed"),  # it never ran: nothing to resume into
    ("create", checkpoint.SPAWN_STARTED, "running"),
    ("stop", checkpoint.STOP_RECORDED, "running"),
    ("stop", checkpoint.STOP_DONE, "stopped"),
    ("resume", checkpoint.RESUME_RECORDED, "dormant"),
    ("resume", checkpoint.SPAWN_STARTED, "running"),
    ("rm", checkpoint.STOP_RECORDED, "running"),
    ("rm", checkpoint.REMOVE_STOPPED, "stopped"),
]


@pytest.mark.parametrize(("op", "point", "after"), CRASHES, ids=[f"{o}@{p}" for o, p, _ in CRASHES])
def test_daemon_killed_at_each_step_loses_nothing(
    sb: Sandbox, op: str, point: str, after: str
) -> None:
    name = f"crash-{op}-{point}"[:40]
    bystander = create(sb, "shell")
    if op in ("stop", "rm"):
        create(sb, "shell", name=name)
    elif op == "resume":
        create(sb, "shell", name=name)
        sb.ctl("stop", name).check()
    args = ["new", "--preset", "shell", "--name", name] if op == "create" else [op, name]
    try:
        with sb.park(point) as parked:
            proc = background_ctl(sb, *args)
            parked.wait()
            sb.daemon_kill()
        code, _ = finish(proc)
        assert code != 0  # the caller learns that its call did not complete
        sb.daemon_start()
        assert "is unusable" not in sb.journal(lines=30)
        assert record(sb, name) is not None  # nothing is lost, not even a half-done create
        assert settled(sb, name) == (after, "active" if after == "running" else "", after)
        assert settled(sb, bystander) == ("running", "active", "running")
        if after != "running":
            sb.ctl("resume", name).check()
            assert props(sb, name)["State"] == "running"
    finally:
        sb.ctl("rm", name, bystander)


def test_a_unit_that_ends_while_recovery_runs_is_reconciled(sb: Sandbox) -> None:
    """A unit signal that arrives while recovery works is queued and drained after it, not
    dropped: a session whose scope ends between the listing of the units and its adoption
    ends up stopped, not running with no unit."""
    name = create(sb, "shell")
    bystander = create(sb, "shell")
    try:
        sb.daemon_stop()
        with sb.park(checkpoint.RECOVERY_LISTED) as parked:
            start = sb.popen("systemctl", "start", "hostagent.service")
            parked.wait()
            sb.run("systemctl", "stop", f"hostagent-{name}.scope").check()
            parked.release()
        assert finish(start)[0] == 0
        # Seen through the daemon alone: asking systemd about the gone unit (systemctl show)
        # would load and drop it again, a fresh UnitRemoved that hides a lost signal.
        waited = sb.ctl("wait", name, "--for", "exited", "--timeout", "10")
        assert (waited.returncode, waited.stdout.strip()) == (0, "exited"), waited.stderr
        assert record(sb, name)["state"] == "stopped"
        assert settled(sb, name) == ("stopped", "", "stopped")
        assert settled(sb, bystander) == ("running", "active", "running")
    finally:
        sb.ctl("rm", name, bystander)
