"""What many integration tests do with a session in the sandbox: create it, read it through
hostagentctl, its sidecar and systemd, and look at its agent process in /proc."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from hostagent.cli.ctl_output import snake
from hostagent.daemon.bus.session import SESSION
from hostagent.daemon.state.recordfile import checksum
from hostagent.usage import Usage
from tests.sandbox import Sandbox

SESSIONS_DIR = "/var/lib/hostagent/sessions"
COPIES_DIR = "/run/hostagent/records"  # each record's second copy, on tmpfs


def new_name() -> str:
    return f"t-{secrets.token_hex(3)}"


def create(
    sb: Sandbox,
    preset: str = "demo-agent",
    *extra: str,
    user: str | None = None,
    name: str | None = None,
    cwd: str = "/tmp",
) -> str:
    name = name or new_name()
    sb.ctl(
        "new", "--preset", preset, "--name", name, "--cwd", cwd, *extra, user=user, system=True
    ).check()
    return name


# status --json speaks snake_case; the tests speak the bus's property names.
_BUS_NAMES = {snake(p.name): p.name for p in SESSION.properties}


def props(sb: Sandbox, name: str, user: str | None = None) -> dict:
    data = json.loads(sb.ctl("--json", "status", name, user=user, system=True).stdout)
    return {_BUS_NAMES.get(k, k): v for k, v in data.items()}


def wait_screen(sb: Sandbox, name: str, text: str) -> str:
    screen = sb.screen_showing(name, text)
    if not screen:
        raise AssertionError(f"{text!r} never appeared on session {name}'s screen")
    return screen


def record(sb: Sandbox, name: str) -> dict | None:
    """The session's sidecar as the daemon wrote it, or None when there is none."""
    result = sb.run("cat", f"{SESSIONS_DIR}/{name}.yaml")
    return yaml.safe_load(result.stdout) if result.returncode == 0 else None


def rewrite_record(sb: Sandbox, name: str, **changes: object) -> None:
    """Change fields of a session's record as a restored backup would have them, keeping the
    record whole (its checksum recomputed): the daemon must be stopped."""
    data = record(sb, name)
    assert data is not None
    data.update(changes)
    data["checksum"] = checksum(data)
    sb.sh(f"cat > {SESSIONS_DIR}/{name}.yaml", input=yaml.safe_dump(data, sort_keys=False)).check()


def unit_state(sb: Sandbox, name: str) -> str:
    """The scope's ActiveState, or "" when systemd has no such unit loaded."""
    unit = f"hostagent-{name}.scope"
    out = sb.run("systemctl", "show", "-P", "LoadState,ActiveState", unit).stdout.split()
    return out[1] if out and out[0] == "loaded" else ""


def views(sb: Sandbox, name: str) -> tuple[str | None, str, str | None]:
    """(sidecar state, unit state, bus state); None where the record or object is absent."""
    rec = record(sb, name)
    result = sb.ctl("--json", "status", name)
    # status exits 3 for a session that is not running, as systemctl status does.
    bus = json.loads(result.stdout)["state"] if result.returncode in (0, 3) else None
    return (rec["state"] if rec else None, unit_state(sb, name), bus)


def agreeing(views: tuple[str | None, str, str | None]) -> bool:
    rec, unit, bus = views
    if rec is None:
        return bus is None and unit == ""
    return rec == bus and (rec == "running") == (unit in ("active", "activating"))


def settled(sb: Sandbox, name: str, timeout: float = 30.0) -> tuple[str | None, str, str | None]:
    """The three views of a session once they agree (a unit can take a moment to go away)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = views(sb, name)
        if agreeing(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"session {name}: record, unit and bus disagree: {seen}")
        time.sleep(0.05)


@dataclass
class AgentProcess:
    pid: int
    argv: list[str]
    env: dict[str, str]
    cwd: str


# The pid on the machine of the process in a session's scope that the session's own PID
# namespace numbers argv[2] (what its tmux says); argv[2] itself in a session without one.
_MACHINE_PID = """
import os, sys
unit, number = sys.argv[1], sys.argv[2]
found = number
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        status, cgroup = (open(f"/proc/{pid}/{f}").read() for f in ("status", "cgroup"))
    except OSError:
        continue
    ns = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
    if len(ns) > 1 and ns[-1] == number and f"/{unit}" in cgroup:
        found = pid
print(found)
"""


def machine_pid(sb: Sandbox, name: str, number: int | str) -> int:
    """A pid session name's tmux says, as the machine numbers it: the daemon gives a session
    a PID namespace of its own."""
    unit = f"hostagent-{name}.scope"
    return int(sb.run("python3", "-c", _MACHINE_PID, unit, str(number)).check().stdout)


def agent_process(sb: Sandbox, name: str, user: str = "alice") -> AgentProcess:
    """The process in the session's tmux pane, read from /proc inside the container."""
    uid = sb.uid(user)
    sock = f"/run/hostagent/{uid}/{name}.sock"
    number = (
        sb.run("tmux", "-S", sock, "display-message", "-p", "-t", "main", "#{pane_pid}", user=user)
        .check()
        .stdout.strip()
    )
    pid = machine_pid(sb, name, number)
    argv = sb.run("cat", f"/proc/{pid}/cmdline").check().stdout.split("\0")[:-1]
    env_items = sb.run("cat", f"/proc/{pid}/environ").check().stdout.split("\0")[:-1]
    cwd = sb.run("readlink", f"/proc/{pid}/cwd").check().stdout.strip()
    return AgentProcess(pid, argv, dict(e.split("=", 1) for e in env_items), cwd)


def until(check: object, what: str, timeout: float = 20.0) -> None:
    """Poll check (a real condition in the machine) until it holds; fail saying what never did."""
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.1)


# carol acts on others' sessions after typing her own password (polkit's auth_self).
AUTH_RULE = """\
polkit.addRule(function(action, subject) {
    if (action.id == "org.hostagent.HostAgent1.manage-any" && subject.user == "carol") {
        return polkit.Result.AUTH_SELF_KEEP;
    }
});
"""
AUTH_RULE_PATH = "/etc/polkit-1/rules.d/50-hostagent-auth-test.rules"


def echo_is_off(sb: Sandbox) -> bool:
    """Whether pkttyagent has turned its terminal's echo off: it reads the password only then,
    and flushes what was typed before."""
    script = (
        "for p in $(pgrep -x pkttyagent); do t=$(readlink /proc/$p/fd/0); "
        'case $t in /dev/pts/*) stty -F "$t" -a | grep -qw -- -echo && exit 0;; esac; done; exit 1'
    )
    return sb.sh(script).returncode == 0


def usage_counting(sb: Sandbox, name: str, user: str, calls: int, timeout: float = 20.0) -> Usage:
    """The session's Usage once it counts at least calls model calls (the daemon reads it
    when a turn ends)."""
    seen: list[Usage] = []

    def counted() -> bool:
        seen.append(Usage.from_dict(props(sb, name, user).get("Usage") or {}))
        return seen[-1].calls >= calls

    until(counted, f"session {name}'s usage of {calls} calls", timeout)
    return seen[-1]


def displayed(sb: Sandbox) -> int:
    """How many notifications alice's desktop shows now."""
    return int(sb.run("dunstctl", "count", "displayed", user="alice").stdout.strip() or 0)


def summaries(sb: Sandbox) -> list[str]:
    """The summaries of the notifications alice's desktop has closed, newest first."""
    history = json.loads(sb.run("dunstctl", "history", user="alice").check().stdout)
    return [n["summary"]["data"] for n in history["data"][0]]


DUNSTRC, DMENU, DUNST_PICK = "/tmp/test-dunstrc", "/tmp/test-dmenu", "/tmp/test-dunst-pick"


def press(sb: Sandbox, button: str) -> None:
    """Press the button of alice's notification whose words hold button: through dunst's
    context menu, as a person picks it there."""
    sb.sh(f"cat > {DUNST_PICK}", input=button, user="alice").check()
    sb.run("dunstctl", "context", user="alice").check()


def notifier(sb: Sandbox, *args: str) -> None:
    """alice's hostagent-notify (test-notify), with args; Type=notify: it is back once it
    follows the daemon, or every host it is given."""
    sb.run(
        "systemd-run",
        "--user",
        "--unit=test-notify",
        "-p",
        "Type=notify",
        "/usr/bin/hostagent-notify",
        *args,
        user="alice",
    ).check()


@contextlib.contextmanager
def headless_desktop(sb: Sandbox) -> Iterator[None]:
    """A headless desktop for alice: Xvfb and dunst (Debian's notification server) on her
    session bus; test-notify, a hostagent-notify a test starts, is stopped with it."""
    if not shutil.which("dunst") or not shutil.which("Xvfb"):
        pytest.skip("needs dunst and xvfb (./dev/setup installs them)")

    def alice(*argv: str) -> None:
        sb.run(*argv, user="alice").check()

    units = ("test-notify", "test-dunst", "test-xvfb")

    def gone() -> None:
        """None of the desktop's units loaded, whatever state an earlier run left them in."""
        for unit in units:
            sb.run("systemctl", "--user", "stop", unit, user="alice")
            sb.run("systemctl", "--user", "reset-failed", unit, user="alice")

    gone()
    # dunst's context menu (dunstctl context) runs dmenu with a line per action: a person
    # picks one. Here a stand-in picks the line that holds what DUNST_PICK names.
    sb.sh(f"cat > {DUNSTRC}", input=f"[global]\n    dmenu = {DMENU}\n", user="alice").check()
    sb.sh(
        f"cat > {DMENU} && chmod 755 {DMENU}",
        user="alice",
        input=f'#!/bin/sh\nexec grep -m1 -F -e "$(cat {DUNST_PICK})"\n',
    ).check()
    try:
        alice(
            "systemd-run",
            "--user",
            "--unit=test-xvfb",
            "/usr/bin/Xvfb",
            ":7",
            "-screen",
            "0",
            "1024x300x24",
        )
        alice(
            "systemd-run",
            "--user",
            "--unit=test-dunst",
            "--setenv=DISPLAY=:7",
            "/usr/bin/dunst",
            "-config",
            DUNSTRC,
        )
        # Under two lanes' load dunst can take its time to reach the bus: a bound, not a pace.
        until(
            lambda: (
                sb.run(
                    "busctl", "--user", "status", "org.freedesktop.Notifications", user="alice"
                ).returncode
                == 0
            ),
            "dunst on the bus",
            timeout=90,
        )
        yield
    finally:
        gone()
