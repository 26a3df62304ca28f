"""Reaching another machine's bus, the way systemctl's -H and -M do.

``-H [user@]host``: ssh runs ``systemd-stdio-bridge`` on the host, which joins the bus there;
its stdio carries the D-Bus stream. dbus-fast speaks only to sockets, so the stream is relayed
through a socket in a private temporary directory. Peer credentials cannot cross ssh: the bridge
takes the client's EXTERNAL claim on trust, and itself is authenticated to its bus as the ssh
user, which is who the daemon sees.

``-M machine``: machined names the machine's leader process, and the machine's system bus is
its socket under /proc/LEADER/root (root only, as with systemctl). ``.host`` is this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from dbus_fast import BusType
from dbus_fast.aio import MessageBus

from .dbuscall import CallError, call
from .errors import HostAgentError

SYSTEM_SOCKET = "/run/dbus/system_bus_socket"
CONNECT_TIMEOUT = 30.0  # seconds for ssh and the bridge to answer
MACHINED = "org.freedesktop.machine1"


class TransportError(HostAgentError):
    dbus_name = "org.hostagent.HostAgent1.Error.Transport"


@dataclass
class Relay:
    """A socket in a private directory whose one connection is piped to ssh's stdio."""

    process: asyncio.subprocess.Process
    directory: str
    server: asyncio.AbstractServer | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"unix:path={self.directory}/bus"

    def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        if self.server is not None:
            self.server.close()
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


def ssh_argv(host: str, remote: list[str], tty: bool = False) -> list[str]:
    """ssh running remote on host ("[user@]host[:port]", as systemctl -H takes it)."""
    port: list[str] = []
    if host.count(":") == 1 and not host.startswith("["):
        host, p = host.rsplit(":", 1)
        port = ["-p", p]
    return ["ssh", "-t" if tty else "-xT", *port, "--", host, *remote]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()
    writer.close()


async def open_ssh(host: str, user_bus: bool) -> tuple[MessageBus, Relay]:
    process = await asyncio.create_subprocess_exec(
        *ssh_argv(host, ["systemd-stdio-bridge", *(["--user"] if user_bus else [])]),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    relay = Relay(process, tempfile.mkdtemp(prefix="hostagentctl-"))
    os.chmod(relay.directory, 0o700)

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert process.stdin is not None and process.stdout is not None
        relay.tasks += [
            asyncio.ensure_future(_pipe(reader, process.stdin)),
            asyncio.ensure_future(_pipe(process.stdout, writer)),
        ]

    relay.server = await asyncio.start_unix_server(on_client, path=f"{relay.directory}/bus")
    connecting = asyncio.ensure_future(MessageBus(bus_address=relay.address).connect())
    exited = asyncio.ensure_future(process.wait())
    done, _ = await asyncio.wait(
        [connecting, exited], timeout=CONNECT_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
    )
    if connecting in done and connecting.exception() is None:
        exited.cancel()
        relay.tasks.append(asyncio.ensure_future(_relay_stderr(process)))
        return connecting.result(), relay
    connecting.cancel()
    exited.cancel()
    relay.close()
    why = await _last_line(process) or (
        "no answer in time" if not done else "the bus there refused the connection"
    )
    raise TransportError(f"{why}; check that 'ssh {host} systemd-stdio-bridge' works.")


async def _last_line(process: asyncio.subprocess.Process) -> str:
    """ssh's last word on stderr: why it could not connect."""
    assert process.stderr is not None
    with contextlib.suppress(TimeoutError):
        err = await asyncio.wait_for(process.stderr.read(), 2)
        lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""
    return ""


async def _relay_stderr(process: asyncio.subprocess.Process) -> None:
    """ssh's warnings, shown as ssh would show them."""
    assert process.stderr is not None
    while line := await process.stderr.readline():
        sys.stderr.write(line.decode(errors="replace"))


async def machine_bus_address(machine: str) -> str:
    """The system bus of a local container, found through machined."""
    if machine in ("", ".host"):
        return f"unix:path={SYSTEM_SOCKET}"
    local = await MessageBus(bus_type=BusType.SYSTEM).connect()
    try:
        (path,) = await call(
            local, MACHINED, "/org/freedesktop/machine1", f"{MACHINED}.Manager",
            "GetMachine", "s", [machine],
        )  # fmt: skip
        (leader,) = await call(
            local, MACHINED, path, "org.freedesktop.DBus.Properties", "Get", "ss",
            [f"{MACHINED}.Machine", "Leader"],
        )  # fmt: skip
    except CallError as e:
        raise TransportError(
            f"No machine '{machine}': {e.text or e.name}; 'machinectl list' shows them."
        ) from None
    finally:
        local.disconnect()
    return f"unix:path=/proc/{leader.value}/root{SYSTEM_SOCKET}"
