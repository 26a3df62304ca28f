"""Faults below the daemon, on a real systemd: torn records, a full state disk, PID 1
re-executing, a restart in the middle of the auto policy. Nothing is lost and nothing is stuck:
afterwards the record, the unit and the bus tell the same story, and every session can still be
stopped, resumed and removed."""

from __future__ import annotations

import subprocess

import pytest

from hostagent.daemon.host import checkpoint
from tests.integration.helpers import (
    COPIES_DIR,
    SESSIONS_DIR,
    create,
    props,
    record,
    settled,
    unit_state,
    until,
    views,
)
from tests.sandbox import Sandbox

CONFIG = "/etc/hostagent/hostagent.yaml"


def config(sb: Sandbox, text: str) -> None:
    sb.sh(f"mkdir -p /etc/hostagent && printf '{text}' > {CONFIG}").check()


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=90)
    return proc.returncode, err


@pytest.mark.parametrize("orphans", ["default", "stop"])
def test_a_torn_record_costs_no_live_session(sb: Sandbox, orphans: str) -> None:
    """Cut short, the record no longer parses (a YAML one written by an older hostagent could
    still parse, and fails its checksum: tests/unit/test_store.py); it goes to corrupt/. With
    its copy under /run lost too (test_identity.py has the copy restore it), the session's
    running scope is adopted for its owner, even where the admin opted into stopping orphans."""
    sb.run("mkdir", "-p", "/home/alice/torn", user="alice").check()
    name = create(sb, "shell", user="alice", cwd="/home/alice/torn")
    try:
        sb.daemon_stop()
        if orphans == "stop":
            config(sb, "recovery:\\n  orphans: stop\\n")
        path = f"{SESSIONS_DIR}/{name}.yaml"
        sb.sh(f"head -c 400 {path} > {path}.cut && mv {path}.cut {path}").check()
        sb.run("rm", f"{COPIES_DIR}/{name}.yaml").check()
        sb.daemon_start()
        journal = sb.journal(this_run=True)
        assert f"Record {path} is unusable (" in journal
        assert f"adopted it as session '{name}'" in journal
        p = props(sb, name)
        assert (p["State"], p["Owner"], p["Cwd"]) == (
            "running",
            sb.uid("alice"),
            "/home/alice/torn",
        )
        assert settled(sb, name) == ("running", "active", "running")
        sb.ctl("stop", name, user="alice", system=True).check()
        sb.ctl("resume", name, user="alice", system=True).check()
        assert settled(sb, name) == ("running", "active", "running")
    finally:
        sb.run("rm", "-f", CONFIG)
        sb.ctl("rm", name)
        sb.daemon_restart()


def test_a_record_and_its_copy_removed_while_the_daemon_runs_are_not_lost(sb: Sandbox) -> None:
    """The daemon holds the whole record: both files removed under it, a restart (its stop
    writes them again) finds the session as it was, not a bare shell adopted from its scope."""
    name = create(sb, "demo-agent", user="alice")
    try:
        before = props(sb, name)
        sb.run("rm", f"{SESSIONS_DIR}/{name}.yaml", f"{COPIES_DIR}/{name}.yaml").check()
        sb.daemon_restart()
        after = props(sb, name)
        kept = ("Uuid", "Preset", "AgentSessionId", "Owner", "Cwd")
        assert [after[k] for k in kept] == [before[k] for k in kept]
        assert f"adopted it as session '{name}'" not in sb.journal(lines=40)
    finally:
        sb.ctl("rm", name)


def test_the_copies_directory_removed_while_the_daemon_runs_is_made_again(sb: Sandbox) -> None:
    """The second copy of every record is kept again from the next write on (or within 30 s
    without one): a torn record then still has its copy."""
    name = create(sb, "shell", user="alice")
    try:
        sb.run("rm", "-rf", COPIES_DIR).check()
        other = create(sb, "shell", user="alice")  # a write
        assert record(sb, name) is not None
        copies = sb.run("ls", COPIES_DIR).check().stdout.split()
        assert f"{other}.yaml" in copies
        sb.ctl("rm", other)
    finally:
        sb.ctl("rm", name)


def test_a_full_state_disk_is_a_named_error_and_changes_nothing(fresh_sandbox: Sandbox) -> None:
    sb = fresh_sandbox
    sb.sh("mkdir -p /var/lib/hostagent && mount -t tmpfs -o size=256k tmpfs /var/lib/hostagent")
    sb.daemon_start()
    name = create(sb, "shell")
    sb.sh("dd if=/dev/zero of=/var/lib/hostagent/filler bs=4k 2>/dev/null; true").check()
    for argv in (["stop", name], ["rm", name], ["new", "--preset", "shell", "--name", "more"]):
        refused = sb.ctl(*argv)
        assert refused.returncode == 1, argv
        assert "cannot be written (No space left on device)" in refused.stderr, refused.stderr
        assert "free space in /var/lib/hostagent" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) <= 2, refused.stderr  # message + hint
    assert settled(sb, name) == ("running", "active", "running")
    assert unit_state(sb, "more") == "" and record(sb, "more") is None
    assert sb.ctl("status", "more").returncode == 4
    assert not sb.run("sh", "-c", f"ls -A {SESSIONS_DIR} | grep tmp").stdout
    sb.run("rm", "/var/lib/hostagent/filler").check()
    sb.ctl("stop", name).check()
    assert settled(sb, name) == ("stopped", "", "stopped")
    sb.ctl("rm", name).check()
    assert settled(sb, name) == (None, "", None)


def test_a_stop_across_a_pid1_reexec_finishes_and_the_daemon_keeps_working(sb: Sandbox) -> None:
    name = create(sb, "shell")
    with sb.park(checkpoint.STOP_RECORDED) as parked:
        stop = sb.popen("hostagentctl", "--system", "stop", name)
        parked.wait()
        sb.run("systemctl", "daemon-reexec").check()
        parked.release()
    assert finish(stop)[0] == 0
    assert settled(sb, name) == ("stopped", "", "stopped")
    # The re-executed manager still tells the daemon about jobs and units.
    sb.ctl("resume", name).check()
    assert settled(sb, name) == ("running", "active", "running")
    sb.run("systemctl", "stop", f"hostagent-{name}.scope").check()
    waited = sb.ctl("wait", name, "--for", "exited", "--timeout", "10")
    assert waited.returncode == 0, waited.stderr
    sb.ctl("rm", name).check()


def test_auto_finishes_its_resumes_after_a_restart_in_the_middle(fresh_sandbox: Sandbox) -> None:
    sb = fresh_sandbox
    config(sb, "recovery:\\n  policy: auto\\n  max_parallel: 1\\n  stagger_sec: 0.1\\n")
    sb.daemon_start()
    names = [create(sb, "shell", name=f"auto{i}") for i in range(4)]
    sb.reboot()
    with sb.park(checkpoint.SPAWN_STARTED) as parked:
        start = sb.popen("systemctl", "start", "hostagent.service")
        parked.wait()  # the first resume's scope runs; the other three wait for the slot
        sb.daemon_kill()
    finish(start)
    assert sum(record(sb, n)["state"] == "dormant" for n in names) == 3
    sb.daemon_start()
    # The three left wait their turn (one at a time, staggered): dormant agrees too, so wait
    # for each to run rather than for its views to agree.
    for name in names:
        until(lambda n=name: views(sb, n) == ("running", "active", "running"), f"{name} runs")
    assert not any(record(sb, n)["auto_resume"] for n in names)


@pytest.mark.parametrize(
    ("verb", "point", "after"),
    [
        ("new", checkpoint.CREATE_RECORDED, "failed"),
        ("resume", checkpoint.RESUME_RECORDED, "dormant"),
    ],
    ids=["create", "resume"],
)
def test_a_bus_restarted_mid_call_is_a_named_error_and_loses_nothing(
    fresh_sandbox: Sandbox, verb: str, point: str, after: str
) -> None:
    """dbus restarted while a call waits at its checkpoint: hostagentctl says the bus was
    lost in one line (no traceback), the daemon leaves without a stray one, and at its next start
    the session is whole: a create that never ran failed, a resume's session dormant."""
    sb = fresh_sandbox
    sb.daemon_start()
    name = "bus-gone"
    if verb == "resume":
        create(sb, "shell", name=name)
        sb.ctl("stop", name).check()
    args = ["new", "--preset", "shell", "--name", name] if verb == "new" else [verb, name]
    with sb.park(point, name) as parked:
        proc = sb.popen("hostagentctl", "--system", *args)
        parked.wait()
        sb.run("systemctl", "restart", "dbus.service").check()
        code, err = finish(proc)
    assert code == 1 and "The bus connection was lost during" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    sb.run("systemctl", "reset-failed", "hostagent.service")
    sb.daemon_start()
    assert "Task exception was never retrieved" not in sb.journal(lines=200)
    assert settled(sb, name) == (after, "", after)
    sb.ctl("resume", name).check()
    assert settled(sb, name) == ("running", "active", "running")
