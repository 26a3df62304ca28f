"""Hosts on a private network, with ssh between them, for the tests of -H and of a fleet.

Each host is a sandbox in a network namespace of its own; a switch (a bridge in one more
namespace) joins them at 10.93.0.N/24, N counting from 1. Nothing of it reaches this machine's
own network. ssh is real: the client's alice has a key that each server's alice trusts.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator

from tests.sandbox import Sandbox

PREFIX = "10.93.0"


def address(n: int) -> str:
    return f"{PREFIX}.{n + 1}"


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True)


@contextlib.contextmanager
def switch(count: int) -> Iterator[list[str]]:
    """count network namespaces, cabled to one switch; host n is at address(n)."""
    tag = secrets.token_hex(3)
    hub, spaces = f"ha-sw-{tag}", [f"ha-{n}-{tag}" for n in range(count)]
    try:
        for space in (hub, *spaces):
            _ip("netns", "add", space)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        for n, space in enumerate(spaces):
            _ip(
                "link",
                "add",
                f"h{n}{tag}",
                "netns",
                space,
                "type",
                "veth",
                "peer",
                "name",
                f"p{n}{tag}",
                "netns",
                hub,
            )
            _ip("-n", hub, "link", "set", f"p{n}{tag}", "master", "br0", "up")
            _ip("-n", space, "addr", "add", f"{address(n)}/24", "dev", f"h{n}{tag}")
            _ip("-n", space, "link", "set", f"h{n}{tag}", "up")
            _ip("-n", space, "link", "set", "lo", "up")
        yield spaces
    finally:
        for space in (*spaces, hub):
            subprocess.run(["ip", "netns", "del", space], check=False)


def ssh_client(client: Sandbox) -> str:
    """alice's key on the client, and an ssh that asks nothing (the key, new host keys
    accepted); returns the public key."""
    client.run(
        "ssh-keygen",
        "-q",
        "-t",
        "ed25519",
        "-N",
        "",
        "-f",
        "/home/alice/.ssh/id_ed25519",
        user="alice",
    ).check()
    client.sh(
        "printf 'Host *\\n  StrictHostKeyChecking accept-new\\n  BatchMode yes\\n' > ~/.ssh/config",
        user="alice",
    ).check()
    return client.run("cat", "/home/alice/.ssh/id_ed25519.pub").check().stdout


def ssh_server(server: Sandbox, key: str) -> None:
    """sshd running on server, enabled for its next boots, trusting key for alice."""
    server.run("ssh-keygen", "-A").check()
    server.run("systemctl", "enable", "--now", "ssh").check()
    server.sh(
        "mkdir -p -m 700 ~/.ssh && cat >> ~/.ssh/authorized_keys"
        " && chmod 600 ~/.ssh/authorized_keys",
        input=key,
        user="alice",
    ).check()


@contextlib.contextmanager
def fleet_machines(names: tuple[str, ...]) -> Iterator[tuple[Sandbox, dict[str, Sandbox]]]:
    """A client and a server per name on one switch, each server running hostagent and sshd;
    the client's alice names them in her hosts file (NAME alice@ADDRESS) and may ssh to each."""
    with switch(1 + len(names)) as nets, Sandbox(netns=nets[0]) as client:
        key = ssh_client(client)
        servers: dict[str, Sandbox] = {}
        try:
            for n, name in enumerate(names, 1):
                servers[name] = server = Sandbox(netns=nets[n])
                server.boot()
                server.daemon_start()
                ssh_server(server, key)
                # alice has been there once by hand, as an admin would: its host key is known.
                client.run("ssh", f"alice@{address(n)}", "true", user="alice").check()
            lines = "".join(f"{name} alice@{address(n)}\n" for n, name in enumerate(names, 1))
            client.sh(
                "mkdir -p ~/.config/hostagent && cat > ~/.config/hostagent/hosts",
                input=f"# alice's build hosts\n{lines}",
                user="alice",
            ).check()
            yield client, servers
        finally:
            for server in servers.values():
                server.destroy()
