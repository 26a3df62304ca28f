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
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable

from dbus_fast import BusType
from dbus_fast.aio import MessageBus

from hostagent.bus.call import PROPERTIES, CallError, call
from hostagent.errors import HostAgentError

SYSTEM_SOCKET = "/run/dbus/system_bus_socket"
CONNECT_TIMEOUT = 30.0  # seconds for ssh and the bridge to answer
MACHINED = "org.freedesktop.machine1"


class TransportError(HostAgentError):
    dbus_name = "org.hostagent.HostAgent1.Error.Transport"


class Relay:
    """ssh's stdio, offered as a socket in a private directory, pumped by a thread of its own.

    A thread, not the event loop: dbus-fast 1.84 reads its authentication reply with a
    blocking recv, which would stop a pump that lives on the same loop.
    """

    def __init__(self, argv: list[str]) -> None:
        self.directory = tempfile.mkdtemp(prefix="hostagentctl-")
        os.chmod(self.directory, 0o700)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(f"{self.directory}/bus")
        self.listener.listen(1)
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.thread = threading.Thread(target=self._pump, name="ssh-relay", daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"unix:path={self.directory}/bus"

    def _pump(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return  # closed before anyone connected
        ssh_out = self.process.stdout.fileno()
        begun = False  # the client said BEGIN: past authentication
        with conn, selectors.DefaultSelector() as sel, contextlib.suppress(OSError, ValueError):
            # (OSError, ValueError: the relay was closed under the pump, which ends it too.)
            sel.register(conn, selectors.EVENT_READ)
            sel.register(ssh_out, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    if key.fileobj is conn:
                        data = conn.recv(65536)
                        if not data:
                            return
                        begun = begun or b"BEGIN\r\n" in data
                        try:
                            self.process.stdin.write(data)
                            self.process.stdin.flush()
                        except BrokenPipeError:
                            data = b""
                    else:
                        data = os.read(ssh_out, 65536)
                        if data:
                            conn.sendall(data)
                    if not data:
                        # ssh is gone. During authentication say so in the protocol: dbus-fast
                        # 1.84 spins on an end of file there instead of failing.
                        if not begun:
                            conn.sendall(b"ERROR ssh exited\r\n")
                        return

    def why(self) -> str:
        """ssh's last word on stderr, once it has exited."""
        assert self.process.stderr is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=2)
        if self.process.returncode is None:
            return ""
        lines = [x for x in self.process.stderr.read().decode(errors="replace").splitlines() if x]
        return lines[-1].strip() if lines else ""

    def close(self) -> None:
        self.listener.close()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def ssh_argv(host: str, remote: list[str], tty: bool = False) -> list[str]:
    """ssh running remote on host ("[user@]host[:port]", as systemctl -H takes it)."""
    port: list[str] = []
    if host.count(":") == 1 and not host.startswith("["):
        host, p = host.rsplit(":", 1)
        port = ["-p", p]
    return ["ssh", "-t" if tty else "-xT", *port, "--", host, *remote]


async def open_ssh(
    host: str, user_bus: bool, ssh_said: Callable[[str], None] | None = None
) -> tuple[MessageBus, Relay]:
    """The bus of host over ssh. What ssh says later (a host key added, a warning) goes to
    ssh_said, called from a thread of its own; by default to stderr, as ssh itself would
    write it, which a full-screen client (watch) must not let scribble on its screen."""
    relay = Relay(ssh_argv(host, ["systemd-stdio-bridge", *(["--user"] if user_bus else [])]))
    try:
        bus = await asyncio.wait_for(
            MessageBus(bus_address=relay.address).connect(), CONNECT_TIMEOUT
        )
    except Exception as e:
        why = relay.why() or str(e) or "no answer in time"
        relay.close()
        raise TransportError(
            f"{why}; check that 'ssh {host} systemd-stdio-bridge' works."
        ) from None
    threading.Thread(target=_copy_stderr, args=(relay.process, ssh_said), daemon=True).start()
    return bus, relay


def _copy_stderr(process: subprocess.Popen[bytes], said: Callable[[str], None] | None) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        text = line.decode(errors="replace")
        if said is None:
            sys.stderr.write(text)
        elif text.strip():
            said(text.strip())


async def machine_bus_address(machine: str) -> str:
    """The system bus of a local container, found through machined."""
    if machine in ("", ".host"):
        return f"unix:path={SYSTEM_SOCKET}"
    local = await MessageBus(bus_type=BusType.SYSTEM).connect()
    try:
        (path,) = await call(
            local,
            MACHINED,
            "/org/freedesktop/machine1",
            f"{MACHINED}.Manager",
            "GetMachine",
            "s",
            [machine],
        )
        (leader,) = await call(
            local,
            MACHINED,
            path,
            PROPERTIES,
            "Get",
            "ss",
            [f"{MACHINED}.Machine", "Leader"],
        )
    except CallError as e:
        raise TransportError(
            f"No machine '{machine}': {e.text or e.name}; 'machinectl list' shows them."
        ) from None
    finally:
        local.disconnect()
    return f"unix:path=/proc/{leader.value}/root{SYSTEM_SOCKET}"
