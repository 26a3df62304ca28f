"""Agent awareness on a real systemd with the stand-in agent: what each
screen means, pushed as PropertiesChanged, waited on by many, and captured with scrollback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from dbus_fast import Message, MessageType

from hostagent import SESSION_INTERFACE
from hostagent.client.library import Client
from tests.integration.busclient import add_match, with_client
from tests.integration.helpers import create, new_name, until, wait_screen
from tests.sandbox import Sandbox

WAIT = 15_000_000  # µs: a bound for the waits, never a sleep

# The stand-in agent read from its screen alone, as an agent without hooks would be.
SCREEN_ONLY_PRESET = """\
name: demo-screen
command: [hostagent-demo-agent]
state: ["{home}/.demo-agent/"]
agent_id: {source: assigned, assign_args: ["--session-id", "{id}"]}
activity:
  rules:
    - {activity: blocked, screen: '^Do you want to proceed\\? \\(y/n\\)$', lines: 1}
    - {activity: working, screen: '\\(esc to interrupt\\)$', lines: 1}
  fallback: idle
"""


@pytest.fixture(scope="module")
def screen_preset(sandbox: Sandbox) -> Iterator[None]:
    sandbox.sh(
        "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/demo-screen.yaml",
        input=SCREEN_ONLY_PRESET,
    ).check()
    sandbox.ctl("reload").check()
    yield
    sandbox.run("rm", "-f", "/etc/hostagent/presets.d/demo-screen.yaml")
    sandbox.ctl("reload")


def wait(sb: Sandbox, name: str, *activities: str) -> str:
    """The activity reached; ListSessions (a cached reply) must already say the same."""
    reached = with_client(sb, lambda c: c.wait(name, list(activities), WAIT))

    async def listed(c: Client) -> str:
        return next(r.activity for r in await c.list_sessions() if r.name == name)

    assert with_client(sb, listed) == reached
    return reached


def send(sb: Sandbox, name: str, text: str) -> None:
    sb.ctl("send", name, text).check()


@pytest.mark.parametrize("preset", ["demo-agent", "demo-screen"])
def test_the_stand_in_agent_working_blocked_idle_and_exited(
    sb: Sandbox, screen_preset: None, preset: str
) -> None:
    name = create(sb, preset, "-e", "DEMO_AGENT_THINK=0")
    try:
        assert wait(sb, name, "idle") == "idle"  # a prompt and no output
        send(sb, name, "/work 3")
        assert wait(sb, name, "working") == "working"
        explained = with_client(sb, lambda c: c.explain(name))
        assert explained["activity"] == "working"
        assert explained["source"] in ("screen", "hook")
        assert wait(sb, name, "idle") == "idle"
        send(sb, name, "/ask")
        assert wait(sb, name, "blocked") == "blocked"
        explained = sb.ctl("explain", name).check().stdout
        assert "activity: blocked" in explained
        assert "Do you want to proceed? (y/n)" in explained or "Notification" in explained
        send(sb, name, "y")
        assert wait(sb, name, "idle") == "idle"
        sb.ctl("kill", "--whom", "agent", name).check()
        assert wait(sb, name, "working", "blocked") == "exited"
    finally:
        sb.ctl("rm", name)


def test_prose_that_mentions_approval_is_never_blocked(sb: Sandbox) -> None:
    name = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0.5")

    async def converse(client: Client) -> list[str]:
        seen: list[str] = []
        path = client.session_path(name)

        def on_message(msg: Message) -> None:
            if msg.message_type is MessageType.SIGNAL and msg.path == path:
                if msg.body[0] == SESSION_INTERFACE and "Activity" in msg.body[1]:
                    seen.append(msg.body[1]["Activity"].value)

        client.bus.add_message_handler(on_message)
        await add_match(client, f"type='signal',member='PropertiesChanged',path='{path}'")
        await client.wait(name, ["idle"], WAIT)
        await client.send_text(name, "Should I ask: Do you want to proceed? (y/n)", True)
        await client.wait(name, ["working"], WAIT)
        await client.wait(name, ["idle"], WAIT)
        return seen

    try:
        seen = with_client(sb, converse)
        assert "working" in seen and "blocked" not in seen
        wait_screen(sb, name, "You said: Should I ask: Do you want to proceed? (y/n)")
    finally:
        sb.ctl("rm", name)


def test_wait_any_over_twenty_returns_the_one_that_blocks(sb: Sandbox) -> None:
    names = [create(sb, "demo-agent") for _ in range(20)]
    chosen = names[13]

    async def race(client: Client) -> tuple[tuple[str, str], list[str]]:
        for n in names:
            await client.wait(n, ["idle"], WAIT)
        any_blocked = asyncio.ensure_future(client.wait_any(names, ["blocked"], WAIT))
        # Ten more waiters on the chosen one: every one of them wakes.
        many = [asyncio.ensure_future(client.wait(chosen, ["blocked"], WAIT)) for _ in range(10)]
        # Each waiter sends its calls before the agent is asked: the tasks run in order, and
        # the bus keeps one connection's messages in order.
        await asyncio.sleep(0)
        await client.send_text(chosen, "/ask", True)
        return await any_blocked, list(await asyncio.gather(*many))

    try:
        first, many = with_client(sb, race)
        assert first == (chosen, "blocked")
        assert many == ["blocked"] * 10
    finally:
        sb.ctl("rm", *names)


def test_ctl_wait_and_capture_with_scrollback(sb: Sandbox) -> None:
    name = create(sb, "shell")
    try:
        send(sb, name, "seq 1 120")
        wait_screen(sb, name, "119")  # output, not the echo of the command line
        assert sb.ctl("wait", name, "--for", "idle", "--timeout", "15").stdout.strip() == "idle"
        visible = sb.ctl("capture", name).stdout.splitlines()
        scrolled = sb.ctl("capture", "-n", "100", name).stdout.splitlines()
        assert "30" not in visible and "120" in visible
        assert "30" in scrolled and scrolled.index("30") < scrolled.index("120")
    finally:
        sb.ctl("rm", name)


def test_activity_is_followed_again_after_a_daemon_restart(sb: Sandbox) -> None:
    name = create(sb, "demo-agent")
    try:
        assert wait(sb, name, "idle") == "idle"
        sb.daemon_restart()
        assert wait(sb, name, "idle") == "idle"  # read again, not left unknown
        send(sb, name, "/ask")  # the new pipe carries the output
        assert wait(sb, name, "blocked") == "blocked"
    finally:
        sb.ctl("rm", name)


def test_a_first_turn_that_never_pauses_reads_working(sb: Sandbox, screen_preset: None) -> None:
    """Codex's slow first request: from its first screen on, the spinner redraws every tenth
    of a second and never lets the output settle. The pane is read all the same (within a
    second, docs/architecture.md), so the session is working long before the turn ends."""
    name = create(sb, "demo-screen", "-e", "DEMO_AGENT_THINK=120", "--", "a slow first request")
    try:
        assert wait(sb, name, "working", "blocked", "idle") == "working"
        explained = with_client(sb, lambda c: c.explain(name))
        assert (explained["source"], explained["activity"]) == ("screen", "working"), explained
    finally:
        sb.ctl("rm", name)


def test_an_agent_that_has_drawn_nothing_is_not_idle(sb: Sandbox, screen_preset: None) -> None:
    """Aider draws nothing for its first seconds, and a message sent on an idle then went
    into its first question. The stand-in agent is held before it draws anything (its start
    waits on a FIFO): the daemon reads the empty screen as unknown, and idle comes only once
    the prompt is drawn."""
    name = new_name()
    gate = f"/dev/shm/{name}.gate"  # its /tmp is its own
    sb.run("mkfifo", gate).check()
    create(
        sb,
        "demo-screen",
        "--replace-command",
        "--",
        "sh",
        "-c",
        f"read go < {gate}; exec /usr/lib/hostagent/hostagent-demo-agent",
        name=name,
    )
    try:
        explained: dict[str, str] = {}

        def read_once() -> bool:
            explained.update(with_client(sb, lambda c: c.explain(name)))
            return explained["rule"] != "not read yet"

        until(read_once, "the daemon read the held agent's screen")
        assert (explained["activity"], explained["rule"]) == ("unknown", "nothing drawn yet")
        sb.sh(f"echo go > {gate}").check()
        assert wait(sb, name, "idle") == "idle"
        wait_screen(sb, name, "Demo Agent")
    finally:
        sb.ctl("rm", name)
        sb.run("rm", "-f", gate)


ASKING_PRESET = """\
name: mine
command: [hostagent-demo-agent]
activity:
  rules:
    - {activity: blocked, screen: ['proceed\\? \\(y/n\\)']}
"""


def test_a_cli_without_a_preset_is_read_by_its_screen_and_never_working_at_its_prompt(
    sb: Sandbox,
) -> None:
    """The stand-in agent started in the shell's place, as a CLI with no preset of its own
    is: it has the terminal itself (no job in front), so its prompt reads idle, its turn
    working while it draws, its question blocked, and a command the shell runs stays
    working while it runs."""
    name = create(
        sb, "shell", "-e", "DEMO_AGENT_THINK=0", "--replace-command", "--", "hostagent-demo-agent"
    )
    shell = create(sb, "shell")
    try:
        assert wait(sb, name, "idle") == "idle"
        explained = with_client(sb, lambda c: c.explain(name))
        assert (explained["source"], explained["rule"]) == ("fallback", "no rule matched")
        send(sb, name, "/work 2")
        assert wait(sb, name, "working") == "working"
        assert wait(sb, name, "idle") == "idle"
        assert "You said: /work 2" in wait_screen(sb, name, "You said")
        send(sb, name, "/ask")
        assert wait(sb, name, "blocked") == "blocked"
        # docs/presets.md, "Writing a preset": the screen captured, read with a preset file.
        sb.sh(f"hostagentctl capture {name} > /tmp/asked.txt").check()
        sb.sh("cat > /tmp/mine.yaml", input=ASKING_PRESET).check()
        checked = sb.run("hostagentctl", "check-preset", "/tmp/mine.yaml", "/tmp/asked.txt")
        assert "/tmp/asked.txt: blocked (mine rule 1: 'proceed? (y/n)')" in checked.check().stdout
        send(sb, name, "y")
        assert wait(sb, name, "idle") == "idle"
        # The shell itself: a command in the foreground is a job, working until it ends.
        send(sb, shell, "sleep 600")
        assert wait(sb, shell, "working") == "working"
        # The echo of the line typed reads working first (output flowing); then the job does.
        until(
            lambda: with_client(sb, lambda c: c.explain(shell))["matched"] == "foreground: sleep",
            "the shell's job read working by its foreground rule",
        )
    finally:
        sb.ctl("rm", name, shell)
