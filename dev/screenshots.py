"""Make the pictures in docs/: ``hostagentctl watch`` with a few sessions, and a notification
from hostagent-notify as Debian's dunst shows it. Boots the test sandbox; needs root, and
ImageMagick's ``import`` for the notification.

    sudo .venv/bin/python dev/screenshots.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tests.sandbox import Sandbox

DOCS = Path(__file__).resolve().parent.parent / "docs"


def text_png(text: str, path: Path) -> None:
    lines = text.rstrip("\n").splitlines()
    fig = plt.figure(figsize=(11, 0.22 * len(lines) + 0.3), dpi=110)
    fig.patch.set_facecolor("#1e1e1e")
    fig.text(
        0.01,
        0.98,
        "\n".join(lines),
        family="monospace",
        fontsize=9,
        color="#e0e0e0",
        va="top",
        ha="left",
    )
    fig.savefig(path, facecolor=fig.get_facecolor())
    plt.close(fig)


def wait_for(check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.2)


def main() -> None:
    with Sandbox(name="shots") as sb:
        sb.daemon_start()
        for name, preset, user in (
            ("fix-login", "demo-agent", "alice"),
            ("refactor-db", "demo-agent", "alice"),
            ("docs-pass", "demo-agent", "bob"),
            ("ops-shell", "shell", "bob"),
        ):
            sb.ctl(
                "new", "--preset", preset, "--name", name, "--cwd", "/tmp", user=user, system=True
            ).check()
        sb.ctl("send", "refactor-db", "/work 60", user="alice", system=True)
        sb.ctl("send", "fix-login", "/ask", user="alice", system=True)
        sb.ctl("stop", "docs-pass", user="bob", system=True)
        sb.run(
            "tmux",
            "-S",
            "/tmp/w.sock",
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            "100",
            "-y",
            "24",
            "hostagentctl --system watch",
            user="alice",
        ).check()
        wait_for(
            lambda: (
                "working"
                in sb.run("tmux", "-S", "/tmp/w.sock", "capture-pane", "-p", user="alice").stdout
            )
        )
        # alice's blocked agent, selected: its screen fills the preview.
        sb.run("tmux", "-S", "/tmp/w.sock", "send-keys", "Down", user="alice").check()
        wait_for(
            lambda: (
                "Do you want"
                in sb.run("tmux", "-S", "/tmp/w.sock", "capture-pane", "-p", user="alice").stdout
            )
        )
        time.sleep(1)  # let the first counters arrive; a picture, not a test
        screen = sb.run("tmux", "-S", "/tmp/w.sock", "capture-pane", "-p", user="alice").stdout
        text_png(screen, DOCS / "watch.png")

        # A notification, on a headless X server with dunst, for alice's own daemon.
        sb.daemon_start(user="alice")
        sb.run(
            "systemd-run",
            "--user",
            "--unit=x",
            "/usr/bin/Xvfb",
            ":7",
            "-screen",
            "0",
            "640x160x24",
            user="alice",
        ).check()
        sb.run(
            "systemd-run",
            "--user",
            "--unit=d",
            "--setenv=DISPLAY=:7",
            "/usr/bin/dunst",
            user="alice",
        ).check()
        wait_for(
            lambda: (
                sb.run(
                    "busctl", "--user", "status", "org.freedesktop.Notifications", user="alice"
                ).returncode
                == 0
            )
        )
        sb.ctl(
            "new", "--preset", "demo-agent", "--name", "fix-login", "--cwd", "/tmp", user="alice"
        ).check()
        sb.ctl("wait", "fix-login", "--for", "idle", "--timeout", "20", user="alice")
        sb.run(
            "systemd-run",
            "--user",
            "--unit=n",
            "-p",
            "Type=notify",
            "/usr/bin/hostagent-notify",
            user="alice",
        ).check()
        sb.ctl("send", "fix-login", "/ask", user="alice").check()
        wait_for(
            lambda: sb.run("dunstctl", "count", "displayed", user="alice").stdout.strip() == "1"
        )
        time.sleep(0.5)  # dunst draws after it counts
        sb.run(
            "import", "-display", ":7", "-window", "root", "/var/tmp/notify.png", user="alice"
        ).check()
        (DOCS / "notify.png").write_bytes((sb.root / "var/tmp/notify.png").read_bytes())
    print("wrote docs/watch.png and docs/notify.png")


if __name__ == "__main__":
    main()
