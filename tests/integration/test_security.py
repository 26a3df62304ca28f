"""Multi-user hosts on a real systemd, bus and polkit: who may act on
whose session, and that nobody gets a process running as anyone but themselves."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.integration.helpers import agent_process, create, props, record, settled
from tests.sandbox import Sandbox

pytestmark = pytest.mark.core  # The core, run again on Debian 13 (dev/test).

POLKIT_RULE = """\
polkit.addRule(function(action, subject) {
    if (action.id == "org.hostagent.HostAgent1.manage-any" && subject.user == "carol") {
        return polkit.Result.YES;
    }
});
"""
RULE_PATH = "/etc/polkit-1/rules.d/50-hostagent-test.rules"
DENIED = ("Access denied", "Authentication is required")


@pytest.fixture
def carol_is_admin(sb: Sandbox) -> Iterator[None]:
    sb.sh(f"cat > {RULE_PATH}", input=POLKIT_RULE).check()
    # polkitd reloads its rules on a change; it says so on the bus and in its journal.
    sb.run("systemctl", "restart", "polkit").check()
    yield
    sb.run("rm", "-f", RULE_PATH)
    sb.run("systemctl", "restart", "polkit")


@pytest.fixture
def alices(sb: Sandbox) -> Iterator[str]:
    name = create(sb, "demo-agent", user="alice")
    yield name
    sb.ctl("rm", name)


def as_user(sb: Sandbox, user: str, *args: str) -> tuple[int, str]:
    result = sb.ctl(*args, user=user, system=True)
    return result.returncode, result.stderr


ACTS = [
    ("stop",),
    ("kill", "--whom", "agent"),
    ("resume",),
    ("rm",),
    ("send", "NAME", "hello"),
    ("capture",),
    ("attach",),
]


def act(verb: tuple[str, ...], name: str) -> list[str]:
    """The hostagentctl arguments of one acting verb on session name."""
    if "NAME" in verb:
        return [name if a == "NAME" else a for a in verb]
    return [*verb, name]


def test_bob_can_list_alices_session_but_not_act_on_it(sb: Sandbox, alices: str) -> None:
    code, _ = as_user(sb, "bob", "list")
    assert code == 0 and alices in sb.ctl("list", user="bob", system=True).stdout
    assert props(sb, alices, user="bob")["Owner"] == sb.uid("alice")
    for verb in ACTS:
        code, err = as_user(sb, "bob", *act(verb, alices))
        assert code != 0, verb
        assert any(d in err for d in DENIED), (verb, err)
    assert settled(sb, alices) == ("running", "active", "running")


def test_without_interactive_authorization_bob_is_told_it_could_help(
    sb: Sandbox, alices: str
) -> None:
    path = f"/org/hostagent/HostAgent1/session/{alices.replace('-', '_2d')}"
    result = sb.run(
        "busctl",
        "--allow-interactive-authorization=no",
        "call",
        "org.hostagent.HostAgent1",
        path,
        "org.hostagent.HostAgent1.Session",
        "Stop",
        user="bob",
    )
    assert result.returncode != 0
    assert "Interactive authentication required" in result.stderr or (
        "Authentication is required" in result.stderr
    )


def test_root_and_a_polkit_admin_may_act(sb: Sandbox, alices: str, carol_is_admin: None) -> None:
    assert as_user(sb, "carol", "capture", alices)[0] == 0
    assert as_user(sb, "carol", "stop", alices)[0] == 0
    assert settled(sb, alices) == ("stopped", "", "stopped")
    assert as_user(sb, "carol", "resume", alices)[0] == 0
    assert sb.ctl("stop", alices).returncode == 0  # root
    assert sb.ctl("resume", alices).returncode == 0
    # Acting for alice never makes the session anyone else's.
    assert agent_process(sb, alices).env["USER"] == "alice"
    assert (
        sb.run("stat", "-c", "%U", f"/proc/{agent_process(sb, alices).pid}").stdout.strip()
        == "alice"
    )


def test_without_polkit_only_root_acts_on_others_sessions(
    sb: Sandbox, alices: str, carol_is_admin: None
) -> None:
    sb.run("systemctl", "mask", "--runtime", "--now", "polkit").check()
    try:
        code, err = as_user(sb, "carol", "stop", alices)
        assert code != 0 and "Access denied" in err
        assert sb.ctl("stop", alices).returncode == 0
    finally:
        sb.run("systemctl", "unmask", "--runtime", "polkit").check()
        sb.run("systemctl", "start", "polkit").check()


def test_only_root_creates_for_another_user(sb: Sandbox) -> None:
    code, err = as_user(sb, "alice", "new", "--preset", "shell", "--uid", str(sb.uid("bob")))
    assert code != 0 and "Only root may create a session for another user" in err
    name = create(sb, "shell", "--uid", str(sb.uid("bob")))
    try:
        assert props(sb, name)["Owner"] == sb.uid("bob")
        assert agent_process(sb, name, user="bob").env["USER"] == "bob"
    finally:
        sb.ctl("rm", name)


def test_alice_gets_nothing_running_as_anyone_else(sb: Sandbox) -> None:
    uid = sb.uid("alice")
    # A fake tmux and a fake sh first on her PATH: whatever runs them would write a mark.
    sb.sh(
        "mkdir -p /home/alice/bin && for f in tmux sh cat python3; do"
        " printf '#!/bin/sh\\nid -u > /tmp/ran-$(id -u)-%s\\nexec /usr/bin/%s \"$@\"\\n' $f $f"
        " > /home/alice/bin/$f; chmod +x /home/alice/bin/$f; done"
        " && ln -sfn /root /home/alice/rootlink && ln -sfn /etc/shadow /home/alice/shadowlink",
        user="alice",
    ).check()
    hostile = [
        "-e",
        "PATH=/home/alice/bin:/usr/bin:/bin",
        "-e",
        "LD_PRELOAD=/home/alice/evil.so",
        "-e",
        "PYTHONPATH=/home/alice/bin",
        "-e",
        "HOME=/root",
        "-e",
        "XDG_CONFIG_HOME=/home/alice/bin",
    ]
    for cwd, expected in (("/root", "not accessible"), ("/home/alice/rootlink", "not accessible")):
        code, err = as_user(sb, "alice", "new", "--preset", "shell", "--cwd", cwd, *hostile)
        assert code != 0 and expected in err, (cwd, err)
    code, err = as_user(
        sb, "alice", "new", "--preset", "shell", "--cwd", "/home/alice/shadowlink", *hostile
    )
    assert code != 0 and "not a directory" in err
    name = create(
        sb,
        "shell",
        *hostile,
        "--",
        "-c",
        "id -G > /tmp/agent-groups; id -u > /tmp/agent-uid; exec sleep 600",
        user="alice",
    )
    try:
        sb.run("timeout", "10", "sh", "-c", "until [ -s /tmp/agent-uid ]; do sleep 0.1; done")
        assert sb.run("cat", "/tmp/agent-uid").stdout.strip() == str(uid)
        # Her groups, the supplementary ones included, and nothing of root's.
        groups = sb.run("id", "-G", "alice").check().stdout.split()
        assert sorted(sb.run("cat", "/tmp/agent-groups").stdout.split()) == sorted(groups)
        sb.ctl("capture", name, user="alice", system=True).check()
        sb.ctl("stop", name, user="alice", system=True).check()
        sb.ctl("resume", name, user="alice", system=True).check()
        marks = sb.sh("ls /tmp/ran-* 2>/dev/null || true").stdout.split()
        assert all(m.startswith(f"/tmp/ran-{uid}-") for m in marks), marks
    finally:
        sb.ctl("rm", name)
        sb.sh("rm -f /tmp/agent-uid /tmp/agent-groups /tmp/ran-*")


def test_her_own_config_and_presets_do_not_reach_the_system_daemon(sb: Sandbox) -> None:
    sb.sh(
        "mkdir -p ~/.config/hostagent/presets.d && printf 'name: evil\\ncommand: [id]\\n'"
        " > ~/.config/hostagent/presets.d/evil.yaml"
        " && printf 'limits:\\n  tasks_max: 1\\n' > ~/.config/hostagent/hostagent.yaml",
        user="alice",
    ).check()
    sb.ctl("reload").check()
    assert "evil" not in sb.ctl("presets", user="alice", system=True).stdout


def test_files_are_private_and_the_environment_stays_off_the_bus(sb: Sandbox) -> None:
    name = create(sb, "shell", "-e", "SECRET_TOKEN=hunter2", user="alice")
    try:
        uid = sb.uid("alice")
        modes = sb.run(
            "stat",
            "-c",
            "%n %a %U",
            f"/run/hostagent/{uid}",
            "/var/lib/hostagent/sessions",
            f"/var/lib/hostagent/sessions/{name}.yaml",
        ).stdout.splitlines()
        assert modes == [
            f"/run/hostagent/{uid} 700 alice",
            "/var/lib/hostagent/sessions 700 root",
            f"/var/lib/hostagent/sessions/{name}.yaml 600 root",
        ]
        assert record(sb, name)["env"] == {"SECRET_TOKEN": "hunter2"}  # kept for resume
        everything = json.dumps(props(sb, name, user="bob"))
        introspection = sb.run(
            "busctl",
            "introspect",
            "org.hostagent.HostAgent1",
            f"/org/hostagent/HostAgent1/session/{name.replace('-', '_2d')}",
            user="bob",
        ).stdout
        assert "hunter2" not in everything and "hunter2" not in introspection
    finally:
        sb.ctl("rm", name)


def test_only_root_may_own_the_bus_name(sb: Sandbox) -> None:
    result = sb.run(
        "busctl",
        "call",
        "org.freedesktop.DBus",
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus",
        "RequestName",
        "su",
        "org.hostagent.HostAgent1",
        "0",
        user="alice",
    )
    assert result.returncode != 0 and "Access denied" in result.stderr


def scope_value(sb: Sandbox, name: str, prop: str) -> str:
    return sb.run("systemctl", "show", "-P", prop, f"hostagent-{name}.scope").stdout.strip()


@pytest.mark.needs_limits
def test_a_fork_bomb_and_a_memory_hog_are_contained_by_their_scopes(sb: Sandbox) -> None:
    bystander = create(sb, "demo-agent", user="alice")
    bomb = create(sb, "shell", "-p", "TasksMax=40", "--", "-c", "sleep 600", user="alice")
    hog = create(sb, "shell", "-p", "MemoryMax=64M", "--", "-c", "sleep 600", user="alice")
    try:
        # The limits are real cgroup limits before anything hostile runs.
        scope = f"/hostagent.slice/hostagent-u{sb.uid('alice')}.slice/hostagent-{bomb}.scope"
        pids = sb.run("cat", sb.cgroup_file(scope, "pids", "pids.max"))
        assert pids.stdout.strip() == "40", "TasksMax is not enforced here; refusing to fork-bomb"
        assert scope_value(sb, hog, "MemoryMax") == str(64 << 20)
        sock = f"/run/hostagent/{sb.uid('alice')}"
        sb.run(
            "tmux",
            "-S",
            f"{sock}/{bomb}.sock",
            "respawn-pane",
            "-k",
            "-t",
            "main",
            "bash -c 'f() { f & f & wait; }; f'",
            user="alice",
        ).check()
        sb.run(
            "tmux",
            "-S",
            f"{sock}/{hog}.sock",
            "respawn-pane",
            "-k",
            "-t",
            "main",
            "python3 -c 'b = [bytearray(1 << 20) for _ in range(1024)]; print(\"got\", 1 << 30)';"
            " sleep 600",
            user="alice",
        ).check()
        deadline = time.monotonic() + 30
        while int(scope_value(sb, bomb, "TasksCurrent") or 0) < 40:
            assert time.monotonic() < deadline, "the fork bomb never reached its limit"
            time.sleep(0.1)
        assert int(scope_value(sb, bomb, "TasksCurrent")) <= 40
        # The others and the daemon keep working meanwhile.
        assert sb.ctl("list", user="alice", system=True).returncode == 0
        assert "> " in sb.ctl("capture", bystander, user="alice", system=True).stdout
        screen = sb.screen_showing(hog, "Killed", user="alice", timeout=30)
        assert screen and "got 1073741824" not in screen  # killed inside its scope
        sb.ctl("kill", "--whom", "all", "-s", "9", bomb, user="alice", system=True).check()
        sb.ctl("wait", "--for", "exited", "--timeout", "60", bomb).check()
        assert settled(sb, bomb)[0] == "failed"  # killed by SIGKILL, and says so
        assert settled(sb, bystander) == ("running", "active", "running")
    finally:
        sb.ctl("rm", bystander, bomb, hog)
