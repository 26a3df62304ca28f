"""A fleet: three hosts, each a container running sshd and hostagent on a private network, and
a client whose alice names them once in her hosts file. Every host answers at once; a host
powered off is one line and holds up no other, and comes back with its sessions dormant."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator

import pytest

from tests.integration.helpers import create
from tests.integration.network import address, ssh_client, ssh_server, switch
from tests.sandbox import Result, Sandbox

pytestmark = pytest.mark.skipif(
    not shutil.which("ip") or not shutil.which("sshd", path="/usr/sbin"),
    reason="needs iproute2 and openssh-server (./dev/setup installs them)",
)
HOSTS = ("one", "two", "three")
PER_HOST = 20


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[Sandbox, dict[str, Sandbox]]]:
    """(client, {host name: server}): alice's hosts file names the three servers."""
    with switch(1 + len(HOSTS)) as nets, Sandbox(netns=nets[0]) as client:
        key = ssh_client(client)
        servers: dict[str, Sandbox] = {}
        try:
            for n, name in enumerate(HOSTS, 1):
                servers[name] = server = Sandbox(netns=nets[n])
                server.boot()
                server.daemon_start()
                ssh_server(server, key)
            lines = "".join(f"{name} alice@{address(n)}\n" for n, name in enumerate(HOSTS, 1))
            client.sh(
                "mkdir -p ~/.config/hostagent && cat > ~/.config/hostagent/hosts",
                input=f"# alice's build hosts\n{lines}",
                user="alice",
            ).check()
            for server in servers.values():
                for i in range(PER_HOST):
                    create(server, "shell", user="alice", name=f"job-{i}")
            yield client, servers
        finally:
            for server in servers.values():
                server.destroy()


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


def test_a_host_powered_off_is_one_line_and_comes_back_dormant(
    fleet: tuple[Sandbox, dict[str, Sandbox]],
) -> None:
    client, servers = fleet
    servers["three"].poweroff()
    down = ctl(client, "--fleet", "list", "-o", "json")
    assert down.returncode == 1
    assert down.stderr.startswith("three: unreachable: ")
    assert len(down.stderr.strip().splitlines()) == 1
    assert {r["host"] for r in json.loads(down.stdout)} == {"one", "two"}
    servers["three"].boot()
    servers["three"].daemon_start()
    back = ctl(client, "--fleet", "list", "-o", "json")
    assert back.returncode == 0, back.stderr
    there = {r["name"]: r["state"] for r in json.loads(back.stdout) if r["host"] == "three"}
    assert there == {f"job-{i}": "dormant" for i in range(PER_HOST)}
