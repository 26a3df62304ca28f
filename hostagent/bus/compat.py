"""Shims for dbus-fast: strings marshalled with a wrong length (1.84), writes that a full
socket would turn into a dropped connection (all releases, ``pace_writes``), and a reply whose
body is marshalled once and sent many times (``PremarshalledReply``).

Before dbus-fast PR #261 (October 2023) the marshaller wrote ``len(str)`` (characters) as a
string's length, not the UTF-8 byte count. Debian 12's python3-dbus-fast 1.84.2 has the bug:
any "·" or "❯" in a reply corrupts the stream and the bus drops the connection. The marshaller
is compiled and cannot be patched, but it measures with ``len()``, so on an affected release
every outgoing string is wrapped in a str whose ``len()`` is its byte count. Unaffected releases
get the body back untouched.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from dbus_fast import Message, MessageType, Variant
from dbus_fast._private.marshaller import Marshaller

# The header's fixed bytes and field codes, from the D-Bus specification.
_LITTLE_ENDIAN = ord("l")
_PROTOCOL_VERSION = 1
_REPLY_SERIAL, _DESTINATION, _SIGNATURE = 5, 6, 8


class _Utf8Sized(str):
    __slots__ = ()

    def __len__(self) -> int:
        return len(self.encode())


def _marshaller_is_broken() -> bool:
    try:
        data = bytes(Message(path="/", member="M", signature="s", body=["·"])._marshall(False))
    except Exception:  # a release without the private method postdates the bug
        return False
    return not data.endswith(b"\x02\x00\x00\x00\xc2\xb7\x00")


BROKEN = _marshaller_is_broken()


def _fix(value: Any) -> Any:
    """value with every non-ASCII string wrapped; the very same object when it has none, so
    an all-ASCII reply (the usual one) is not copied."""
    if isinstance(value, str):
        return value if value.isascii() else _Utf8Sized(value)
    if isinstance(value, Variant):
        fixed = _fix(value.value)
        return value if fixed is value.value else Variant(value.signature, fixed)
    if isinstance(value, list | tuple):
        items = [_fix(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        pairs = [(_fix(k), _fix(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value


def fix_value(value: Any) -> Any:
    """One reply value as it must be marshalled; a caller may keep the result and send it
    again (``daemon.bus.replies.Prepared``), which saves walking a large value on every call."""
    return _fix(value) if BROKEN else value


def fix_str(text: str) -> str:
    return _fix(text) if BROKEN else text


def fix_body(body: list[Any]) -> list[Any]:
    """The body to marshal: unchanged on a sound dbus-fast, length-corrected on 1.84."""
    return _fix(body) if BROKEN else body


def marshal_body(signature: str, body: list[Any]) -> bytes:
    """A message body's bytes, as dbus-fast would write them (body fixed by ``fix_body``)."""
    return bytes(Marshaller(signature, body).marshall())


class PremarshalledReply(Message):
    """A method return whose body was marshalled before: ListSessions at 1000 sessions costs
    the 1.84 marshaller milliseconds per call, for a body that changes only with the sessions.

    dbus-fast's writer turns a message into bytes by calling its ``_marshall``; that is a
    cpdef method in 1.84 and in 5.x, so this subclass's override is the one called. The header
    is marshalled here as dbus-fast marshals it: a method return carries the reply serial, the
    destination and the signature (tests/unit/test_bus_pieces.py holds the two byte for byte).
    ``Marshaller`` comes from dbus-fast's private module, which 1.84 and 5.x both have with the
    same ``marshall()``; a release without it fails at import, not on the wire.
    """

    def __init__(self, call: Message, signature: str, body: bytes) -> None:
        super().__init__(
            message_type=MessageType.METHOD_RETURN,
            reply_serial=call.serial,
            destination=call.sender,
            signature=signature,
        )
        self.premarshalled = body

    def _marshall(self, negotiate_unix_fd: bool) -> bytearray:
        fields = [(_REPLY_SERIAL, Variant("u", self.reply_serial))]
        if self.destination:
            fields.append((_DESTINATION, Variant("s", self.destination)))
        fields.append((_SIGNATURE, Variant("g", self.signature)))
        header = Marshaller(
            "yyyyuua(yv)",
            [
                _LITTLE_ENDIAN,
                MessageType.METHOD_RETURN.value,
                int(self.flags),
                _PROTOCOL_VERSION,
                len(self.premarshalled),
                self.serial,
                fields,
            ],
        ).marshall()
        header += bytes(-len(header) % 8)  # the body starts on an 8-byte boundary
        return header + self.premarshalled


class _PacedSocket:
    """The bus socket as dbus-fast's writer sees it: a send that would block reports that it
    sent nothing, so the writer waits for the socket to drain instead of dropping the bus.

    dbus-fast (1.84 and 5.x alike) treats EAGAIN from ``send`` as a fatal error. A burst that
    fills the kernel's buffer, such as replies and signals while dbus-daemon is slow to read,
    would then end the daemon's connection, and the daemon with it.

    A message carrying file descriptors is first offered with ``sendmsg``; the writer forgets
    the descriptors after that call, whatever it sent. So when that call would block, they are
    kept here and go with the message's first bytes, on the writer's next ``send``.
    """

    __slots__ = ("_ancdata", "_sock")

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._ancdata: Any = None

    def send(self, data: Any) -> int:
        if self._ancdata is not None:
            return self.sendmsg([data], self._ancdata)
        try:
            return int(self._sock.send(data))
        except BlockingIOError:
            return 0

    def sendmsg(self, buffers: Any, ancdata: Any) -> int:
        try:
            sent = int(self._sock.sendmsg(buffers, ancdata))
        except BlockingIOError:
            self._ancdata = ancdata or None
            return 0
        self._ancdata = None
        return sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _InOrder(deque[Any]):
    """A write queue whose ``pop`` takes the oldest message: 1.84's writer pops from the
    wrong end, so once a backlog forms, messages would leave newest first."""

    def pop(self) -> Any:  # type: ignore[override]  # deque.pop takes no index either
        return self.popleft()


def pace_writes(bus: Any) -> bool:
    """Make a connected bus's writer wait out a full socket, in order. False when this
    dbus-fast keeps its writer elsewhere (then nothing is changed)."""
    writer = getattr(bus, "_writer", None)
    if writer is None or not hasattr(writer, "sock") or not isinstance(writer.messages, deque):
        return False
    if not isinstance(writer.sock, _PacedSocket):
        writer.sock = _PacedSocket(writer.sock)
    if not isinstance(writer.messages, _InOrder):
        writer.messages = _InOrder(writer.messages)
    return True
