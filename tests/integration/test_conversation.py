"""Conversation ids kept current on a real systemd:
rotations reported by the agent's hooks, ids discovered on disk, and forged reports refused."""

from __future__ import annotations

import re

import pytest
from dbus_fast import Variant

from hostagent import SESSION_INTERFACE
from hostagent.client.library import Client
from hostagent.errors import AccessDenied
from tests.integration.busclient import with_client
from tests.integration.helpers import create, props, until, wait_screen
from tests.sandbox import Sandbox

DISCOVERED_PRESET = """\
name: demo-found
description: the stand-in agent as a CLI whose id must be found on disk
command: [hostagent-demo-agent]
state: ["{home}/.demo-agent/"]
agent_id:
  source: discovered
  discover:
    glob: "{home}/.demo-agent/sessions/*.jsonl"
    id: "([0-9a-f-]{36})\\\\.jsonl$"
resume:
  args: ["--resume", "{id}"]
  conversation: "{home}/.demo-agent/sessions/{id}.jsonl"
"""


def alice(sb: Sandbox, *args: str) -> None:
    sb.ctl(*args, user="alice", system=True).check()


def test_a_rotation_reported_by_the_hook_is_followed_by_resume(sb: Sandbox) -> None:
    name = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="alice")
    try:
        first = props(sb, name)["AgentSessionId"]
        wait_screen(sb, name, "> ")
        alice(sb, "send", name, "before the clear")
        wait_screen(sb, name, "You said: before the clear")
        alice(sb, "send", name, "/clear")
        screen = wait_screen(sb, name, "Started a new conversation: ")
        rotated = re.search(r"new conversation: ([0-9a-f-]{36})", screen)
        assert rotated
        # The agent prints its new id before its SessionStart hook reports it; the prompt
        # comes back only once the hook (and so the daemon's commit) has returned.
        alice(sb, "send", name, "after the clear")
        wait_screen(sb, name, "You said: after the clear")
        p = props(sb, name)
        assert p["AgentSessionId"] == rotated.group(1) != first
        alice(sb, "stop", name)
        alice(sb, "resume", name)
        p = props(sb, name)
        assert p["Command"][-2:] == ["--resume", rotated.group(1)]
        screen = wait_screen(sb, name, "[user] after the clear")
        assert "before the clear" not in screen
        assert "conversation" in sb.journal(lines=40) and "hook, clear" in sb.journal(lines=40)
    finally:
        sb.ctl("rm", name)


def test_hook_reports_from_outside_the_session_are_refused(sb: Sandbox) -> None:
    name = create(sb, "demo-agent", user="alice")
    try:
        before = props(sb, name)["AgentSessionId"]

        async def forge(client: Client) -> str:
            # Even root is refused: a report counts only from a pid inside the session.
            try:
                await client._call(
                    client.session_path(name),
                    SESSION_INTERFACE,
                    "ReportHook",
                    "sa{sv}",
                    ["SessionStart", {"session_id": Variant("s", "forged-id")}],
                )
            except AccessDenied as e:
                return e.message
            return "accepted"

        assert "Only a process inside session" in with_client(sb, forge)
        # The hook helper itself, run outside any session, says so and never fails the agent.
        helper = sb.run(
            "hostagentctl",
            "--system",
            "hook",
            "SessionStart",
            input='{"session_id": "forged-id"}',
            user="alice",
        )
        assert helper.returncode == 0 and "does not belong to any session" in helper.stderr
        assert props(sb, name)["AgentSessionId"] == before
    finally:
        sb.ctl("rm", name)


def test_a_report_from_inside_the_scope_needs_the_sessions_token(sb: Sandbox) -> None:
    """A pid inside the scope is not enough (the bus records a connection's pid when it
    connects, and pids are reused): a hook report must carry the session's token, which only
    the session's own hook processes are given."""
    name = create(sb, "shell", user="alice")
    report = (
        'echo \'{{"session_id": "{id}"}}\' | {env}hostagentctl --system hook SessionStart;'
        " echo reported-$((40+{n}))"
    )
    try:
        # Every session process has the token; a forger is one without it.
        forged = report.format(id="forged-2", env="env -u HOSTAGENT_HOOK_TOKEN ", n=2)
        sb.ctl("send", name, forged, system=True).check()
        screen = sb.screen_showing(name, "reported-42", user="alice")
        assert "Only a process inside session" in screen
        assert props(sb, name)["AgentSessionId"] is None
        with_token = report.format(id="real-3", env="", n=3)
        sb.ctl("send", name, with_token, system=True).check()
        assert sb.screen_showing(name, "reported-43", user="alice")
        assert props(sb, name)["AgentSessionId"] == "real-3"
    finally:
        sb.ctl("rm", name)


def install_discovered_preset(sb: Sandbox) -> None:
    sb.sh(
        "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/demo-found.yaml",
        input=DISCOVERED_PRESET,
    ).check()
    sb.ctl("reload").check()


@pytest.mark.parametrize("clock", ["steady", "stepped-back"])
def test_an_id_the_cli_chose_is_discovered_on_disk_and_resumed(sb: Sandbox, clock: str) -> None:
    """Found at the stop, and resumed. With the conversation's time stepped back an hour (as a
    clock stepped back after the start leaves it), it is found all the same."""
    install_discovered_preset(sb)
    name = create(sb, "demo-found", "-e", "DEMO_AGENT_THINK=0", user="alice")
    try:
        assert props(sb, name)["AgentSessionId"] is None
        screen = wait_screen(sb, name, "> ")
        own = re.search(r"session ([0-9a-f-]{36})", screen)
        assert own
        alice(sb, "send", name, "find me")
        wait_screen(sb, name, "You said: find me")
        if clock == "stepped-back":
            conversation = f"/home/alice/.demo-agent/sessions/{own.group(1)}.jsonl"
            sb.run("touch", "-d", "1 hour ago", conversation, user="alice").check()
        alice(sb, "stop", name)
        # The run's end is one write; the look on disk that follows it is a write of its own.
        until(
            lambda: props(sb, name)["AgentSessionId"] == own.group(1),
            "the id was found on disk after the stop",
        )
        alice(sb, "resume", name)
        assert props(sb, name)["Command"][-2:] == ["--resume", own.group(1)]
        wait_screen(sb, name, "[user] find me")
    finally:
        sb.ctl("rm", name)
        sb.run("rm", "-f", "/etc/hostagent/presets.d/demo-found.yaml")
        sb.ctl("reload")


def test_an_id_the_cli_chose_is_learned_while_the_session_runs(sb: Sandbox) -> None:
    """Codex and OpenCode choose their ids and write them down at the first turn: the id is
    learned when the turn ends (the session goes idle), not only at the stop, so status, the
    bus and every client show it while the agent runs."""
    install_discovered_preset(sb)
    name = create(sb, "demo-found", "-e", "DEMO_AGENT_THINK=1", user="alice")
    try:
        own = re.search(r"session ([0-9a-f-]{36})", wait_screen(sb, name, "> "))
        assert own
        assert props(sb, name)["AgentSessionId"] is None  # no conversation on disk yet
        alice(sb, "send", name, "find me while I run")
        wait_screen(sb, name, "You said: find me while I run")
        until(
            lambda: props(sb, name)["AgentSessionId"] == own.group(1),
            "the id was learned at the turn's end",
        )
        assert props(sb, name)["State"] == "running"
    finally:
        sb.ctl("rm", name)
        sb.run("rm", "-f", "/etc/hostagent/presets.d/demo-found.yaml")
        sb.ctl("reload")


def test_a_rotation_in_a_run_a_reboot_ended_is_found_at_resume(fresh_sandbox: Sandbox) -> None:
    """A discovered id is followed at the end of each run; a reboot ends a run with no end, so
    the resume looks for the run's last conversation, among what it wrote before the boot."""
    sb = fresh_sandbox
    sb.daemon_start()
    install_discovered_preset(sb)
    name = create(sb, "demo-found", "-e", "DEMO_AGENT_THINK=0", user="alice")
    wait_screen(sb, name, "> ")
    alice(sb, "send", name, "before the clear")
    wait_screen(sb, name, "You said: before the clear")
    alice(sb, "stop", name)
    first = props(sb, name)["AgentSessionId"]
    assert first
    alice(sb, "resume", name)
    wait_screen(sb, name, "[user] before the clear")
    alice(sb, "send", name, "/clear")
    rotated = re.search(r"new conversation: ([0-9a-f-]{36})", wait_screen(sb, name, "new conv"))
    assert rotated and rotated.group(1) != first
    alice(sb, "send", name, "after the clear")
    wait_screen(sb, name, "You said: after the clear")
    sb.reboot()
    sb.daemon_start()
    p = props(sb, name)
    assert (p["State"], p["DormantReason"], p["AgentSessionId"]) == ("dormant", "reboot", first)
    # After the boot, before the resume: a conversation the run did not write.
    planted = f"/home/alice/.demo-agent/sessions/{'0' * 8}{first[8:]}.jsonl"
    sb.run("sh", "-c", f"echo '{{}}' > {planted}", user="alice").check()
    alice(sb, "resume", name)
    p = props(sb, name)
    assert p["AgentSessionId"] == rotated.group(1), sb.journal(lines=20)
    assert p["Command"][-2:] == ["--resume", rotated.group(1)]
    screen = wait_screen(sb, name, "[user] after the clear")
    assert "before the clear" not in screen


OWN_HOOKS_PRESET = """\
name: own-hooks
description: a CLI whose own hooks run hostagentctl hook (the owner's shell stands in)
command: []
agent_id: {source: hook}
hooks:
  activity: {agent_start: working, agent_end: idle, "ask:approval": blocked}
"""


def test_a_clis_own_hooks_report_through_a_preset_with_only_an_activity_table(
    sb: Sandbox,
) -> None:
    """No hooks file, no format: what the CLI's own hooks run (hostagentctl hook EVENT)
    teaches the id and the activity, as the preset's table says."""
    sb.sh(
        "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/own-hooks.yaml",
        input=OWN_HOOKS_PRESET,
    ).check()
    sb.ctl("reload").check()
    name = create(sb, "own-hooks", user="alice")
    hook = "echo '{json}' | hostagentctl --system hook {event}; echo {mark}"
    try:
        steps = [
            ('{"session_id": "own-1"}', "agent_start", "working"),
            ('{"notification_type": "approval"}', "ask", "blocked"),
            ("{}", "agent_end", "idle"),
        ]
        for n, (json_text, event, activity) in enumerate(steps):
            mark = f"hooked-{n + 40}"
            sent = hook.format(json=json_text, event=event, mark=mark.replace("4", "$((2+2))"))
            sb.ctl("send", name, sent, system=True).check()
            wait_screen(sb, name, mark)
            until(lambda a=activity: props(sb, name)["Activity"] == a, f"{name} {activity}")
            assert props(sb, name)["AgentSessionId"] == "own-1"
        explained = sb.ctl("explain", name, system=True).check().stdout
        assert "last_hook: agent_end" in explained
    finally:
        sb.ctl("rm", name)
        sb.run("rm", "-f", "/etc/hostagent/presets.d/own-hooks.yaml")
        sb.ctl("reload").check()
