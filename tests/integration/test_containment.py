"""A session whose processes leave its scope, or outlive its agent (as Codex's shared server
did), is flagged: the Containment property says what, and the journal has a line."""

from __future__ import annotations

import re

from tests.integration.busclient import wait_for_property, with_client
from tests.integration.helpers import machine_pid, new_name, props
from tests.sandbox import Sandbox

# The guard looks at running sessions every 30 s; an agent's exit is looked at at once.
GUARD_WAIT = 90.0


def test_processes_left_behind_by_the_agent_are_flagged_and_stopped(sandbox: Sandbox) -> None:
    sb = sandbox
    name = new_name()
    # A server started in the background and left running, then the agent exits.
    agent = "setsid sleep 600 & echo $! > /tmp/$0.server; echo ready; read line"
    sb.ctl("new", "--name", name, "--replace-command", "--", "sh", "-c", agent, name).check()
    assert sb.screen_showing(name, "ready")
    server = int(sb.run("cat", f"/tmp/{name}.server").check().stdout)

    async def run(client):  # type: ignore[no-untyped-def]
        return await wait_for_property(
            client,
            name,
            "Containment",
            bool,
            lambda: sb.ctl("send", name, "bye").check(),
            GUARD_WAIT,
        )

    seen = with_client(sb, run)
    assert "1 process left behind by the agent: sleep" in seen[-1]
    after = props(sb, name)
    assert after["State"] == "stopped"
    assert after["Containment"] == seen[-1]
    assert f"session '{name}': 1 process left behind by the agent" in sb.journal()
    # The scope's stop ended it.
    assert sb.run("kill", "-0", str(server)).returncode != 0
    sb.ctl("rm", name).check()


def test_a_process_that_moves_to_another_cgroup_is_flagged(sandbox: Sandbox) -> None:
    sb = sandbox
    name = new_name()
    escapee = f"escapee-{name}.service"
    # A child of the agent's, moved into another unit's cgroup (as root can, from anywhere).
    sb.run("systemd-run", "--quiet", f"--unit={escapee}", "sleep", "600").check()
    agent = "sleep 600 & echo child=$!; exec sleep 600"
    sb.ctl("new", "--name", name, "--replace-command", "--", "sh", "-c", agent).check()
    try:
        number = re.search(r"child=(\d+)", sb.screen_showing(name, "child="))
        assert number is not None
        cgroup = sb.run("systemctl", "show", "-P", "ControlGroup", escapee).check().stdout.strip()
        procs = sb.cgroup_file(cgroup, "systemd", "cgroup.procs")
        sb.sh(f"echo {machine_pid(sb, name, number[1])} > {procs}").check()

        async def run(client):  # type: ignore[no-untyped-def]
            return await wait_for_property(
                client, name, "Containment", bool, lambda: None, GUARD_WAIT, already=True
            )

        seen = with_client(sb, run)
        assert "of the agent left its scope for /system.slice/" in seen[-1], seen
        assert escapee in seen[-1]
        assert f"session '{name}': 1 process of the agent left its scope" in sb.journal()
    finally:
        sb.run("systemctl", "stop", escapee)
        sb.ctl("rm", name)


# A session service that never takes its name: whoever asks for it waits on the bus, so the
# asker is still in its scope when the bus daemon's line about it is read.
NEVER = "org.hostagent.TestNever"
NEVER_SERVICE = f"[D-BUS Service]\nName={NEVER}\nExec=/bin/sleep infinity\n"
NEVER_SERVICE += "SystemdService=hostagent-test-never.service\n"
NEVER_UNIT = f"[Service]\nType=dbus\nBusName={NEVER}\nExecStart=/bin/sleep infinity\n"


def test_a_service_the_agent_has_its_session_bus_start_is_flagged(sandbox: Sandbox) -> None:
    sb = sandbox
    sb.run("tee", f"/usr/share/dbus-1/services/{NEVER}.service", input=NEVER_SERVICE).check()
    sb.run("tee", "/usr/lib/systemd/user/hostagent-test-never.service", input=NEVER_UNIT).check()
    sb.run("systemctl", "--user", "-M", "alice@", "daemon-reload").check()
    bus = sb.user_env("alice")["DBUS_SESSION_BUS_ADDRESS"]
    asker = (
        "echo ready; read line; dbus-send --session --print-reply --reply-timeout=600000 "
        f"--dest={NEVER} /org/hostagent/TestNever {NEVER}.Ping"
    )
    name = new_name()
    sb.ctl(
        "new",
        "--name",
        name,
        "-e",
        f"DBUS_SESSION_BUS_ADDRESS={bus}",
        "--replace-command",
        "--",
        "sh",
        "-c",
        asker,
        user="alice",
        system=True,
    ).check()
    try:
        assert sb.screen_showing(name, "ready", user="alice")

        async def run(client):  # type: ignore[no-untyped-def]
            return await wait_for_property(
                client,
                name,
                "Containment",
                bool,
                lambda: sb.ctl("send", name, "go", user="alice", system=True).check(),
                GUARD_WAIT,
            )

        seen = with_client(sb, run)
        assert seen[-1] == (
            f"the agent had the owner's session bus start {NEVER} "
            "(hostagent-test-never.service), which runs outside the session's scope and "
            "outlives it"
        )
        assert f"session '{name}': the agent had the owner's session bus start" in sb.journal()
        # It outlives the session indeed: the stop ends the scope, not the service.
        sb.ctl("stop", name, user="alice", system=True).check()
        state = sb.run(
            "systemctl", "--user", "-M", "alice@", "is-active", "hostagent-test-never.service"
        ).stdout.strip()
        assert state in ("active", "activating"), state
    finally:
        sb.run("systemctl", "--user", "-M", "alice@", "stop", "hostagent-test-never.service")
        sb.ctl("stop", name, user="alice", system=True)
        sb.ctl("rm", name, user="alice", system=True)
