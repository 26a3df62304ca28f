"""Real agent CLIs answered from where their user is: a desktop notification's button (dunst,
Debian's notification server, with hostagent-notify following the system daemon) and Cockpit's
page (headless Chromium), for Claude Code, whose dialog its PermissionRequest hook asks, and
Codex, whose dialog is read from its screen. The CLIs run offline against the stand-in model
API, as in test_real_agents.py, whose machine and helpers this module shares the shape of."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.integration import test_real_agents as real
from tests.integration.browser import Browser
from tests.integration.helpers import displayed, headless_desktop, notifier, press, until
from tests.integration.real_agents import AGENTS, RealAgent, control
from tests.integration.test_cockpit import PASSWORD, logged_in
from tests.integration.test_real_agents import (
    Homes,
    blocked_by_rule,
    screen,
    taken,
    type_line,
    wait,
)
from tests.sandbox import REPO, Sandbox

# test_real_agents.py's machine, CLIs and homes, made again for this module.
sandbox, agents, homes = real.sandbox, real.agents, real.homes

pytestmark = [
    pytest.mark.real_cli,
    pytest.mark.skipif(
        not (shutil.which("chromium") and shutil.which("dunst") and shutil.which("cockpit-bridge")),
        reason="needs chromium, dunst and cockpit (./dev/setup installs them)",
    ),
]
# The Cockpit package's files, as packaging/debian/hostagent-cockpit.install puts them.
COCKPIT_FILES = ("manifest.json", "index.html", "hostagent.js", "hostagent.css")
VENDOR_FILES = ("xterm.js", "xterm.css")
ASKERS = [a for a in AGENTS if a.key in ("claude", "codex")]


@pytest.fixture(scope="module")
def page(sandbox: Sandbox) -> Iterator[Browser]:
    """Cockpit with hostagent's page on the machine's loopback, alice logged in."""
    target = sandbox.root / "usr" / "share" / "cockpit" / "hostagent"
    target.mkdir(parents=True, exist_ok=True)
    for name in COCKPIT_FILES:
        shutil.copy2(REPO / "cockpit" / name, target / name)
    for name in VENDOR_FILES:
        shutil.copy2(REPO / "cockpit" / "vendor" / name, target / name)
    sandbox.run("systemctl", "enable", "--now", "cockpit.socket").check()
    sandbox.run("chpasswd", input=f"alice:{PASSWORD}\n").check()
    browser = logged_in(sandbox, "alice")
    yield browser
    browser.close()


@pytest.fixture(scope="module")
def desktop(sandbox: Sandbox) -> Iterator[None]:
    """alice's headless desktop, its notifications from the system daemon's sessions."""
    with headless_desktop(sandbox):
        notifier(sandbox, "--system")
        yield


def ask(sb: Sandbox, agent: RealAgent, name: str) -> None:
    """The agent asks to run its command, held there by the stand-in model once approved."""
    control(sb, "hold")
    type_line(sb, agent, name, agent.approval_prompt)
    screen(sb, agent, name, agent.approval)
    blocked_by_rule(sb, agent, name)


def ran(sb: Sandbox, agent: RealAgent, name: str, project: str) -> None:
    """The approved command ran, and the agent's turn ended."""
    control(sb, "release")
    until(
        lambda: sb.run("test", "-e", f"{project}/approved-by-user.txt").returncode == 0,
        f"{agent.key} ran the approved command",
        120,
    )
    assert wait(sb, agent, name, "idle") == "idle"
    sb.run("rm", "-f", f"{project}/approved-by-user.txt").check()


@pytest.mark.parametrize("agent", ASKERS, ids=[a.key for a in ASKERS])
def test_a_real_clis_approval_is_answered_from_a_notification_and_from_cockpit(
    sandbox: Sandbox, homes: Homes, desktop: None, page: Browser, agent: RealAgent
) -> None:
    sb = sandbox
    project = homes.ensure_set_up(agent)
    name = homes.create(agent, project)
    try:
        screen(sb, agent, name, agent.ready)
        assert wait(sb, agent, name, "idle") == "idle"
        # A notification's first button.
        ask(sb, agent, name)
        until(lambda: displayed(sb) == 1, f"a notification for {agent.key}'s question")
        press(sb, "1. ")
        assert taken(sb, agent, name)
        until(lambda: displayed(sb) == 0, "the notification closed after its button")
        ran(sb, agent, name, project)
        # Cockpit's first button.
        ask(sb, agent, name)
        question = f"document.querySelector('.question[data-name=\"{name}\"]')"
        page.until(f"!!{question}", f"{agent.key}'s question on the page")
        buttons = page.js(f"[...{question}.querySelectorAll('button')].map(b => b.innerText)")
        assert buttons[0].startswith("1. "), buttons
        page.js(f"{question}.querySelector('button').click()")
        assert taken(sb, agent, name)
        page.until(f"!{question}", "the question gone from the page")
        ran(sb, agent, name, project)
        logs = sb.ctl("logs", name).check().stdout
        assert "notify)" in logs and "(cockpit-bridge)" in logs, logs
    finally:
        control(sb, "release")
        sb.ctl("rm", "--force", name, user=agent.user, system=True)
