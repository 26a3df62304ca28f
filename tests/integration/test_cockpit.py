"""The Cockpit page: Debian's cockpit-ws and
cockpit-bridge with the .deb's hostagent-cockpit, in a fresh machine, driven by headless
Chromium logged in as alice on loopback. The pictures in docs/ are taken by this test."""

from __future__ import annotations

import base64
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.browser import Browser
from tests.integration.helpers import props, until
from tests.sandbox import REPO, Sandbox

PASSWORD = "correct horse battery staple"
# What the page's terminal holds: its xterm buffer, as the page wrote it. Not the drawn rows:
# headless Chromium on a busy machine can leave a terminal's rows undrawn for a minute while
# its buffer holds the whole screen (seen in CI: buffer full, rows blank).
SCREEN = (
    "(() => { const b = terminal?.term?.buffer.active; if (!b) return '';"
    " let t = ''; for (let i = 0; i < b.length; i++) t += b.getLine(i).translateToString(true) + '\\n';"
    " return t; })()"
)
PAGE = "http://127.0.0.1:9090/cockpit/@localhost/hostagent/index.html"
pytestmark = pytest.mark.skipif(
    not (
        shutil.which("chromium")
        and Path("/usr/lib/cockpit/cockpit-ws").exists()
        and shutil.which("cockpit-bridge")
    ),
    reason="needs chromium, cockpit-ws and cockpit-bridge (./dev/setup installs them)",
)


@pytest.fixture(scope="module")
def console(debs: Path) -> Iterator[Sandbox]:
    """A machine with both packages installed by apt, Cockpit listening on loopback, and a
    password for alice."""
    with Sandbox(install=False) as sb:
        for deb in debs.glob("hostagent*_all.deb"):
            shutil.copy2(deb, sb.root / "var" / "tmp" / deb.name)
        names = [f"/var/tmp/{d.name}" for d in debs.glob("hostagent*_all.deb")]
        result = sb.run(
            "apt-get",
            "install",
            "-y",
            *names,
            env={"DEBIAN_FRONTEND": "noninteractive"},
            timeout=300,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        sb.run("systemctl", "enable", "--now", "hostagent", "cockpit.socket").check()
        sb.run("chpasswd", input=f"alice:{PASSWORD}\ncarol:{PASSWORD}\n").check()
        yield sb


def logged_in(sb: Sandbox, user: str) -> Browser:
    """Chromium on the page, logged in to Cockpit as user (by HTTP Basic on Cockpit's login
    URL, which sets the session cookie as the login form does)."""
    chromium = Browser(sb)
    try:
        chromium.open("about:blank")
        basic = base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()
        chromium.send("Network.enable")
        chromium.send(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {basic}"}}
        )
        chromium.go("http://127.0.0.1:9090/cockpit/login")
        chromium.until(
            "document.body && document.body.innerText.includes('csrf-token')", "the login accepted"
        )
        chromium.send("Network.setExtraHTTPHeaders", {"headers": {}})
        chromium.go(PAGE)
        chromium.until("document.body && document.body.dataset.ready === 'yes'", "the page")
    except BaseException:
        chromium.close()
        raise
    return chromium


@pytest.fixture
def browser(console: Sandbox) -> Iterator[Browser]:
    chromium = logged_in(console, "alice")
    yield chromium
    chromium.close()


def rows(browser: Browser) -> dict[str, str]:
    """Each listed session's name and its row's class (activity-...)."""
    return dict(
        browser.js(
            "[...document.querySelectorAll('#sessions tbody tr')].map(r => [r.dataset.name, r.className])"
        )
    )


def test_the_page_lists_follows_and_drives_sessions(console: Sandbox, browser: Browser) -> None:
    sb = console
    sb.ctl("new", "--preset", "shell", "--name", "roots-one", system=True).check()
    browser.until("document.querySelector('#sessions tr[data-name=\"roots-one\"]')", "roots-one")
    # Created elsewhere, shown without a reload: the page follows SessionNew.
    sb.ctl(
        "new",
        "--preset",
        "demo-agent",
        "--name",
        "alices",
        "--cwd",
        "/tmp",
        "-e",
        "DEMO_AGENT_THINK=0",
        "-p",
        "InaccessiblePaths=-%h/.ssh",
        user="alice",
        system=True,
    ).check()
    shown_after = time.monotonic()
    browser.until("document.querySelector('#sessions tr[data-name=\"alices\"]')", "alices")
    print(f"a new session was on the page {time.monotonic() - shown_after:.3f}s after its create")
    listed = browser.js("document.querySelector('#sessions tr[data-name=\"roots-one\"]').innerText")
    assert "root" in listed and "shell" in listed and "running" in listed
    sb.ctl("wait", "alices", "--for", "idle", "--timeout", "30", system=True).check()
    # A turn: its tokens are in the row once its usage is read (the stand-in's 1200 in, 50 out).
    sb.ctl("send", "alices", "count this", user="alice", system=True).check()
    browser.until(
        "document.querySelector('#sessions tr[data-name=\"alices\"]').innerText.includes('1.2k')",
        "alices' tokens in her row",
    )
    sb.ctl("send", "alices", "/ask", user="alice", system=True).check()
    browser.until(
        "document.querySelector('tr[data-name=\"alices\"].activity-blocked')",
        "alices marked blocked",
    )
    browser.screenshot(REPO / "docs" / "cockpit-list.png")

    # Her session's page: its screen live, and typing into it reaches the agent.
    browser.js("location.hash = '#/session/alices'")
    browser.until(f"{SCREEN}.includes('proceed')", "the live screen")
    sb.ctl("send", "alices", "y", user="alice", system=True).check()
    browser.until(f"{SCREEN}.includes('> ')", "the agent back at its prompt")
    browser.js("document.querySelector('#terminal .xterm-helper-textarea').focus()")
    browser.type("typed in cockpit")
    until(
        lambda: "You said: typed in cockpit" in sb.ctl("capture", "alices", system=True).stdout,
        "the line typed in the browser reached the agent",
    )
    browser.until("document.getElementById('explain').innerText.includes('rule')", "why")
    browser.until(
        "document.getElementById('props').innerText.includes('InaccessiblePaths=')",
        "what her session is confined to",
    )
    # An agent's session, with no word asking for less: it started from the agent profile.
    shown = browser.js("document.getElementById('props').innerText")
    assert re.search(r"Profile\s+agent\b", shown) and "ProtectHome=read-only" in shown, shown
    browser.screenshot(REPO / "docs" / "cockpit-session.png")

    # Stop (confirmed) and resume her own.
    browser.js("document.getElementById('stop').click()")
    browser.until("!document.getElementById('confirm').hidden", "the confirmation")
    browser.js("document.getElementById('confirm-yes').click()")
    until(lambda: props(sb, "alices")["State"] == "stopped", "alices stopped from the page")
    browser.until(
        "document.getElementById('session-state').innerText.startsWith('stopped')",
        "the page saying stopped",
    )
    browser.js("document.getElementById('resume').click()")
    until(lambda: props(sb, "alices")["State"] == "running", "alices resumed from the page")

    # root's session: what the daemon would refuse her is not offered, and the page says why.
    browser.js("location.hash = '#/session/roots-one'")
    browser.until("document.getElementById('session-name').innerText === 'roots-one'", "roots")
    note = browser.until(
        "!document.getElementById('not-yours').hidden && "
        "document.getElementById('not-yours').innerText",
        "why not",
    )
    assert "root's session" in note, note
    offered = browser.js(
        "['stop', 'kill', 'remove', 'resume', 'send-text']"
        ".filter(id => !document.getElementById(id).disabled)"
    )
    assert offered == [], offered
    assert browser.js("document.getElementById('terminal').hidden"), "no screen she may not see"
    assert "see this session's screen" in browser.js(
        "document.getElementById('terminal-note').innerText"
    )
    browser.screenshot(REPO / "docs" / "cockpit-not-yours.png")
    assert props(sb, "roots-one")["State"] == "running"

    # Her session that failed: marked in the list, and its page shows the last screen.
    sb.ctl(
        "new",
        "--preset",
        "shell",
        "--name",
        "alice-fails",
        "--cwd",
        "/home/alice",
        "--",
        "-c",
        "echo the build broke; exit 3",
        user="alice",
        system=True,
    ).check()
    browser.js("location.hash = '#/'")
    browser.until(
        "document.querySelector('tr[data-name=\"alice-fails\"].state-failed')",
        "the failed session marked in the list",
    )
    browser.js("location.hash = '#/session/alice-fails'")
    browser.until(f"{SCREEN}.includes('the build broke')", "its last screen")
    assert "Pane is dead" not in browser.js("document.querySelector('#terminal').innerText")
    assert browser.js("document.getElementById('send-text').disabled")
    browser.screenshot(REPO / "docs" / "cockpit-ended.png")
    sb.ctl("rm", "alice-fails", system=True).check()

    # New session, from the form: only installed agents are offered.
    browser.js("location.hash = '#/'")
    browser.js("document.getElementById('new-button').click()")
    offered = browser.until(
        "[...document.getElementById('new-preset').options].map(o => o.value).join(' ')",
        "the agents offered",
    )
    assert "shell" in offered and "demo-agent" in offered and "claude" not in offered
    browser.js("""(() => {
        document.getElementById('new-preset').value = 'shell';
        document.getElementById('new-name').value = 'from-cockpit';
        document.getElementById('new-runtime').value = '1h 30min';
        document.getElementById('new-create').click(); })()""")
    until(
        lambda: sb.ctl("status", "from-cockpit", system=True).returncode == 0,
        "the session made there",
    )
    assert props(sb, "from-cockpit")["Owner"] == sb.uid("alice")
    runtime = sb.run("systemctl", "show", "-P", "RuntimeMaxUSec", "hostagent-from-cockpit.scope")
    assert runtime.stdout.strip() == "1h 30min", "the form takes systemd's time spans"
    browser.until(
        "document.getElementById('session-name').innerText === 'from-cockpit'", "its page"
    )
    # A line sent from the form, then Kill and Remove, each confirmed.
    browser.js("""(() => {
        document.getElementById('send-text').value = 'echo sent-$((20 + 22))';
        document.querySelector('#send-form button').click(); })()""")
    until(
        lambda: "sent-42" in sb.ctl("capture", "from-cockpit", system=True).stdout,
        "the line sent from the form ran",
    )
    for button in ("kill", "remove"):
        browser.js(f"document.getElementById('{button}').click()")
        browser.until("!document.getElementById('confirm').hidden", f"{button} confirmed first")
        browser.js("document.getElementById('confirm-yes').click()")
        if button == "kill":
            until(lambda: props(sb, "from-cockpit")["State"] != "running", "killed from the page")
            # Ended: its last screen, read-only, where the live one was; nothing to send to.
            browser.until(
                f"{SCREEN}.includes('sent-42') && !document.getElementById('terminal-note').hidden",
                "the last screen of the ended session",
            )
            assert browser.js("document.getElementById('send-text').disabled")
    until(
        lambda: sb.ctl("status", "from-cockpit", system=True).returncode == 4,
        "removed from the page",
    )
    browser.until("location.hash === '#/' || location.hash === ''", "back at the list")


def test_the_inbox_answers_an_agents_question_with_its_button(
    console: Sandbox, browser: Browser
) -> None:
    """alice's agent asks; the page lists the question with a button per choice, and hers
    answers it as a key in its terminal would; the question leaves the page."""
    sb = console
    sb.ctl(
        "new",
        "--preset",
        "demo-agent",
        "--name",
        "asks-alice",
        "--cwd",
        "/tmp",
        "-e",
        "DEMO_AGENT_THINK=0",
        user="alice",
        system=True,
    ).check()
    try:
        sb.ctl("wait", "asks-alice", "--for", "idle", "--timeout", "30", system=True).check()
        sb.ctl("send", "asks-alice", "/ask", user="alice", system=True).check()
        question = "document.querySelector('.question[data-name=\"asks-alice\"]')"
        browser.until(
            f"{question} && {question}.innerText.includes('Do you want to proceed?')",
            "the question on the page",
        )
        buttons = browser.js(f"[...{question}.querySelectorAll('button')].map(b => b.innerText)")
        assert buttons == ["1. Yes", "2. No"], buttons
        browser.screenshot(REPO / "docs" / "cockpit-inbox.png")
        browser.js(f"{question}.querySelector('button').click()")
        until(
            lambda: "Proceeding." in sb.ctl("capture", "asks-alice", system=True).stdout,
            "the agent took the answer from the page",
        )
        browser.until(f"!{question}", "the question gone from the page")
        logs = sb.ctl("logs", "asks-alice").check().stdout
        assert "answered 'Yes'" in logs and "(cockpit-bridge)" in logs, logs
    finally:
        sb.ctl("rm", "--force", "asks-alice", system=True)


def test_an_admin_with_administrative_access_acts_as_root(console: Sandbox) -> None:
    """carol may use sudo. Without Cockpit's administrative access the page acts as carol and
    does not offer what the daemon would refuse her; once she turns it on (what Cockpit's
    "Limited access" button does), the page's calls go through Cockpit's root bridge and the
    stop is offered and done."""
    sb = console
    sb.sh("echo 'carol ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/carol").check()
    sb.ctl("new", "--preset", "shell", "--name", "alices-own", user="alice", system=True).check()
    carol = logged_in(sb, "carol")
    try:

        def open_it() -> None:
            carol.js("location.hash = '#/session/alices-own'")
            carol.until(
                "document.getElementById('session-name').innerText === 'alices-own'", "its page"
            )

        open_it()  # as carol: not offered
        carol.until("!document.getElementById('not-yours').hidden", "why she may not act")
        assert carol.js("document.getElementById('stop').disabled")
        # Cockpit's promise is a thenable, not a Promise, which the browser would not await:
        # the page must not be reloaded before the root bridge is up.
        carol.js(
            "Promise.resolve(cockpit.dbus(null, {bus: 'internal'})"
            ".call('/superuser', 'cockpit.Superuser', 'Start', ['sudo']))"
        )
        carol.go(PAGE)
        carol.until("document.body && document.body.dataset.ready === 'yes'", "the page again")
        open_it()  # as root now
        carol.until("!document.getElementById('stop').disabled", "the stop offered")
        carol.js(
            "document.getElementById('stop').click(); "
            "document.getElementById('confirm-yes').click()"
        )
        until(
            lambda: (
                props(sb, "alices-own")["State"] == "stopped"
                or not carol.js("document.getElementById('alert').hidden")
            ),
            "the stop done, or refused",
        )
        assert carol.js("document.getElementById('alert-text').innerText") == ""
        assert props(sb, "alices-own")["State"] == "stopped"
    finally:
        carol.close()
        sb.ctl("rm", "alices-own", system=True)
