"""A fleet: three hosts, each a container running sshd and hostagent on a private network, and
a client whose alice names them once in her hosts file. Every host answers at once; a host
powered off is one line and holds up no other, and comes back with its sessions dormant."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator

import pytest

from tests.integration.helpers import (
    create,
    displayed,
    headless_desktop,
    notifier,
    summaries,
    until,
)
from tests.integration.mcpclient import McpClient
from tests.integration.network import address, fleet_machines
from tests.sandbox import Result, Sandbox

pytestmark = pytest.mark.skipif(
    not shutil.which("ip") or not shutil.which("sshd", path="/usr/sbin"),
    reason="needs iproute2 and openssh-server (./dev/setup installs them)",
)
HOSTS = ("one", "two", "three")
PER_HOST = 20


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[Sandbox, dict[str, Sandbox]]]:
    """(client, {host name: server}): alice's hosts file names the three servers, each with
    PER_HOST of her shell sessions."""
    with fleet_machines(HOSTS) as (client, servers):
        for server in servers.values():
            for i in range(PER_HOST):
                create(server, "shell", user="alice", name=f"job-{i}")
        yield client, servers


ACTIVATION = "/usr/share/dbus-1/system-services/org.hostagent.HostAgent1.service"


def test_a_host_that_fails_says_why_in_one_line(fleet: tuple[Sandbox, dict[str, Sandbox]]) -> None:
    """No daemon (a host where hostagent is stopped and cannot be activated, as if it were not
    installed), and no permission (a user whose key that host refuses): one line each, the
    reachable host's sessions listed, exit status 1."""
    client, servers = fleet
    two = servers["two"]
    two.sh(
        f"systemctl stop hostagent && mv {ACTIVATION} /root/ && busctl call "
        "org.freedesktop.DBus / org.freedesktop.DBus ReloadConfig"
    ).check()
    try:
        listed = ctl(
            client,
            "-H",
            f"alice@{address(1)}",
            "-H",
            f"alice@{address(2)}",
            "-H",
            f"bob@{address(3)}",
            "list",
            "-o",
            "json",
        )
        assert listed.returncode == 1
        lines = listed.stderr.strip().splitlines()
        assert len(lines) == 2, lines
        assert lines[0].startswith(f"{address(2)}: no daemon: "), lines
        assert lines[1].startswith(f"{address(3)}: permission: "), lines
        assert "Permission denied" in lines[1]
        assert {r["host"] for r in json.loads(listed.stdout)} == {address(1)}
    finally:
        two.sh(
            f"mv /root/{ACTIVATION.rsplit('/', 1)[1]} {ACTIVATION} && busctl call "
            "org.freedesktop.DBus / org.freedesktop.DBus ReloadConfig"
        )
        two.daemon_start()


@contextlib.contextmanager
def made(server: Sandbox, preset: str, name: str) -> Iterator[str]:
    """alice's session on server, removed after."""
    try:
        yield create(server, preset, user="alice", name=name)
    finally:
        server.ctl("rm", name)


def ctl(client: Sandbox, *args: str, timeout: float = 90) -> Result:
    return client.run("hostagentctl", *args, user="alice", timeout=timeout)


def test_a_fleet_list_has_every_hosts_sessions(fleet: tuple[Sandbox, dict[str, Sandbox]]) -> None:
    client, _ = fleet
    listed = ctl(client, "--fleet", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert sorted((r["host"], r["name"]) for r in rows) == sorted(
        (h, f"job-{i}") for h in HOSTS for i in range(PER_HOST)
    )
    assert {r["state"] for r in rows} == {"running"}
    table = ctl(client, "--fleet", "list", "job-1")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["HOST", "NAME", "PRESET"]
    assert [line.split()[:2] for line in lines[1:4]] == [[h, "job-1"] for h in HOSTS]
    assert "3 sessions listed on 3 of 3 hosts." in table.stdout
    # -H repeated is the same fleet, named by the hosts' addresses.
    two = ctl(client, "-H", f"alice@{address(1)}", "-H", f"alice@{address(2)}", "list", "job-1")
    assert [line.split()[0] for line in two.stdout.splitlines()[1:3]] == [address(1), address(2)]


def test_a_verb_acts_on_the_host_its_session_is_on(
    fleet: tuple[Sandbox, dict[str, Sandbox]],
) -> None:
    client, servers = fleet
    with made(servers["two"], "shell", "only-on-two") as only:
        assert ctl(client, "--fleet", "stop", only).returncode == 0
        assert servers["two"].ctl("status", only).returncode == 3  # stopped there
        # A name that every host has must say which: HOST:NAME.
        both = ctl(client, "--fleet", "stop", "job-3")
        assert both.returncode == 1
        assert "use one of one:job-3, two:job-3, three:job-3." in both.stderr
        assert ctl(client, "--fleet", "stop", "three:job-3").returncode == 0
        assert servers["three"].ctl("status", "job-3").returncode == 3
        assert servers["one"].ctl("status", "job-3").returncode == 0
        status = ctl(client, "--fleet", "status", "three:job-3")
        assert status.returncode == 3 and "stopped" in status.stdout
        assert ctl(client, "--fleet", "resume", "three:job-3", only).returncode == 0
        assert servers["three"].ctl("status", "job-3").returncode == 0


def test_wait_returns_the_first_session_on_any_host(
    fleet: tuple[Sandbox, dict[str, Sandbox]],
) -> None:
    client, servers = fleet
    with made(servers["three"], "demo-agent", "agent-on-three") as name:
        done = ctl(client, "--fleet", "wait", "one:job-5", name, "--for", "idle", "--timeout", "60")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() in (["three:agent-on-three", "idle"], ["one:job-5", "idle"])


def test_an_agent_drives_sessions_on_every_host_through_the_mcp_server(
    fleet: tuple[Sandbox, dict[str, Sandbox]],
) -> None:
    """hostagentctl --fleet mcp: every host's sessions of alice's as HOST:NAME; a session made
    on the host its name says, typed into and waited on there, its answer read back."""
    client, servers = fleet
    server = McpClient(client, "alice", "--fleet")
    made_name = ""
    try:
        listed = server.tool("list_sessions")["structuredContent"]["sessions"]
        assert {"one:job-1", "two:job-1", "three:job-1"} <= {r["name"] for r in listed}
        # Given a directory: the server's own is alice's home, which an agent may not write.
        created = server.tool(
            "create_session",
            preset="demo-agent",
            name="two:from-mcp",
            cwd="/tmp",
            env={"DEMO_AGENT_THINK": "0"},
        )
        assert created["isError"] is False, created
        made_name = created["structuredContent"]["name"]
        assert made_name == "two:from-mcp"
        assert servers["two"].ctl("status", "from-mcp").returncode == 0  # it runs on two
        waited = server.tool("wait_sessions", names=[made_name], timeout_seconds=60)
        assert waited["structuredContent"]["name"] == made_name, waited
        assert server.tool("send_text", name=made_name, text="hello fleet")["isError"] is False
        until(
            lambda: (
                "You said: hello fleet"
                in server.tool("capture_screen", name=made_name)["structuredContent"]["screen"]
            ),
            "the answer read back from host two",
        )
        ambiguous = server.tool("stop_session", name="job-2")
        assert ambiguous["isError"] is True
        assert "use one of one:job-2" in ambiguous["content"][0]["text"], ambiguous
    finally:
        assert server.close() == 0
        if made_name:
            servers["two"].ctl("rm", "--force", "from-mcp")


def test_notifications_from_two_hosts_name_their_host(
    fleet: tuple[Sandbox, dict[str, Sandbox]],
) -> None:
    client, servers = fleet
    with (
        headless_desktop(client),
        made(servers["one"], "demo-agent", "asks") as asks,
        made(servers["two"], "demo-agent", "asks-too") as asks_too,
    ):
        for host, name in (("one", asks), ("two", asks_too)):
            servers[host].ctl("wait", name, "--for", "idle", "--timeout", "30").check()
        notifier(client, "--fleet")
        assert (
            "Following one, two, three"
            in client.run(
                "journalctl", "_SYSTEMD_USER_UNIT=test-notify.service", "-o", "cat"
            ).stdout
        )
        servers["one"].ctl("send", asks, "/ask").check()
        servers["two"].ctl("send", asks_too, "/ask").check()
        until(lambda: displayed(client) == 2, "a notification from each host")
        client.run("dunstctl", "close-all", user="alice").check()
        assert sorted(summaries(client)[:2]) == ["one:asks asks", "two:asks-too asks"]
        # The inbox of the whole fleet, and an answer given on the host the session is on.
        inbox = ctl(client, "--fleet", "inbox", "-o", "json")
        assert inbox.returncode == 0, inbox.stderr
        waiting = {q["session"]: q["choices"] for q in json.loads(inbox.stdout)}
        assert waiting == {"one:asks": ["Yes", "No"], "two:asks-too": ["Yes", "No"]}, waiting
        assert ctl(client, "--fleet", "answer", "one:asks", "yes").returncode == 0
        until(
            lambda: "Proceeding." in servers["one"].ctl("capture", asks).stdout,
            "the answer typed on host one",
        )


SOCK = "/tmp/fleet-watch.sock"


def watch_shows(client: Sandbox, *texts: str, timeout: float = 60) -> str:
    """The fleet watch's screen once it shows every one of texts."""
    deadline = time.monotonic() + timeout
    while True:
        screen = client.run(
            "tmux", "-S", SOCK, "capture-pane", "-p", "-t", "watch", user="alice"
        ).stdout
        if all(t in screen for t in texts):
            return screen
        assert time.monotonic() < deadline, f"the watch never showed {texts}:\n{screen}"
        time.sleep(0.2)


def test_a_host_powered_off_is_shown_down_and_comes_back_dormant(
    fleet: tuple[Sandbox, dict[str, Sandbox]],
) -> None:
    client, servers = fleet
    client.run(
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
        "160",
        "-y",
        "100",
        "hostagentctl --fleet watch",
        user="alice",
    ).check()
    try:
        watch_shows(client, "one: connected · two: connected · three: connected", "job-19")
        # The first row is one's job-0: its screen below the table, and s, y stop it there.
        watch_shows(client, "── one:job-0 ")
        client.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "s", "y", user="alice").check()
        until(lambda: servers["one"].ctl("status", "job-0").returncode == 3, "one's job-0 stopped")
        assert servers["two"].ctl("status", "job-0").returncode == 0
        client.run("tmux", "-S", SOCK, "send-keys", "-t", "watch", "r", user="alice").check()
        until(lambda: servers["one"].ctl("status", "job-0").returncode == 0, "job-0 resumed")
        servers["three"].poweroff()
        watch_shows(client, "three: down (")
        # The others keep updating.
        with made(servers["one"], "shell", "after-the-fall"):
            screen = watch_shows(client, "after-the-fall", "one: connected · two: connected")
            assert "three: down (" in screen
        down = ctl(client, "--fleet", "list", "-o", "json")
        assert down.returncode == 1
        assert down.stderr.startswith("three: unreachable: ")
        assert len(down.stderr.strip().splitlines()) == 1
        assert {r["host"] for r in json.loads(down.stdout)} == {"one", "two"}
        servers["three"].boot()
        servers["three"].daemon_start()
        watch_shows(client, "three: connected", "dormant", timeout=90)
        back = ctl(client, "--fleet", "list", "-o", "json")
        assert back.returncode == 0, back.stderr
        there = {r["name"]: r["state"] for r in json.loads(back.stdout) if r["host"] == "three"}
        assert there == {f"job-{i}": "dormant" for i in range(PER_HOST)}
    finally:
        client.run("tmux", "-S", SOCK, "kill-server", user="alice")
