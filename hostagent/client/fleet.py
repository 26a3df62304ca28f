"""A fleet: several hosts' daemons asked at once, each over the transport ``-H`` uses.

Teams run agents on several build hosts. The hosts are named once, in a hosts file
(``~/.config/hostagent/hosts``, or ``/etc/hostagent/hosts`` for everyone) or by ``-H``
repeated, and every host is asked concurrently with a time bound of its own, so a host that is
down is one line saying why and never holds up the others. Nothing runs on the hosts but
hostagent itself, reached as ``systemctl -H`` reaches systemd (ssh and systemd-stdio-bridge).

A session is named ``HOST:NAME`` where its name alone is not unique across the fleet.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from hostagent.client.library import Client
from hostagent.errors import AccessDenied, HostAgentError, InvalidArgs, NoSuchSession

T = TypeVar("T")

SYSTEM_HOSTS = Path("/etc/hostagent/hosts")
HOST_TIMEOUT = 20.0  # seconds for one host to connect and answer; the others do not wait
LOCAL = "."  # a hosts file's target for this machine's own daemon


@dataclass(frozen=True)
class Host:
    """name: what the fleet calls it (the HOST column, HOST:NAME); target: ssh's
    [USER@]HOST[:PORT], or LOCAL for this machine."""

    name: str
    target: str

    @property
    def local(self) -> bool:
        return self.target == LOCAL

    async def connect(self, system: bool, ssh_said: Callable[[str], None] | None = None) -> Client:
        """This host's bus: over ssh, or this machine's own for LOCAL."""
        return await Client.connect(
            system, host=None if self.local else self.target, ssh_said=ssh_said
        )


class HostsFileError(InvalidArgs):
    pass


def parse_hosts(text: str, source: str) -> list[Host]:
    """A hosts file: one host a line, ``NAME TARGET`` or a bare TARGET (named by its host
    part); ``#`` starts a comment. Pure."""
    hosts: list[Host] = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2:
            raise HostsFileError(
                f"{source}:{number}: '{raw.strip()}' is more than NAME and [USER@]HOST[:PORT]."
            )
        hosts.append(host_of(words[-1], words[0] if len(words) == 2 else None))
    return unique(hosts, source)


def host_of(target: str, name: str | None = None) -> Host:
    """A host given by its target alone is named by its host part: alice@box:2222 is box."""
    if name is None:
        name = "localhost" if target == LOCAL else target.rsplit("@", 1)[-1]
        if name.count(":") == 1 and not name.startswith("["):
            name = name.split(":")[0]
    if not name or ":" in name or "/" in name:
        raise HostsFileError(f"'{name}' cannot name a host: no ':' or '/' in a host's name.")
    return Host(name, target)


def unique(hosts: Iterable[Host], source: str) -> list[Host]:
    seen: dict[str, Host] = {}
    for host in hosts:
        if host.name in seen and seen[host.name] != host:
            raise HostsFileError(
                f"{source}: two hosts are named '{host.name}'; give one a name of its own "
                "('NAME TARGET')."
            )
        seen[host.name] = host
    return list(seen.values())


def hosts_file(home: str | None = None) -> Path:
    """The user's hosts file (XDG_CONFIG_HOME's hostagent/hosts)."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(
        home or os.path.expanduser("~"), ".config"
    )
    return Path(config) / "hostagent" / "hosts"


def fleet_hosts(targets: list[str], from_files: bool) -> list[Host]:
    """The hosts named by -H (in their order), then, with from_files, the user's hosts file,
    or the system's when the user has none."""
    hosts = [host_of(t) for t in targets]
    if from_files:
        for path in (hosts_file(), SYSTEM_HOSTS):
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            except OSError as e:
                raise HostsFileError(f"Cannot read {path}: {e.strerror}.") from None
            hosts += parse_hosts(text, str(path))
            break
        else:
            raise HostsFileError(
                f"No hosts: write one per line in {hosts_file()} (or {SYSTEM_HOSTS}), "
                "or name them with -H."
            )
    return unique(hosts, "the hosts given")


@dataclass(frozen=True)
class Answer(Generic[T]):
    """One host's answer: its value, or why it gave none (down is set)."""

    host: Host
    value: T | None = None
    down: str = ""


# What a host that gives no answer raises: its connection (ssh, its bus; EOFError when it
# closes in the middle of a question) or its daemon's word.
HOST_DOWN = (OSError, ValueError, EOFError, HostAgentError)  # TimeoutError is an OSError


def why_down(e: BaseException, timeout: float) -> str:
    """One line on why a host gave no answer: unreachable, no daemon, or permission. Pure."""
    if isinstance(e, TimeoutError):
        return f"unreachable: no answer in {timeout:g} s"
    if isinstance(e, EOFError):
        return "unreachable: the connection closed before the host answered"
    message = getattr(e, "message", "") or str(e) or type(e).__name__
    name = getattr(e, "dbus_name", "")
    # The name has no owner and cannot be activated: not installed, masked, or failing to start.
    no_daemon = ("ServiceUnknown", "NameHasNoOwner", "UnitMasked", "UnitInactive")
    if name.endswith(no_daemon) or ".Error.Spawn." in name or "was not provided" in message:
        return f"no daemon: {message} (systemctl status hostagent there)"
    if isinstance(e, AccessDenied) or "Permission denied" in message:
        return f"permission: {message}"
    if name.endswith("Transport") or isinstance(e, OSError):
        return f"unreachable: {message}"
    return message


async def ask(
    hosts: list[Host],
    system: bool,
    question: Callable[[Client], Awaitable[T]],
    timeout: float = HOST_TIMEOUT,
) -> list[Answer[T]]:
    """question asked of every host at once, each within timeout; in the hosts' order."""

    async def one(host: Host) -> Answer[T]:
        client: Client | None = None

        async def asked() -> T:
            nonlocal client
            client = await host.connect(system)
            return await question(client)

        try:
            return Answer(host, await asyncio.wait_for(asked(), timeout))
        except HOST_DOWN as e:
            return Answer(host, down=why_down(e, timeout))
        finally:
            if client is not None:
                await client.aclose()

    return list(await asyncio.gather(*(one(h) for h in hosts)))


def split_name(name: str, hosts: list[Host]) -> tuple[Host | None, str]:
    """HOST:NAME for a host of the fleet; any other name is a session's name alone. Pure."""
    head, sep, rest = name.partition(":")
    if sep:
        for host in hosts:
            if host.name == head:
                return host, rest
    return None, name


def locate(name: str, listings: dict[Host, list[str]], hosts: list[Host]) -> tuple[Host, str]:
    """The host a session named name (or HOST:NAME) runs on, from each reachable host's names.
    Pure; NoSuchSession when no host has it or several do."""
    host, bare = split_name(name, hosts)
    if host is not None:
        return host, bare
    having = [h for h in hosts if bare in listings.get(h, [])]
    if len(having) == 1:
        return having[0], bare
    if not having:
        raise NoSuchSession(f"No session '{bare}' on any host of the fleet that answered.")
    names = ", ".join(f"{h.name}:{bare}" for h in having)
    raise NoSuchSession(f"'{bare}' names a session on several hosts: use one of {names}.")
