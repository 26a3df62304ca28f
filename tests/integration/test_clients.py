"""The clients on a real systemd and bus: the live view, driven in tmux, and
the client library following the daemon across a restart and an upgrade."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator

import pytest

from hostagent.client.follow import Follower, Link
from hostagent.client.library import Client
from tests.integration.helpers import (
    AUTH_RULE,
    AUTH_RULE_PATH,
    create,
    displayed,
    echo_is_off,
    headless_desktop,
    notifier,
    press,
    settled,
    summaries,
    until,
)
from tests.sandbox import Sandbox

SOCK = "/tmp/watch.sock"


def watch_screen(sb: Sandbox) -> str:
    return sb.run("tmux", "-S", SOCK, "capture-pane", "-p", "-t", "watch", user="alice").stdout


def until_watch_shows(sb: Sandbox, text: str, timeout: float = 20.0) -> str:
    """The watch's screen once it shows text. The view lives in another process's terminal;
    its screen is read in a bounded loop, the way a person would look at it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = watch_screen(sb)
        if text in screen:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"watch never showed {text!r}:\n{watch_screen(sb)}")


@pytest.fixture
def watching(sb: Sandbox) -> Iterator[str]:
    name = create(sb, "demo-agent", user="alice")
    sb.run(
        "tmux",
        "-S",
        SOCK,
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        "watch",
        "-x",
        "140",
        "-y",
        "30",
        "hostagentctl --system watch",
        user="alice",
    ).check()
    yield name
    sb.run("tmux", "-S", SOCK, "kill-server", user="alice")
    sb.ctl("rm", name)


def test_watch_lists_sessions_and_follows_the_daemon_away_and_back(
    sb: Sandbox, watching: str
) -> None:
    screen = until_watch_shows(sb, watching)
    assert "connected" in screen and "alice" in screen and "demo-agent" in screen
    until_watch_shows(sb, "idle")
    sb.daemon_kill()
    until_watch_shows(sb, "daemon gone")
    sb.daemon_start()
    screen = until_watch_shows(sb, "connected")
    assert watching in screen
    # Signals, not polling: a change shows up as soon as the bus carries it.
    sb.ctl("send", watching, "/ask").check()
    until_watch_shows(sb, "blocked")


def test_watch_keys_stop_and_resume_the_selected_session(sb: Sandbox, watching: str) -> None:
    until_watch_shows(sb, watching)
    # Select the session: it is alice's only one, but the table lists everybody's.
    rows = [line.split()[0] for line in watch_screen(sb).splitlines()[3:] if line.strip()]
    for _ in range(rows.index(watching)):
        sb.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "Down", user="alice").check()
    sb.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "s", user="alice").check()
    until_watch_shows(sb, f"stop {watching}? (y/n)")  # a stop is confirmed first
    sb.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "n", user="alice").check()
    until_watch_shows(sb, f"stop {watching}: not done")
    assert settled(sb, watching)[0] == "running"
    sb.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "s", user="alice").check()
    sb.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "y", user="alice").check()
    until_watch_shows(sb, f"stop {watching}: done")
    assert settled(sb, watching)[0] == "stopped"
    sb.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "r", user="alice").check()
    until_watch_shows(sb, f"resume {watching}: done")
    assert settled(sb, watching)[0] == "running"


def test_watch_answers_the_selected_sessions_question_with_a_digit(
    sb: Sandbox, watching: str
) -> None:
    until_watch_shows(sb, watching)
    rows = [line.split()[0] for line in watch_screen(sb).splitlines()[3:] if line.strip()]
    for _ in range(rows.index(watching)):
        sb.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "Down", user="alice").check()
    sb.ctl("wait", watching, "--for", "idle", "--timeout", "30").check()
    sb.ctl("send", watching, "/ask").check()
    until_watch_shows(sb, f"{watching} asks: 1-2 answers")
    sb.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "1", user="alice").check()
    until(
        lambda: "Proceeding." in sb.ctl("capture", watching).stdout,
        "the question answered from watch",
    )
    until_watch_shows(sb, f"answer {watching}: done")


def test_watch_asks_for_a_password_on_the_terminal_and_comes_back(sb: Sandbox) -> None:
    """carol, whom polkit asks for her own password to act on others' sessions, stops root's
    session from watch: watch hands the terminal to the prompt and comes back; a Ctrl-C there
    cancels the action, not watch; the right password stops the session."""
    sock = "/tmp/watch-carol.sock"
    roots = create(sb, "shell")
    sb.sh(f"cat > {AUTH_RULE_PATH}", input=AUTH_RULE).check()
    sb.run("chpasswd", input="carol:s3cret\n").check()
    sb.run("systemctl", "restart", "polkit").check()

    def screen() -> str:
        return sb.run("tmux", "-S", sock, "capture-pane", "-p", "-t", "watch", user="carol").stdout

    def shows(text: str) -> str:
        until(lambda: text in screen(), f"watch's terminal showing {text!r}")
        return screen()

    def press(*keys: str) -> None:
        sb.run("tmux", "-S", sock, "send-keys", "-t", "watch", *keys, user="carol").check()

    try:
        # In a login session of hers, as she would run it: polkit finds the terminal's agent.
        sb.run(
            "su",
            "-l",
            "carol",
            "-c",
            f"tmux -S {sock} -f /dev/null new-session -d "
            "-s watch -x 140 -y 30 'hostagentctl --system watch'",
        ).check()
        rows = [line.split()[0] for line in shows(roots).splitlines()[3:] if line.strip()]
        for _ in range(rows.index(roots)):
            press("Down")
        for attempt in ("cancel", "password"):
            press("s")
            shows(f"stop {roots}? (y/n)")
            press("y")
            shows("Password:")
            until(lambda: echo_is_off(sb), "the prompt reading the password")
            if attempt == "cancel":
                press("C-c")
                shows(f"stop {roots}: cancelled")
                assert settled(sb, roots)[0] == "running"
            else:
                press("-l", "s3cret")
                press("Enter")
                shows(f"stop {roots}: done")
                assert settled(sb, roots)[0] == "stopped"
        assert "hostagent ·" in screen(), "watch's own screen is back"
    finally:
        sb.run("tmux", "-S", sock, "kill-server", user="carol")
        sb.run("rm", "-f", AUTH_RULE_PATH)
        sb.run("systemctl", "restart", "polkit")
        sb.ctl("rm", roots)


def keys(sb: Sandbox, *keys: str, sock: str = SOCK) -> None:
    sb.run("tmux", "-S", sock, "send-keys", "-t", "watch", *keys, user="alice").check()


def coloured(sb: Sandbox, word: str, sock: str = SOCK) -> set[str]:
    """The SGR parameters in force where word is drawn on the watch's screen, read from tmux's
    own record of each cell (capture-pane -e)."""
    screen = sb.run(
        "tmux", "-S", sock, "capture-pane", "-e", "-p", "-t", "watch", user="alice"
    ).stdout
    found: set[str] = set()
    for match in re.finditer(r"((?:\x1b\[[\d;]*m)+)" + re.escape(word), screen):
        for params in re.findall(r"\x1b\[([\d;]*)m", match.group(1)):
            found |= set(params.split(";"))
    return found


def test_watch_previews_colours_and_its_keys_create_type_filter_kill_and_remove(
    sb: Sandbox, watching: str
) -> None:
    until_watch_shows(sb, watching)
    rows = [line.split()[0] for line in watch_screen(sb).splitlines()[3:] if line.strip()]
    for _ in range(rows.index(watching)):
        keys(sb, "Down")
    until_watch_shows(sb, f"── {watching} ")  # the preview follows the selection
    keys(sb, "Enter")  # attach: the session's own tmux, in watch's terminal
    until_watch_shows(sb, "[main] 0:")
    keys(sb, "C-b", "d")  # its tmux's detach: back in watch
    until_watch_shows(sb, "connected ·")
    keys(sb, "t")
    until_watch_shows(sb, f"type into {watching}:")
    keys(sb, "-l", "hello from watch")
    keys(sb, "Enter")
    screen = until_watch_shows(sb, "You said: hello from watch")  # in the preview
    assert f"typed into {watching}: done" in screen
    assert "36" in coloured(sb, "idle")  # cyan
    sb.ctl("send", watching, "/ask").check()
    until_watch_shows(sb, "blocked")
    assert "31" in coloured(sb, "blocked")  # red
    # n: a new session, made where watch runs, as the user who runs it.
    keys(sb, "n")
    keys(sb, "-l", "shell made-in-watch")
    keys(sb, "Enter")
    until_watch_shows(sb, "new made-in-watch: done")
    assert settled(sb, "made-in-watch")[0] == "running"
    try:
        keys(sb, "/")
        keys(sb, "-l", "made-in")
        keys(sb, "Enter")
        screen = until_watch_shows(sb, "1 session matching 'made-in'")
        assert watching not in screen.split("── ")[0]
        keys(sb, "x")
        until_watch_shows(sb, "kill made-in-watch? (y/n)")
        keys(sb, "y")
        until_watch_shows(sb, "kill made-in-watch: done")
        assert settled(sb, "made-in-watch")[0] in ("stopped", "failed")
        # Its preview is the last screen its shell drew, not tmux's padding and dead line.
        until(
            lambda: "alice@" in watch_screen(sb).split("── made-in-watch ")[-1],
            "the ended session's last screen in the preview",
        )
        assert "Pane is dead" not in watch_screen(sb)
        keys(sb, "d")
        keys(sb, "y")
        until_watch_shows(sb, "rm made-in-watch: done")
        assert sb.ctl("status", "made-in-watch", system=True).returncode == 4
    finally:
        sb.ctl("rm", "made-in-watch")


def test_watch_has_no_colour_with_no_color(sb: Sandbox) -> None:
    name = create(sb, "demo-agent", user="alice")
    sock = "/tmp/plain.sock"
    try:
        sb.run(
            "tmux",
            "-S",
            sock,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "watch",
            "-x",
            "140",
            "-y",
            "30",
            "NO_COLOR=1 hostagentctl --system watch",
            user="alice",
        ).check()
        deadline = time.monotonic() + 20
        while (
            "idle"
            not in sb.run(
                "tmux", "-S", sock, "capture-pane", "-p", "-t", "watch", user="alice"
            ).stdout
        ):
            assert time.monotonic() < deadline, "the plain watch never showed the idle agent"
            time.sleep(0.1)
        assert not {"31", "32", "36", "33"} & coloured(sb, "idle", sock)
    finally:
        sb.run("tmux", "-S", sock, "kill-server", user="alice")
        sb.ctl("rm", name)


def test_the_client_library_reports_gone_back_and_a_new_version(sb: Sandbox) -> None:
    name = create(sb, "shell")

    async def follow() -> list[tuple[str, str, str]]:
        seen: list[tuple[str, str, str]] = []
        changed = asyncio.Event()
        follower: Follower

        def on_change() -> None:
            seen.append((follower.link.value, follower.version, follower.updated_from))
            changed.set()

        async def until(test: object) -> None:
            while not test():  # type: ignore[operator]
                changed.clear()
                await asyncio.wait_for(changed.wait(), 30)

        async def connect() -> Client:
            return await Client.connect(True, sb.bus_address)

        follower = Follower(connect, on_change)
        await follower.start()
        await until(lambda: follower.link is Link.CONNECTED and name in follower.sessions)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sb.daemon_kill)
        await until(lambda: follower.link is Link.GONE)
        # An upgrade: the daemon comes back reporting another version.
        await loop.run_in_executor(None, upgrade, sb)
        await until(lambda: follower.link is Link.CONNECTED and follower.updated_from)
        assert name in follower.sessions
        follower.close()
        return seen

    try:
        seen = asyncio.run(follow())
        assert ("gone", "0.2.0", "") in seen
        assert seen[-1] == ("connected", "0.2.0+upgrade", "0.2.0")
    finally:
        sb.run(
            "rm",
            "-rf",
            "/etc/systemd/system/hostagent.service.d/version.conf",
            "/opt/hostagent-next",
        )
        sb.run("systemctl", "daemon-reload")
        sb.daemon_restart()
        sb.ctl("rm", name)


def upgrade(sb: Sandbox) -> None:
    """Install a "new release" beside the checkout and start the daemon from it."""
    sb.sh(
        "rm -rf /opt/hostagent-next && mkdir -p /opt/hostagent-next"
        " && cp -r /opt/hostagent/hostagent /opt/hostagent-next/"
        " && sed -i 's/^__version__ = .*/__version__ = \"0.2.0+upgrade\"/'"
        " /opt/hostagent-next/hostagent/__init__.py"
        " && printf '[Service]\\nExecStart=\\nExecStart=/usr/bin/env"
        " PYTHONPATH=/opt/hostagent-next /usr/bin/python3 -m hostagent.daemon.main --system\\n'"
        " > /etc/systemd/system/hostagent.service.d/version.conf && systemctl daemon-reload"
    ).check()
    sb.daemon_start()


def alice(sb: Sandbox, *argv: str) -> str:
    return sb.run(*argv, user="alice").check().stdout


@pytest.fixture
def desktop(sb: Sandbox) -> Iterator[None]:
    """A headless desktop for alice, and her own hostagent."""
    sb.daemon_start(user="alice")
    with headless_desktop(sb):
        yield
    sb.run("tmux", "-S", "/tmp/attached.sock", "kill-server", user="alice")
    sb.daemon_stop(user="alice")


def test_notify_outlives_a_notification_server_that_hangs(sb: Sandbox, desktop: None) -> None:
    sb.ctl(
        "new",
        "--preset",
        "demo-agent",
        "--name",
        "hung-up",
        "--cwd",
        "/tmp",
        "-e",
        "DEMO_AGENT_THINK=0",
        user="alice",
    ).check()
    try:
        sb.ctl("wait", "hung-up", "--for", "idle", "--timeout", "20", user="alice").check()
        notifier(sb)
        sb.run(
            "systemctl", "--user", "kill", "--signal=SIGSTOP", "test-dunst", user="alice"
        ).check()
        sb.ctl("send", "hung-up", "/ask", user="alice").check()

        def notifier_says(text: str) -> bool:
            log = sb.run("journalctl", "_SYSTEMD_USER_UNIT=test-notify.service", "-o", "cat")
            return text in log.stdout

        until(
            lambda: notifier_says("No notification shown for hung-up: Notify got no reply"),
            "the call to the hung server given up",
            timeout=30,
        )
        sb.run(
            "systemctl", "--user", "kill", "--signal=SIGCONT", "test-dunst", user="alice"
        ).check()
        sb.ctl("kill", "--whom", "all", "hung-up", user="alice").check()
        until(lambda: notifier_says("Notified: hung-up exited"), "the next notification shown")
        assert alice(sb, "systemctl", "--user", "is-active", "test-notify").strip() == "active"
    finally:
        sb.ctl("rm", "hung-up", user="alice")


def test_notify_raises_blocked_and_exited_and_attach_opens_a_terminal(
    sb: Sandbox, desktop: None
) -> None:
    sb.ctl(
        "new", "--preset", "demo-agent", "--name", "wants-you", "--cwd", "/tmp", user="alice"
    ).check()
    try:
        assert (
            sb.ctl(
                "wait", "wants-you", "--for", "idle", "--timeout", "20", user="alice"
            ).stdout.strip()
            == "idle"
        )
        # Type=notify: systemd-run returns once the notifier follows the daemon.
        notifier(sb, "--terminal", "tmux -S /tmp/attached.sock new-session -d")
        sb.ctl("send", "wants-you", "/ask", user="alice").check()
        until(lambda: displayed(sb) == 1, "a notification for the blocked agent")
        # dunst's default action is what a click does: Attach.
        alice(sb, "dunstctl", "action", "0")
        until(
            lambda: (
                "Do you want to proceed?"
                in sb.run(
                    "tmux", "-S", "/tmp/attached.sock", "capture-pane", "-p", user="alice"
                ).stdout
            ),
            "a terminal attached to the session",
        )
        until(lambda: displayed(sb) == 0, "the notification closed after its action")
        assert summaries(sb)[0] == "wants-you asks"  # its question, told with its choices
        sb.ctl("kill", "--whom", "all", "wants-you", user="alice").check()
        until(lambda: displayed(sb) == 1, "a notification for the exited agent")
        alice(sb, "dunstctl", "close")
        assert summaries(sb)[0] == "wants-you exited"
    finally:
        sb.ctl("rm", "wants-you", user="alice")


def test_notify_tells_a_question_and_its_button_answers_it(sb: Sandbox, desktop: None) -> None:
    """The agent's question is told with its words and a button per choice; pressing one
    answers it as a key in the terminal would. A question answered elsewhere takes its
    notification with it."""
    sb.ctl(
        "new",
        "--preset",
        "demo-agent",
        "--name",
        "asker",
        "--cwd",
        "/tmp",
        "-e",
        "DEMO_AGENT_THINK=0",
        user="alice",
    ).check()
    try:
        sb.ctl("wait", "asker", "--for", "idle", "--timeout", "20", user="alice").check()
        notifier(sb)
        sb.ctl("send", "asker", "/ask", user="alice").check()
        until(lambda: displayed(sb) == 1, "a notification for the question")
        press(sb, "1. Yes")
        until(
            lambda: "Proceeding." in sb.ctl("capture", "asker", user="alice").stdout,
            "the agent took the answer from the notification's button",
        )
        until(lambda: displayed(sb) == 0, "the notification closed after its button")
        assert summaries(sb)[0] == "asker asks"
        logs = sb.ctl("logs", "asker", user="alice").stdout
        assert "answered 'Yes'" in logs and "(hostagent" in logs and "notify" in logs, logs
        # Asked again, and answered in the terminal: the notification goes with the question.
        sb.ctl("wait", "asker", "--for", "idle", "--timeout", "20", user="alice").check()
        sb.ctl("send", "asker", "/ask", user="alice").check()
        until(lambda: displayed(sb) == 1, "a notification for the second question")
        sb.ctl("answer", "asker", "no", user="alice").check()
        until(lambda: displayed(sb) == 0, "the notification withdrawn with its question")
    finally:
        sb.ctl("rm", "asker", user="alice")


def test_notify_says_when_a_budget_stopped_a_session(sb: Sandbox, desktop: None) -> None:
    """alice's own daemon with a budget of one token a session: her first turn passes it, the
    session stops at the turn's end, and her desktop hears why."""
    config = "/home/alice/.config/hostagent/hostagent.yaml"
    sb.sh(
        f"mkdir -p {config.rsplit('/', 1)[0]} && cat > {config}",
        input="budgets:\n  session:\n    tokens_per_day: 1\n",
        user="alice",
    ).check()
    sb.ctl("reload", user="alice").check()
    sb.ctl(
        "new",
        "--preset",
        "demo-agent",
        "--name",
        "spender",
        "--cwd",
        "/tmp",
        "-e",
        "DEMO_AGENT_THINK=0",
        user="alice",
    ).check()
    try:
        sb.ctl("wait", "spender", "--for", "idle", "--timeout", "20", user="alice").check()
        notifier(sb)
        sb.ctl("send", "spender", "spend it", user="alice").check()
        until(lambda: displayed(sb) == 1, "a notification for the budget")
        alice(sb, "dunstctl", "close")
        history = json.loads(alice(sb, "dunstctl", "history"))["data"][0]
        assert history[0]["summary"]["data"] == "spender stopped: over budget"
        assert "it used 1250 tokens today, the budget is 1" in history[0]["body"]["data"]
    finally:
        sb.ctl("rm", "spender", user="alice")
        sb.run("rm", "-f", config)
        sb.ctl("reload", user="alice")
