"""A user's own daemon for an install without the distro package (pip, pipx).

pip and pipx put programs into a venv, never units into systemd's directories, so such an
install has no user unit and no session-bus activation file, and nothing answers
``hostagentctl``. ``hostagent --install-user`` writes both into the user's own home, where the
user's service manager and session bus look for them (``$XDG_DATA_HOME``, by default
``~/.local/share``), pointing at the Python that runs this very install;
``hostagent --uninstall-user`` stops the daemon and takes both away again. The unit says what the
packaged user unit (units/user/hostagent.service) says, but for ExecStart=; a test holds the two
together.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from hostagent import BUS_NAME

UNIT = "hostagent.service"
_RUN = "-m hostagent.daemon.main --user"

_UNIT_TEXT = """\
# Written by 'hostagent --install-user' for a hostagent installed with pip or pipx;
# 'hostagent --uninstall-user' removes it.
[Unit]
Description=hostagent: AI coding agent sessions as systemd scopes (user)
Documentation=man:hostagent(8)

[Service]
Type=notify
NotifyAccess=main
BusName={bus_name}
ExecStart={python} {run}
ExecReload=/usr/bin/busctl --user call {bus_name} /org/hostagent/HostAgent1 {bus_name}.Manager Reload
Restart=on-failure
RestartSec=1s

[Install]
WantedBy=default.target
"""

_ACTIVATION_TEXT = """\
# Written by 'hostagent --install-user'; 'hostagent --uninstall-user' removes it.
[D-BUS Service]
Name={bus_name}
Exec={python} {run}
SystemdService={unit}
"""


def data_home(env: Mapping[str, str]) -> Path:
    xdg = env.get("XDG_DATA_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg)
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".local" / "share"


def unit_path(env: Mapping[str, str]) -> Path:
    return data_home(env) / "systemd" / "user" / UNIT


def activation_path(env: Mapping[str, str]) -> Path:
    return data_home(env) / "dbus-1" / "services" / f"{BUS_NAME}.service"


def unit_text(python: str) -> str:
    return _UNIT_TEXT.format(bus_name=BUS_NAME, python=python, run=_RUN)


def activation_text(python: str) -> str:
    return _ACTIVATION_TEXT.format(bus_name=BUS_NAME, python=python, run=_RUN, unit=UNIT)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


# A command run for the user: its exit code and what it said on stderr (OSError, or
# subprocess.TimeoutExpired, when it could not run).
Run = Callable[[list[str]], tuple[int, str]]


def run_command(argv: list[str]) -> tuple[int, str]:
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return ran.returncode, ran.stderr.strip()


def _tell_managers(run: Run) -> list[str]:
    """Make the user's service manager and session bus read their
    directories again; what failed, in words (the files are in place either way, and a new
    login reads them)."""
    problems = []
    for argv in (
        ["systemctl", "--user", "daemon-reload"],
        # dbus-daemon notices new service files itself; dbus-broker reloads on ReloadConfig.
        [
            "busctl",
            "--user",
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "ReloadConfig",
        ],
    ):
        try:
            code, said = run(argv)
        except (OSError, subprocess.TimeoutExpired) as e:
            problems.append(f"'{' '.join(argv)}' failed: {e}")
            continue
        if code != 0:
            problems.append(f"'{' '.join(argv)}' failed: {said}")
    return problems


def install(
    env: Mapping[str, str], python: str = sys.executable, run: Run = run_command
) -> tuple[list[str], list[str]]:
    """Write the user unit and the activation file; (what was done, what failed)."""
    done = []
    for path, text in (
        (unit_path(env), unit_text(python)),
        (activation_path(env), activation_text(python)),
    ):
        _write(path, text)
        done.append(f"Created {path}.")
    return done, _tell_managers(run)


def uninstall(env: Mapping[str, str], run: Run = run_command) -> tuple[list[str], list[str]]:
    """Stop the user's daemon (its sessions keep running in their scopes) and remove both
    files; (what was done, what failed)."""
    problems = []
    if unit_path(env).exists():
        code, said = run(["systemctl", "--user", "stop", UNIT])
        if code != 0:
            problems.append(f"'systemctl --user stop {UNIT}' failed: {said}")
    done = []
    for path in (unit_path(env), activation_path(env)):
        if path.exists():
            path.unlink()
            done.append(f"Removed {path}.")
    return done, problems + (_tell_managers(run) if done else [])
