"""The sandbox itself: a real systemd that starts scopes, reboots with a new boot id and keeps
its disk, and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

from tests.sandbox import Sandbox
from tests.sandbox_host import STATE_ROOT, is_mount


def test_transient_scope_shows_in_list_units(sandbox: Sandbox) -> None:
    # systemd-run returns when sh exits; the backgrounded sleep keeps the scope alive.
    sandbox.run(
        "systemd-run",
        "--scope",
        "--unit=probe-scope",
        "--collect",
        "--quiet",
        "/bin/sh",
        "-c",
        "sleep 600 >/dev/null 2>&1 &",
    ).check()
    try:
        units = sandbox.run("systemctl", "list-units", "--no-legend", "probe-scope.scope").check()
        assert "probe-scope.scope" in units.stdout
        assert "active" in units.stdout
    finally:
        sandbox.run("systemctl", "stop", "probe-scope.scope")


def test_users_and_bus(sandbox: Sandbox) -> None:
    out = sandbox.run("id", "-un", user="alice").check().stdout.strip()
    assert out == "alice"
    assert Path(sandbox.bus_address.removeprefix("unix:path=")).exists()
    assert sandbox.run("systemctl", "is-active", "polkit").returncode in (0, 3)


def test_reboot_gives_new_boot_id_and_keeps_state(fresh_sandbox: Sandbox) -> None:
    sb = fresh_sandbox
    before = sb.boot_id()
    sb.run("sh", "-c", "mkdir -p /var/lib/probe && echo kept > /var/lib/probe/file").check()
    sb.reboot()
    assert sb.boot_id() != before
    assert sb.run("cat", "/var/lib/probe/file").check().stdout.strip() == "kept"


def test_destroy_leaves_nothing_behind() -> None:
    sb = Sandbox()
    sb.boot()
    nspawn = sb.proc.pid if sb.proc else 0
    sb.destroy()
    assert not Path(f"/proc/{nspawn}").exists()
    assert not is_mount(sb.root)
    assert not sb.dir.exists()


def test_a_dead_runs_sandbox_is_reaped() -> None:
    sb = Sandbox(name="reap-probe")
    sb.boot()
    (sb.dir / "owner.pid").write_text("999999999")  # an owner that no longer exists
    orphan, sb.proc = sb.proc, None  # forget it, as a killed test run would
    assert orphan is not None
    other = Sandbox()
    try:
        other.boot()
        assert not (STATE_ROOT / "reap-probe").exists()
        assert orphan.wait(timeout=10) != 0  # the reaper killed it
    finally:
        other.destroy()


def test_two_sandboxes_at_once_each_have_a_cgroup_tree_of_their_own(sandbox: Sandbox) -> None:
    """Tests boot a machine of their own beside the shared one (and dev/test runs two lanes of
    them): a unit started in one must not appear in the other's cgroups, where its systemd
    would stop, kill or remove it as its own."""
    with Sandbox() as other:
        other.run("systemd-run", "--unit=only-here", "--collect", "--quiet", "sleep", "600").check()
        try:
            other.wait_unit_state("only-here.service", ("active",))
            here = other.run(
                "cat",
                other.cgroup_file("/system.slice/only-here.service", "systemd", "cgroup.procs"),
            )
            assert here.check().stdout.split(), "the unit has its process in its own machine"
            seen = (
                sandbox.run("ls", sandbox.cgroup_file("/system.slice", "systemd", ""))
                .check()
                .stdout.split()
            )
            assert "only-here.service" not in seen
        finally:
            other.run("systemctl", "stop", "only-here.service")
