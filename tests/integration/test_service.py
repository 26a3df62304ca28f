"""hostagent as a systemd service, end to end: the user manager's daemon
beside the system one, reload and configuration errors named by file and line, the stacks on
SIGUSR2, and the status it reports to systemd."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.helpers import create, new_name
from tests.sandbox import Sandbox

pytestmark = pytest.mark.core  # The core, run again on Debian 13 (dev/test).


def test_user_mode_daemon_under_systemd_user(sb: Sandbox) -> None:
    sb.daemon_start(user="alice")
    try:
        name = new_name()
        sb.ctl("new", "--preset", "shell", "--name", name, user="alice").check()
        cgroup = sb.run(
            "systemctl", "--user", "status", "--no-pager", f"hostagent-{name}.scope", user="alice"
        ).stdout
        assert "hostagent.slice" in cgroup and f"hostagent-{name}.scope" in cgroup
        info = json.loads(sb.ctl("--json", "info", user="alice").check().stdout)
        assert info["mode"] == "user"
        sb.ctl("rm", name, user="alice").check()
    finally:
        sb.daemon_stop(user="alice")


def test_reload_keeps_the_last_good_presets_and_names_the_line(sb: Sandbox) -> None:
    sb.sh(
        "mkdir -p /etc/hostagent/presets.d && printf 'name: mine\\ncommand: [bash]\\n'"
        " > /etc/hostagent/presets.d/mine.yaml"
    ).check()
    try:
        sb.ctl("reload").check()
        assert "mine" in sb.ctl("presets").stdout
        sb.sh("printf 'name: mine\\ncommand: bash\\n' > /etc/hostagent/presets.d/mine.yaml")
        err = sb.ctl("reload").stderr
        assert "/etc/hostagent/presets.d/mine.yaml:2: field 'command'" in err
        assert "mine" in sb.ctl("presets").stdout
    finally:
        sb.run("rm", "-f", "/etc/hostagent/presets.d/mine.yaml")
        sb.ctl("reload").check()


def test_broken_config_names_file_line_and_field(sb: Sandbox) -> None:
    sb.sh(
        "mkdir -p /etc/hostagent && printf 'tmux:\\n  columns: 5\\n'"
        " > /etc/hostagent/hostagent.yaml"
    ).check()
    try:
        sb.daemon_stop()
        sb.run("systemctl", "start", "hostagent").check()  # up, and refusing every call
        where = "/etc/hostagent/hostagent.yaml:2: field 'tmux.columns'"
        assert where in sb.journal()
        status = sb.run("systemctl", "show", "-P", "StatusText", "hostagent").stdout
        assert status.startswith("Refusing every call: ") and where in status, status
        assert where in sb.ctl("list").stderr
    finally:
        sb.run("rm", "-f", "/etc/hostagent/hostagent.yaml")
        sb.run("systemctl", "reload", "hostagent").check()


def test_sigusr2_writes_the_stacks_to_the_journal_and_the_daemon_serves_on(
    sb: Sandbox,
) -> None:
    pid = sb.daemon_pid()
    # To the daemon alone: its helpers (tmux clients) would die of USR2.
    sb.run("systemctl", "kill", "--kill-whom=main", "-s", "USR2", "hostagent").check()
    deadline = time.monotonic() + 10
    journal = ""
    # The dump arrives in several writes: wait for all of what is looked for.
    while not ("most recent call first" in journal and "daemon/main.py" in journal) and (
        time.monotonic() < deadline
    ):
        journal = sb.journal(lines=100)
        time.sleep(0.05)  # journald has no wait for a line; bounded by the deadline
    assert "most recent call first" in journal and "daemon/main.py" in journal
    assert sb.daemon_pid() == pid
    sb.ctl("list").check()


def test_daemon_reports_status_to_systemd(sb: Sandbox) -> None:
    """STATUS= follows the counts, a burst folded into one update (daemon.STATUS_INTERVAL)."""
    create(sb)
    deadline = time.monotonic() + 10
    status = ""
    while "running" not in status and time.monotonic() < deadline:
        status = sb.run("systemctl", "show", "-P", "StatusText", "hostagent").stdout
        time.sleep(0.05)  # systemd has no wait for a property here (busctl wait is v256+)
    assert "running" in status
    assert sb.run("systemctl", "show", "-P", "Type", "hostagent").stdout.strip() == "notify"
