"""Recovery at daemon start on a real systemd: reboots, restored state dirs, a killed daemon,
bad records and the auto policy."""

from __future__ import annotations

import asyncio
import time

import pytest
from dbus_fast import Message, MessageType

from hostagent import SESSION_INTERFACE
from hostagent.client.library import Client
from tests.integration.busclient import add_match
from tests.integration.helpers import (
    COPIES_DIR,
    SESSIONS_DIR,
    agent_process,
    create,
    machine_pid,
    props,
    record,
    rewrite_record,
    settled,
    until,
    wait_screen,
)
from tests.sandbox import Sandbox

pytestmark = pytest.mark.core  # The core, run again on Debian 13 (dev/test).


def alice_ctl(sb: Sandbox, *args: str) -> None:
    sb.ctl(*args, user="alice", system=True).check()


HOLD_UNIT = """[Unit]
Description=holds the shutdown while the daemon still runs
After=hostagent.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/mkfifo -m 0600 /run/release-shutdown
ExecStop=/bin/sh -c 'read line < /run/release-shutdown'
TimeoutStopSec=120
"""


def test_a_session_that_ends_with_the_shutdown_is_dormant_after_it(fresh_sandbox: Sandbox) -> None:
    """The daemon is stopped before any session's scope, so a shutdown never reads as the
    sessions' own end; and an end it does hear while the machine goes down (a scope an older
    daemon started, without that order) is left for recovery. The shutdown is parked, with the
    daemon still up, by a unit ordered to stop before it; then the agent is hung up on."""
    sb = fresh_sandbox
    sb.daemon_start()
    create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="alice", name="held")
    wait_screen(sb, "held", "> ")
    before = sb.run("systemctl", "show", "-P", "Before", "hostagent-held.scope").check().stdout
    assert "hostagent.service" in before.split()
    sb.run("sh", "-c", f"cat > /run/systemd/system/hold.service <<'EOF'\n{HOLD_UNIT}EOF").check()
    sb.run("systemctl", "daemon-reload").check()
    sb.run("systemctl", "start", "hold.service").check()

    sb.run("systemctl", "poweroff", "--no-block").check()
    until(
        lambda: sb.run("systemctl", "is-system-running").stdout.strip() == "stopping",
        "the machine is shutting down",
    )
    assert sb.run("systemctl", "is-active", "hostagent").stdout.strip() == "active"
    sb.run("systemctl", "kill", "--kill-whom=all", "--signal=SIGHUP", "hostagent-held.scope")
    until(
        lambda: (
            "ends with the system"
            in sb.run("journalctl", "-u", "hostagent", "-g", "held", "-o", "cat").stdout
        ),
        "the daemon hears the end and leaves it for recovery",
    )
    assert record(sb, "held")["state"] == "running"
    sb.run("sh", "-c", "echo go > /run/release-shutdown").check()

    sb.reboot()
    sb.daemon_start()
    p = props(sb, "held")
    assert (p["State"], p["DormantReason"]) == ("dormant", "reboot")


def test_reboot_with_five_sessions_resumes_each_conversation_as_it_was(
    fresh_sandbox: Sandbox,
) -> None:
    sb = fresh_sandbox
    sb.daemon_start()
    for i in range(5):
        sb.run("mkdir", "-p", f"/home/alice/proj{i}", user="alice").check()
    names = [f"agent{i}" for i in range(5)]
    for i, name in enumerate(names):
        create(
            sb,
            "demo-agent",
            "-e",
            f"MARK=mark{i}",
            "-e",
            "DEMO_AGENT_THINK=0",
            "--",
            "--model",
            f"model-{i}",
            user="alice",
            name=name,
            cwd=f"/home/alice/proj{i}",
        )
    talked, silent = names[:4], names[4]
    for i, name in enumerate(talked):
        wait_screen(sb, name, "> ")
        alice_ctl(sb, "send", name, f"message number {i}")
        wait_screen(sb, name, f"You said: message number {i}")
    wait_screen(sb, silent, "> ")
    for name in talked:  # what each used, read at its turn's end
        until(lambda n=name: props(sb, n)["Usage"]["calls"] == 1, f"{name}'s usage read")
    before = {n: props(sb, n) for n in names}
    assert before[talked[0]]["Usage"]["model"] == "model-0"

    sb.reboot()
    sb.daemon_start()
    for name in names:
        p = props(sb, name)
        assert (p["State"], p["DormantReason"]) == ("dormant", "reboot"), name
        assert p["AgentSessionId"] == before[name]["AgentSessionId"]
        assert p["Usage"] == before[name]["Usage"], name  # what it used survives the reboot

    for i, name in enumerate(names):
        alice_ctl(sb, "resume", name)
        p = props(sb, name)
        agent_id = before[name]["AgentSessionId"]
        assert p["State"] == "running" and p["AgentSessionId"] == agent_id
        proc = agent_process(sb, name)
        # The original flags, environment and working directory, as the process really has them.
        assert proc.argv[-2:] == ["--model", f"model-{i}"]
        assert proc.env["MARK"] == f"mark{i}"
        assert proc.cwd == f"/home/alice/proj{i}"
        if name in talked:
            assert ["--resume", agent_id] == p["Command"][-4:-2]
            wait_screen(sb, name, f"[user] message number {i}")
            alice_ctl(sb, "send", name, "and once more")
            until(lambda n=name: props(sb, n)["Usage"]["calls"] == 2, f"{name} counts on")
        else:
            # Stopped before its first message: a fresh start under the same assigned id.
            assert ["--session-id", agent_id] == p["Command"][-4:-2]
            wait_screen(sb, name, f"session {agent_id}")


def test_records_from_another_boot_with_live_units_are_all_adopted(sb: Sandbox) -> None:
    names = [create(sb, "shell", user="alice") for _ in range(3)]
    leaders = {n: props(sb, n)["Leader"] for n in names}
    try:
        sb.daemon_stop()
        for name in names:
            # As if the state dir were restored from a backup taken on another boot.
            rewrite_record(sb, name, boot_id="0123456789abcdef0123456789abcdef")
        sb.daemon_start()
        assert "is unusable" not in sb.journal(lines=20)
        for name in names:
            p = props(sb, name)
            assert (p["State"], p["DormantReason"], p["Leader"]) == ("running", None, leaders[name])
    finally:
        for name in names:
            sb.ctl("rm", name)


def test_daemon_killed_adopts_live_sessions_and_a_lost_one_is_dormant_lost(
    sb: Sandbox,
) -> None:
    names = [create(sb, "demo-agent", user="alice") for _ in range(4)]
    gone, exited = names[0], names[1]
    leaders = {n: props(sb, n)["Leader"] for n in names}
    for name in names:
        wait_screen(sb, name, "> ")
    try:
        sb.daemon_kill()
        # While nobody watches: one session's tmux server is killed, and the scope ends with
        # it; another's agent exits, and tmux keeps its dead pane for the daemon to read.
        sock = f"/run/hostagent/{sb.uid('alice')}"
        sb.run("tmux", "-S", f"{sock}/{gone}.sock", "kill-server", user="alice")
        sb.wait_unit_state(f"hostagent-{gone}.scope", ("",))
        shown = ("display", "-p", "-t", "main", "#{pane_pid}")
        number = sb.run("tmux", "-S", f"{sock}/{exited}.sock", *shown, user="alice").stdout.strip()
        agent = machine_pid(sb, exited, number)
        sb.run(
            "tmux",
            "-S",
            f"{sock}/{exited}.sock",
            "send-keys",
            "-t",
            "main",
            "/exit",
            "Enter",
            user="alice",
        )
        # The agent has ended once its process is gone or a zombie (tmux 3.3 may not reap it).
        deadline = time.monotonic() + 10
        while sb.run("sh", "-c", f"grep -qs '^[^)]*) [^Z]' /proc/{agent}/stat").returncode == 0:
            assert time.monotonic() < deadline, "the agent never exited"
            time.sleep(0.1)
        sb.daemon_start()
        for name in names[2:]:
            p = props(sb, name)
            assert (p["State"], p["Leader"]) == ("running", leaders[name])
        p = props(sb, gone)
        assert (p["State"], p["DormantReason"]) == ("dormant", "lost")
        sb.ctl("wait", "--for", "exited", "--timeout", "30", exited).check()
        p = props(sb, exited)
        assert (p["State"], p["Result"]) == ("stopped", "success")
        sb.ctl("resume", gone).check()
        assert props(sb, gone)["State"] == "running"
        wait_screen(sb, gone, "> ")
    finally:
        for name in names:
            sb.ctl("rm", name)


def test_bad_records_are_quarantined_and_the_others_recover(sb: Sandbox) -> None:
    good = create(sb, "shell", user="alice")
    try:
        sb.daemon_stop()
        sb.sh(
            f"printf 'name: [unclosed\\n' > {SESSIONS_DIR}/corrupt.yaml"
            f" && printf '\\377\\376 not text' > {SESSIONS_DIR}/binary.yaml"
            f" && mkfifo {SESSIONS_DIR}/unreadable.yaml"
        ).check()
        sb.daemon_start()
        journal = sb.journal(this_run=True)
        for bad in ("corrupt", "binary", "unreadable"):
            assert f"{SESSIONS_DIR}/{bad}.yaml is unusable" in journal
            assert record(sb, bad) is None
            assert sb.run("sh", "-c", f"ls /var/lib/hostagent/corrupt/{bad}.yaml.*").returncode == 0
        assert props(sb, good)["State"] == "running"
        assert settled(sb, good)[0] == "running"
    finally:
        sb.ctl("rm", good)
        sb.run("rm", "-rf", "/var/lib/hostagent/corrupt")


def test_auto_policy_resumes_ten_dormant_sessions_at_most_two_at_a_time(
    fresh_sandbox: Sandbox,
) -> None:
    sb = fresh_sandbox
    sb.sh(
        "mkdir -p /etc/hostagent && printf 'recovery:\\n  policy: auto\\n  max_parallel: 2\\n"
        "  stagger_sec: 0.2\\n' > /etc/hostagent/hostagent.yaml"
    ).check()
    sb.daemon_start()
    names = [create(sb, "shell", user="alice", name=f"auto{i}") for i in range(10)]
    sb.reboot()

    async def watch() -> tuple[int, dict[str, str]]:
        client = await Client.connect(True, sb.bus_address)
        states: dict[str, str] = {}
        most = 0
        all_running = asyncio.get_running_loop().create_future()

        def on_message(msg: Message) -> None:
            nonlocal most
            if msg.message_type != MessageType.SIGNAL or msg.member != "PropertiesChanged":
                return
            if msg.body[0] != SESSION_INTERFACE or "State" not in msg.body[1]:
                return
            name = msg.path.rsplit("/", 1)[1]
            states[name] = msg.body[1]["State"].value
            most = max(most, sum(1 for s in states.values() if s == "starting"))
            if sum(1 for s in states.values() if s == "running") == len(names):
                all_running.done() or all_running.set_result(None)

        client.bus.add_message_handler(on_message)
        try:
            await add_match(
                client, "type='signal',member='PropertiesChanged',path_namespace='/org/hostagent'"
            )
            # Subscribed before the daemon starts, so no state change goes unseen.
            await asyncio.get_running_loop().run_in_executor(None, sb.daemon_start)
            await asyncio.wait_for(all_running, 60)
        finally:
            await client.aclose()
        return most, states

    most, states = asyncio.run(watch())
    assert most == 2
    assert sorted(states) == sorted(names)
    for name in names:
        assert props(sb, name)["State"] == "running"
        assert settled(sb, name)[1] == "active"
    assert "Recovery (policy auto): 0 adopted, 10 dormant, 10 to resume" in sb.journal()


@pytest.mark.parametrize("policy", ["stop", "adopt"])
def test_a_scope_without_a_record_is_stopped_or_adopted_as_configured(
    sb: Sandbox, policy: str
) -> None:
    sb.run("mkdir", "-p", "/home/alice/orphanage", user="alice").check()
    name = create(sb, "shell", user="alice", cwd="/home/alice/orphanage")
    try:
        sb.daemon_stop()
        sb.sh(
            f"mkdir -p /etc/hostagent && printf 'recovery:\\n  orphans: {policy}\\n'"
            " > /etc/hostagent/hostagent.yaml"
        ).check()
        # The record and its copy (test_identity.py has the copy bring a record back).
        sb.run("rm", f"{SESSIONS_DIR}/{name}.yaml", f"{COPIES_DIR}/{name}.yaml").check()
        sb.daemon_start()
        if policy == "stop":
            sb.wait_unit_state(f"hostagent-{name}.scope", ("",))
            assert f"hostagent-{name}.scope has no record; stopping it" in sb.journal(this_run=True)
            assert sb.ctl("status", name).returncode == 4
        else:
            p = props(sb, name)
            assert (p["State"], p["Owner"], p["Cwd"]) == (
                "running",
                sb.uid("alice"),
                "/home/alice/orphanage",
            )
            assert p["Command"] == ["/bin/bash"]
            assert record(sb, name)["state"] == "running"
            assert "adopted it as session" in sb.journal(this_run=True)
    finally:
        sb.run("rm", "-f", "/etc/hostagent/hostagent.yaml")
        sb.ctl("rm", name)
        sb.daemon_restart()


def test_a_failed_resume_keeps_the_id_and_a_later_resume_works(sb: Sandbox) -> None:
    sb.run("mkdir", "-p", "/home/alice/vanishing", user="alice").check()
    name = create(sb, "demo-agent", user="alice", cwd="/home/alice/vanishing")
    agent_id = props(sb, name)["AgentSessionId"]
    try:
        alice_ctl(sb, "stop", name)
        sb.run("rmdir", "/home/alice/vanishing", user="alice").check()
        failed = sb.ctl("resume", name, user="alice", system=True)
        assert failed.returncode != 0 and "failed to start" in failed.stderr
        p = props(sb, name)
        assert (p["State"], p["AgentSessionId"]) == ("failed", agent_id)
        assert "vanishing" in p["LastError"]
        assert settled(sb, name) == ("failed", "", "failed")
        sb.run("mkdir", "-p", "/home/alice/vanishing", user="alice").check()
        alice_ctl(sb, "resume", name)
        p = props(sb, name)
        assert (p["State"], p["AgentSessionId"], p["LastError"]) == ("running", agent_id, None)
    finally:
        sb.ctl("rm", name)


def test_a_session_an_older_hostagent_started_is_adopted_where_it_left_its_files(
    sb: Sandbox,
) -> None:
    """Before sessions had a directory of their own, a session's socket, output FIFO and hooks
    file lay side by side in its owner's runtime directory. Upgraded under a live session, the
    daemon follows it there; its next start makes its own directory."""
    name = create(sb, "demo-agent", user="alice")
    run = f"/run/hostagent/{sb.uid('alice')}"
    wait_screen(sb, name, "> ")
    try:
        sb.daemon_stop()
        # The layout an older hostagent left: tmux and its pipe keep what they have open.
        sb.sh(
            f"cd {run} && rm {name}.sock && mv {name}.d/tmux.sock {name}.sock"
            f" && mv {name}.d/out {name}.out"
            f" && {{ ! test -e {name}.d/hooks.json || mv {name}.d/hooks.json {name}.hooks.json; }}"
            f" && rmdir {name}.d"
        ).check()
        sb.daemon_start()
        assert settled(sb, name) == ("running", "active", "running")
        sb.ctl("send", name, "hello from after the upgrade", user="alice", system=True).check()
        wait_screen(sb, name, "hello from after the upgrade")
        sb.ctl("stop", name).check()
        sb.ctl("resume", name).check()
        wait_screen(sb, name, "> ")
        assert sb.run("test", "-S", f"{run}/{name}.d/tmux.sock").returncode == 0
        assert sb.run("readlink", f"{run}/{name}.sock").check().stdout.strip() == (
            f"{name}.d/tmux.sock"
        )
        assert sb.run("test", "-e", f"{run}/{name}.out").returncode != 0
    finally:
        sb.ctl("rm", name)
