"""Questions an agent asks through its hook (Claude Code's PermissionRequest), on a real
systemd and bus: the stand-in agent runs its PermissionRequest hooks as it draws its dialog
and takes the first answer, a hook's decision or a key, as Claude Code does. The question is
the hook's (the tool and its command), answered through the hook's reply; answered in the
terminal, past the admin's wait, or across a daemon restart, it is the screen's again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dbus_fast import Variant

from hostagent.client.library import Client
from hostagent.errors import AccessDenied, HostAgentError
from tests.integration.busclient import with_client
from tests.integration.helpers import create, record, until, wait_screen
from tests.integration.test_inbox import ALICE, WAIT, asks, blocked, inbox
from tests.sandbox import Sandbox

# The stand-in agent with its dialog answered by its PermissionRequest hook, as claude.yaml says.
PRESET = """\
name: demo-asks
extends: demo-agent
hooks:
  format: claude
  args: ["--settings", "{hooks_file}"]
  ask: PermissionRequest
  activity:
    SessionStart: idle
    UserPromptSubmit: working
    PostToolUse: working
    PermissionRequest: blocked
    Stop: idle
"""
PRESET_FILE = "/etc/hostagent/presets.d/demo-asks.yaml"
CONFIG = "/etc/hostagent/hostagent.yaml"
HOOK = "hook PermissionRequest --ask"


@pytest.fixture(scope="module")
def preset(sandbox: Sandbox) -> Iterator[None]:
    sandbox.sh(f"mkdir -p /etc/hostagent/presets.d && cat > {PRESET_FILE}", input=PRESET).check()
    sandbox.ctl("reload").check()
    yield
    sandbox.run("rm", "-f", PRESET_FILE)
    sandbox.ctl("reload")


@pytest.fixture
def agent(sb: Sandbox, preset: None) -> Iterator[str]:
    name = create(sb, "demo-asks", "-e", "DEMO_AGENT_THINK=0", user="alice")
    with_client(sb, lambda c: c.wait(name, ["idle"], WAIT))
    yield name
    sb.ctl("rm", "--force", name)


def hooked(sb: Sandbox, name: str, command: str = "rm -rf build") -> dict:
    """The agent asks to run command; its hook's question, once the inbox lists it."""
    sb.ctl("send", name, f"/ask {command}", **ALICE).check()
    blocked(sb, name)
    q = asks(sb, name)
    assert q["source"] == "hook", q
    return q


def hook_waits(sb: Sandbox) -> bool:
    return sb.run("pgrep", "-u", "alice", "-f", HOOK).returncode == 0


def test_a_hooks_question_is_answered_through_its_reply(sb: Sandbox, agent: str) -> None:
    q = hooked(sb, agent)
    assert q["text"] == "Do you want to proceed?" and q["choices"] == ["Yes", "No"]
    assert q["detail"] == "Bash\ncommand: rm -rf build", q
    sb.ctl("answer", agent, "yes", **ALICE).check()
    wait_screen(sb, agent, "Proceeding.")
    assert with_client(sb, lambda c: c.wait(agent, ["idle"], WAIT)) == "idle"
    # The dialog the agent drew meanwhile is not asked again, and a second answer is refused.
    assert all(x["session"] != agent for x in inbox(sb))
    again = sb.ctl("answer", "--id", q["id"], agent, "no", **ALICE)
    assert again.returncode != 0 and "asks nothing now" in again.stderr
    logs = sb.ctl("logs", agent).check().stdout
    assert f"question {q['id']} (Do you want to proceed?) answered 'Yes' by uid" in logs
    # No: the hook denies, and the agent says so as it does for its terminal's "n".
    hooked(sb, agent, "make install")
    sb.ctl("answer", agent, "2", **ALICE).check()
    wait_screen(sb, agent, "Cancelled.")
    until(lambda: not hook_waits(sb), "the hooks' calls ended")


def test_answered_in_the_terminal_the_hooks_question_goes(sb: Sandbox, agent: str) -> None:
    q = hooked(sb, agent)
    assert hook_waits(sb)
    sb.ctl("send", agent, "n", **ALICE).check()  # as if pressed in the terminal
    wait_screen(sb, agent, "Cancelled.")
    until(lambda: all(x["session"] != agent for x in inbox(sb)), "the question left the inbox")
    late = sb.ctl("answer", "--id", q["id"], agent, "yes", **ALICE)
    assert late.returncode != 0 and "asks nothing now" in late.stderr
    # The agent stopped its hook; the daemon's wait for it ended with it.
    until(lambda: not hook_waits(sb), "the hook stopped")
    assert "Proceeding." not in sb.ctl("capture", agent, **ALICE).stdout


def test_past_the_wait_and_across_a_restart_the_screen_asks(sb: Sandbox, preset: None) -> None:
    """The admin's wait ends the hook's question: its dialog, still drawn, is read from the
    screen and answered with keys. A daemon restart loses the hook's call: the same."""
    sb.sh(f"cat > {CONFIG}", input="answers:\n  wait: 2\n").check()
    sb.ctl("reload").check()
    name = create(sb, "demo-asks", "-e", "DEMO_AGENT_THINK=0", user="alice")
    try:
        with_client(sb, lambda c: c.wait(name, ["idle"], WAIT))
        first = hooked(sb, name)
        screen = {}

        def from_screen() -> bool:
            screen.update(next((x for x in inbox(sb) if x["session"] == name), {}))
            return screen.get("source") == "screen"

        until(from_screen, "the question read from the screen past the wait")
        assert screen["id"] != first["id"] and screen["choices"] == ["Yes", "No"]
        sb.ctl("answer", name, "yes", **ALICE).check()
        wait_screen(sb, name, "Proceeding.")
        with_client(sb, lambda c: c.wait(name, ["idle"], WAIT))
        sb.run("rm", "-f", CONFIG).check()
        sb.ctl("reload").check()
        hooked(sb, name, "make clean")
        sb.daemon_restart()
        again = asks(sb, name)
        assert again["source"] == "screen" and again["text"] == "Do you want to proceed?"
        sb.ctl("answer", name, "no", **ALICE).check()
        wait_screen(sb, name, "Cancelled.")
    finally:
        sb.run("rm", "-f", CONFIG)
        sb.ctl("reload")
        sb.ctl("rm", "--force", name)


def test_a_hooks_question_is_asked_only_from_inside_its_session(sb: Sandbox, agent: str) -> None:
    """A caller outside the session is refused as its hook even with the session's token (as
    the daemon's record holds it), and whatever event it names: nothing reaches the inbox."""
    record_of = record(sb, agent)
    assert record_of is not None
    token = Variant("s", record_of["hook_token"])

    async def ask(c: Client) -> list[object]:
        said: list[object] = []
        for event in ("PermissionRequest", "Stop"):
            data = {"token": token, "tool_name": Variant("s", "Bash")}
            try:
                said.append(await c._session(agent, "AskHook", "sa{sv}", [event, data]))
            except HostAgentError as e:
                said.append(e)
        return said

    refused = with_client(sb, ask)
    assert all(isinstance(e, AccessDenied) for e in refused), refused
    assert "Only a process inside session" in str(refused[0])
    assert all(x["session"] != agent for x in inbox(sb))
