"""Recovery at daemon start on a real systemd: what exists so far of the recovery issue."""

from __future__ import annotations

import json

from tests.sandbox import Sandbox


def status(sb: Sandbox, name: str) -> dict:
    return json.loads(sb.ctl("--json", "status", name, user="alice", system=True).stdout)


def screen_has(sb: Sandbox, name: str, text: str) -> bool:
    return bool(sb.screen_showing(name, text, user="alice"))


def test_reboot_makes_sessions_dormant_and_resume_continues_the_conversation(
    fresh_sandbox: Sandbox,
) -> None:
    sb = fresh_sandbox
    sb.daemon_start()
    for name in ("talked", "silent"):
        sb.ctl(
            "new",
            "--preset",
            "demo-agent",
            "--name",
            name,
            "--cwd",
            "/home/alice",
            "-e",
            "DEMO_AGENT_THINK=0",
            user="alice",
            system=True,
        ).check()
    assert screen_has(sb, "talked", "> ")
    sb.ctl("send", "talked", "remember me", user="alice", system=True).check()
    assert screen_has(sb, "talked", "You said: remember me")
    ids = {n: status(sb, n)["AgentSessionId"] for n in ("talked", "silent")}

    sb.reboot()
    sb.daemon_start()
    for name in ids:
        s = status(sb, name)
        assert (s["State"], s["DormantReason"]) == ("dormant", "reboot")

    for name in ids:
        sb.ctl("resume", name, user="alice", system=True).check()
        s = status(sb, name)
        assert s["State"] == "running" and s["AgentSessionId"] == ids[name]
        assert s["Cwd"] == "/home/alice"
    # The conversation with a message resumes; the one without starts fresh under its id.
    assert status(sb, "talked")["Command"][-2:] == ["--resume", ids["talked"]]
    assert screen_has(sb, "talked", "[user] remember me")
    assert status(sb, "silent")["Command"][-2:] == ["--session-id", ids["silent"]]
    assert screen_has(sb, "silent", f"session {ids['silent']}")


def test_records_from_another_boot_with_live_units_are_adopted(sb: Sandbox) -> None:
    sb.ctl("new", "--preset", "shell", "--name", "restored", user="alice", system=True).check()
    try:
        sb.daemon_stop()
        # As if the state dir were restored from a backup taken on another boot.
        sb.run(
            "sed",
            "-i",
            "s/^boot_id: .*/boot_id: 0123456789abcdef0123456789abcdef/",
            "/var/lib/hostagent/sessions/restored.yaml",
        ).check()
        sb.daemon_start()
        assert status(sb, "restored")["State"] == "running"
    finally:
        sb.ctl("rm", "restored", user="alice", system=True)
