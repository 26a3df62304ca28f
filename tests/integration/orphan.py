"""A call over a bus connection that outlived the process that opened it: run inside or outside
a session (``python3 -m tests.integration.orphan METHOD``, the checkout on PYTHONPATH).

The process connects and says Hello, then leaves the connection to a child and exits; once it
is gone (reaped), the child makes one Manager call and prints the reply's error name, or "ok". The
daemon must refuse such a call: it cannot tell which session the connection came from, and
must not take it for the owner's shell outside every session.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import time

from dbus_fast import Message

from tests.integration.bob import BUS, MANAGER, MANAGER_IFACE, SOCKET, RawReader, _raw_message

CALLS = {
    "ListSessions": ("", []),
    # A session with no sandbox at all, of the shell preset.
    "CreateSession": ("sssa{sv}", ["", "shell", "/tmp", {}]),
}


def gone(pid: int, timeout: float = 30) -> None:
    """Return once pid has exited and been reaped by the shell that ran it: while it is a
    zombie its pid still names it, and the daemon places the call by it (rightly: inside)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        select.select([], [], [], 0.01)
    raise TimeoutError(f"process {pid} was not reaped")


def appears(path: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        select.select([], [], [], 0.01)


def main(member: str, name: str = "", handshake: str = "") -> None:
    """With handshake (a path), the child writes the opener's pid to handshake.pid once it is
    gone, and calls only when handshake.go appears: meanwhile the test gives that pid to a
    process of its choice."""
    signature, body = CALLS[member]
    if member == "CreateSession":
        body = [name, *body[1:]]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(SOCKET)
    sock.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\n")
    assert sock.recv(4096).startswith(b"OK")
    sock.sendall(b"BEGIN\r\n")
    hello = Message(
        destination="org.freedesktop.DBus",
        path="/org/freedesktop/DBus",
        interface="org.freedesktop.DBus",
        member="Hello",
        serial=1,
    )
    sock.sendall(_raw_message(hello))
    reader = RawReader(sock)
    reader.next_reply()
    opener = os.getpid()
    if os.fork():
        os._exit(0)  # the process that opened the connection is gone from here on
    # Out of the opener's process group, whose id would keep its pid from being reused.
    os.setsid()
    gone(opener)
    if handshake:
        with open(f"{handshake}.pid.tmp", "w") as f:
            f.write(str(opener))
        os.rename(f"{handshake}.pid.tmp", f"{handshake}.pid")
        appears(f"{handshake}.go")
    call = Message(
        destination=BUS,
        path=MANAGER,
        interface=MANAGER_IFACE,
        member=member,
        signature=signature,
        body=body,
        serial=2,
    )
    sock.sendall(_raw_message(call))
    sock.settimeout(30)
    reply = reader.next_reply()
    print(reply.get(4, "ok"), flush=True)  # ERROR_NAME, or "ok"


if __name__ == "__main__":
    main(*sys.argv[1:])
