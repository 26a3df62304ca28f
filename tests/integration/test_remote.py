"""hostagentctl on other machines, as systemctl does it: -H over ssh and
systemd-stdio-bridge to a second container that runs sshd, and -M through machined."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.integration.helpers import create
from tests.integration.network import address, ssh_client, ssh_server, switch
from tests.sandbox import Sandbox

pytestmark = pytest.mark.skipif(
    not shutil.which("ip") or not shutil.which("sshd", path="/usr/sbin"),
    reason="needs iproute2 and openssh-server (./dev/setup installs them)",
)
SERVER_IP = address(1)
TARGET = f"alice@{SERVER_IP}"


@pytest.fixture(scope="module")
def machines() -> Iterator[tuple[Sandbox, Sandbox]]:
    """(client, server): two containers on a private network (tests/integration/network.py)."""
    with (
        switch(2) as nets,
        Sandbox(netns=nets[1]) as server,
        Sandbox(netns=nets[0]) as client,
    ):
        server.daemon_start()
        ssh_server(server, ssh_client(client))
        yield client, server


def remote(client: Sandbox, *args: str) -> subprocess.CompletedProcess[str] | object:
    return client.run("hostagentctl", "-H", TARGET, *args, user="alice", timeout=60)


def test_the_verbs_work_on_another_host_over_ssh(machines: tuple[Sandbox, Sandbox]) -> None:
    client, server = machines
    name = create(server, "demo-agent", user="alice")
    try:
        listed = remote(client, "--json", "list")
        assert listed.returncode == 0, listed.stderr  # type: ignore[attr-defined]
        rows = json.loads(listed.stdout)  # type: ignore[attr-defined]
        assert name in [r["name"] for r in rows]
        # The daemon there sees alice as the caller: she may act on her session.
        assert remote(client, "stop", name).returncode == 0  # type: ignore[attr-defined]
        assert server.ctl("--json", "status", name).returncode == 3
        assert remote(client, "resume", name).returncode == 0  # type: ignore[attr-defined]
        assert "running" in remote(client, "status", name).stdout  # type: ignore[attr-defined]
        # Nothing on the client: its own bus has no hostagent, and none was started.
        assert client.run("systemctl", "is-active", "hostagent").stdout.strip() != "active"
    finally:
        server.ctl("rm", name)


def test_attach_goes_through_ssh_with_a_terminal(machines: tuple[Sandbox, Sandbox]) -> None:
    client, server = machines
    name = create(server, "demo-agent", user="alice")
    try:
        client.run(
            "tmux",
            "-S",
            "/tmp/remote.sock",
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            f"hostagentctl -H {TARGET} attach {name}",
            user="alice",
        ).check()
        deadline = time.monotonic() + 20
        while True:  # the remote screen arrives through ssh; read it as a person would
            screen = client.run(
                "tmux", "-S", "/tmp/remote.sock", "capture-pane", "-p", user="alice"
            ).stdout
            if "Demo Agent" in screen:
                break
            assert time.monotonic() < deadline, screen
            time.sleep(0.2)
    finally:
        client.run("tmux", "-S", "/tmp/remote.sock", "kill-server", user="alice")
        server.ctl("rm", name)


def test_a_host_that_cannot_be_reached_gets_one_line(machines: tuple[Sandbox, Sandbox]) -> None:
    client, _ = machines
    result = client.run("hostagentctl", "-H", f"alice@{SERVER_IP}:2", "list", user="alice")
    assert result.returncode == 1
    assert result.stderr.startswith(f"Failed to connect to alice@{SERVER_IP}:2:")
    assert len(result.stderr.strip().splitlines()) == 1


def test_machine_by_name_through_machined(machines: tuple[Sandbox, Sandbox]) -> None:
    _, server = machines
    name = create(server, "shell", user="alice")
    try:
        # Register a "container" whose leader shares this machine's root: machined then
        # says where its bus is, as it would for any nspawn container.
        server.run("systemd-run", "--unit=fake-machine", "sleep", "600").check()
        pid = server.run("systemctl", "show", "-P", "MainPID", "fake-machine").stdout.strip()
        server.run(
            "busctl",
            "call",
            "org.freedesktop.machine1",
            "/org/freedesktop/machine1",
            "org.freedesktop.machine1.Manager",
            "RegisterMachine",
            "sayssus",
            "inner",
            "0",
            "hostagent-test",
            "container",
            pid,
            "/",
        ).check()
        for machine in ("inner", ".host"):
            listed = server.run("hostagentctl", "-M", machine, "--no-legend", "list")
            assert name in listed.stdout, (machine, listed.stderr)
        missing = server.run("hostagentctl", "-M", "nope", "list")
        assert missing.returncode == 1 and "machinectl list" in missing.stderr
    finally:
        server.run("systemctl", "stop", "fake-machine")
        server.ctl("rm", name)
