"""An admin's first day (issue: day one for an admin): one place to look, systemctl's manners,
and sessions that say why they ended, on the real systemd."""

from __future__ import annotations

from tests.integration.helpers import create, props, settled, unit_state
from tests.sandbox import Sandbox


def test_every_user_looks_in_one_place(sb: Sandbox) -> None:
    roots = create(sb, "shell", name="roots-one")
    try:
        # No --system: alice's hostagentctl finds the system daemon, as it is installed.
        listed = sb.run("hostagentctl", "list", user="alice").check().stdout
        assert roots in listed and "listed on the system daemon." in listed, listed
        own = sb.run("hostagentctl", "--user", "list", user="alice").check().stdout
        assert roots not in own and "on your own daemon" in own, own
    finally:
        sb.ctl("rm", roots)


def test_stop_and_resume_are_idempotent_as_systemctl_is(sb: Sandbox) -> None:
    name = create(sb, "shell", user="alice")
    try:
        for verb in ("resume", "stop", "stop", "resume", "resume"):
            result = sb.ctl(verb, name, user="alice", system=True)
            assert (result.returncode, result.stderr) == (0, ""), (verb, result)
        missing = sb.ctl("stop", "no-such-session", user="alice", system=True)
        assert missing.returncode == 1 and "No session 'no-such-session'" in missing.stderr
    finally:
        sb.ctl("rm", name)


def ended(sb: Sandbox, name: str) -> dict:
    """The session's properties once its agent has exited and the three views agree."""
    sb.ctl("wait", "--for", "exited", "--timeout", "60", name).check()
    settled(sb, name)
    return props(sb, name)


def test_a_missing_program_fails_the_create_and_says_so(sb: Sandbox) -> None:
    result = sb.ctl("new", "--preset", "codex", "--name", "no-codex", user="alice", system=True)
    try:
        assert result.returncode == 1
        assert "program 'codex' is not installed" in result.stderr, result.stderr
        p = props(sb, "no-codex")
        assert (p["State"], p["Result"]) == ("failed", "resources")
        assert "program 'codex' is not installed" in p["LastError"]
        assert unit_state(sb, "no-codex") == ""  # nothing was started
    finally:
        sb.ctl("rm", "no-codex")


def test_an_agent_that_exits_badly_leaves_failed_its_status_and_last_screen(sb: Sandbox) -> None:
    name = create(sb, "shell", "--", "-c", "echo the last words; exit 3", user="alice")
    try:
        p = ended(sb, name)
        assert (p["State"], p["Result"], p["ExitStatus"]) == ("failed", "exit-code", 3)
        assert p["LastError"] == "the agent exited with status 3"
        screen = sb.ctl("capture", name, user="alice", system=True).check().stdout
        assert "the last words" in screen and not screen.endswith("\n\n")  # no blank rows
        status = sb.ctl("status", name, user="alice", system=True)
        assert status.returncode == 3 and "exited with status 3" in status.stdout
        assert "Leader" not in status.stdout  # no stale pid
        assert "the agent exited with status 3" in sb.journal(lines=50)
        sb.ctl("resume", name, user="alice", system=True).check()
        p = ended(sb, name)  # runs again, and fails again, for the same reason
        assert p["ResumeCount"] == 1 and p["ExitStatus"] == 3
    finally:
        sb.ctl("rm", name)


def test_a_clean_exit_is_stopped_with_success(sb: Sandbox) -> None:
    name = create(sb, "shell", "--", "-c", "echo done", user="alice")
    try:
        p = ended(sb, name)
        assert (p["State"], p["Result"], p["LastError"]) == ("stopped", "success", "")
    finally:
        sb.ctl("rm", name)


def test_systemd_and_signals_say_why_too(sb: Sandbox) -> None:
    timed = create(sb, "shell", "-p", "RuntimeMaxSec=2", "--", "-c", "sleep 600", user="alice")
    killed = create(sb, "shell", "--", "-c", "sleep 600", user="alice")
    shot = create(sb, "shell", "--", "-c", "sleep 600", user="alice")
    try:
        p = ended(sb, timed)
        assert (p["State"], p["Result"]) == ("failed", "timeout"), p
        assert "RuntimeMaxSec=2s" in p["LastError"]
        sb.ctl("kill", "--whom", "all", "-s", "9", killed, user="alice", system=True).check()
        p = ended(sb, killed)
        assert (p["State"], p["Result"]) == ("failed", "signal"), p
        assert p["LastError"] == "killed by SIGKILL ('hostagentctl kill')"
        sb.ctl("kill", "--whom", "agent", "-s", "9", shot, user="alice", system=True).check()
        p = ended(sb, shot)
        assert (p["State"], p["Result"], p["ExitSignal"]) == ("failed", "signal", 9), p
        assert p["LastError"] == "the agent was killed by SIGKILL"
    finally:
        sb.ctl("rm", timed, killed, shot)
