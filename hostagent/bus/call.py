"""One way to make a D-Bus method call and get its body, or a HostAgentError-shaped failure.

Both the daemon (talking to systemd, polkit and the bus driver) and the client library use
low-level messages, which look the same in dbus-fast 1.84 and 5.x, instead of proxy objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus

from hostagent.bus.compat import fix_body

DBUS = "org.freedesktop.DBus"
DBUS_PATH = "/org/freedesktop/DBus"
PROPERTIES = "org.freedesktop.DBus.Properties"

DEFAULT_TIMEOUT = 25.0


TIMEOUT = "org.freedesktop.DBus.Error.Timeout"  # our own wait ran out (not the bus's NoReply)
DISCONNECTED = "org.freedesktop.DBus.Error.Disconnected"  # the bus went away mid-call


class CallError(Exception):
    """An error reply; ``name`` is the D-Bus error name."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__(f"{name}: {text}")
        self.name = name
        self.text = text


async def call(
    bus: MessageBus,
    destination: str,
    path: str,
    interface: str,
    member: str,
    signature: str = "",
    body: list[Any] | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    unix_fds: list[int] | None = None,
    interactive: bool = False,
) -> list[Any]:
    reply = await _reply(
        bus, destination, path, interface, member, signature, body, timeout, unix_fds, interactive
    )
    close_fds(_own_fds(reply))  # a reply this caller did not ask descriptors of gets none kept
    return list(reply.body)


async def call_keeping_fds(
    bus: MessageBus,
    destination: str,
    path: str,
    interface: str,
    member: str,
    signature: str = "",
    body: list[Any] | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> tuple[list[Any], list[int]]:
    """A call's reply, and the descriptors it carries: the caller's to close. The connection
    must have negotiated descriptors (negotiate_unix_fd)."""
    reply = await _reply(bus, destination, path, interface, member, signature, body, timeout)
    return list(reply.body), list(reply.unix_fds)


async def call_for_fd(
    bus: MessageBus,
    destination: str,
    path: str,
    interface: str,
    member: str,
    signature: str = "",
    body: list[Any] | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> int:
    """A call whose reply is one file descriptor ('h'): the descriptor, the caller's to close.
    The connection must have negotiated descriptors (negotiate_unix_fd)."""
    reply = await _reply(bus, destination, path, interface, member, signature, body, timeout)
    fds = list(reply.unix_fds)
    index = reply.body[0] if reply.body and isinstance(reply.body[0], int) else -1
    if not 0 <= index < len(fds):
        close_fds(fds)
        raise CallError("org.freedesktop.DBus.Error.InvalidArgs", f"{member} sent no descriptor")
    fd = fds.pop(index)
    close_fds(fds)
    return fd


async def _reply(
    bus: MessageBus,
    destination: str,
    path: str,
    interface: str,
    member: str,
    signature: str,
    body: list[Any] | None,
    timeout: float | None,
    unix_fds: list[int] | None = None,
    interactive: bool = False,
) -> Message:
    msg = Message(
        destination=destination,
        path=path,
        interface=interface,
        member=member,
        signature=signature,
        body=fix_body(body or []),
        unix_fds=unix_fds or [],
    )
    if interactive:
        from dbus_fast import MessageFlag

        msg.flags = MessageFlag(int(msg.flags) | 0x4)  # ALLOW_INTERACTIVE_AUTHORIZATION
    coro = bus.call(msg)
    try:
        reply = await (asyncio.wait_for(coro, timeout) if timeout else coro)
    except TimeoutError:
        # An error like any other reply's, so that no caller meets a bare TimeoutError.
        raise CallError(TIMEOUT, f"{member} got no reply within {timeout:.0f}s") from None
    except (EOFError, ConnectionError):
        # The bus went away (restarted, or the connection closed): no caller meets a bare
        # EOFError. Whether the call was done is unknown. How the connection ended is taken
        # here, or asyncio prints "Future exception was never retrieved" at the client's exit.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(bus.wait_for_disconnect(), 1.0)  # type: ignore[no-untyped-call]
        raise CallError(
            DISCONNECTED,
            f"The bus connection was lost during {member}; whether it was done is unknown: "
            "look (hostagentctl list) before you try again.",
        ) from None
    if reply is None:
        return Message(message_type=MessageType.METHOD_RETURN, reply_serial=msg.serial)
    if reply.message_type == MessageType.ERROR:
        close_fds(_own_fds(reply))
        text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
        raise CallError(reply.error_name or "org.freedesktop.DBus.Error.Failed", text)
    return reply


def _own_fds(reply: Message) -> list[int]:
    """The descriptors reply brought, if its signature can hold any. dbus-fast 2.x hands an
    empty descriptor list on to the next message it reads, which then fills it: the list of a
    reply with no descriptors, looked at after an await, may hold the next message's."""
    return list(reply.unix_fds) if "h" in (reply.signature or "") else []


def close_fds(fds: list[int]) -> None:
    """Close descriptors a message brought, ignoring those already closed."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


async def add_match(bus: MessageBus, rule: str) -> None:
    """Ask the bus daemon for the signals that match rule."""
    await call(bus, DBUS, DBUS_PATH, DBUS, "AddMatch", "s", [rule])


async def name_owner(bus: MessageBus, name: str) -> str:
    """The unique name that owns name, or "" when nobody does."""
    try:
        (owner,) = await call(bus, DBUS, DBUS_PATH, DBUS, "GetNameOwner", "s", [name])
    except CallError as e:
        if e.name.endswith("NameHasNoOwner"):
            return ""
        raise
    return str(owner)
