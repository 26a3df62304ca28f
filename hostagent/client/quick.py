"""A blocking D-Bus client on the standard library's C modules alone, for the verbs a person or
a script runs over and over (``hostagentctl list``, ``status``): one process, one connection,
a few calls, and out.

Why not dbus-fast: importing any part of it imports its asyncio and GLib front ends, 65 to
85 ms on this project's machines, against 5 ms for the whole of ``systemctl status``; asyncio
alone is 30 to 50 ms. This module imports ``_socket`` and ``_struct`` (not ``socket``, whose
enums cost more than the rest of a call) and speaks just what these verbs need: EXTERNAL
authentication, pipelined with Hello and the first calls so that a verb costs one round trip
to the bus, method calls with string and integer arguments, and any reply the daemon sends.
Everything else (other hosts, containers, descriptors, signals, polkit's agent) stays with the
asyncio library (``client/library.py``); ``Unsupported`` says when a call must go there.

The wire format is the D-Bus specification's: little-endian here, either endianness read.
"""

from __future__ import annotations

import _socket
import _struct
import os

from hostagent import BUS_NAME
from hostagent.errors import HostAgentError, from_dbus

TYPE_CHECKING = False  # typing's own import costs more than a call to the daemon
if TYPE_CHECKING:
    from typing import Any

DBUS = "org.freedesktop.DBus"
SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"
METHOD_CALL, METHOD_RETURN, ERROR = 1, 2, 3
ALLOW_INTERACTIVE_AUTHORIZATION = 0x4
_FIELDS = {"path": (1, "o"), "interface": (2, "s"), "member": (3, "s"), "destination": (6, "s")}
_ALIGN = {  # each type code's alignment, in bytes
    **dict.fromkeys("ygv", 1),
    **dict.fromkeys("nq", 2),
    **dict.fromkeys("buihsoa", 4),
    **dict.fromkeys("xtd({", 8),
}
_FIXED = {  # each fixed-size type code's struct format
    "y": "B",
    "b": "I",
    "n": "h",
    "q": "H",
    "i": "i",
    "u": "I",
    "x": "q",
    "t": "Q",
    "d": "d",
    "h": "I",
}
# The same, compiled once for each byte order.
_STRUCTS = {end: {c: _struct.Struct(end + f) for c, f in _FIXED.items()} for end in "<>"}
_TIMEOUT = 25.0  # as dbus-fast's and sd-bus's default for a method call


class Unsupported(Exception):
    """What this client does not speak (an address kind, a type); the asyncio one does."""


class BusError(HostAgentError):
    """The bus itself could not be reached or closed on us."""


# ---- marshalling ---------------------------------------------------------------------------


def _pad(buf: bytearray, align: int) -> None:
    buf += b"\0" * (-len(buf) & (align - 1))


def _marshal(buf: bytearray, sig: str, value: Any) -> None:
    """Append value, of the single complete type sig, to buf (whose start is 8-aligned)."""
    code = sig[0]
    _pad(buf, _ALIGN[code])
    if code in "so":
        data = value.encode()
        buf += _struct.pack("<I", len(data)) + data + b"\0"
    elif code == "g":
        buf += bytes([len(value)]) + value.encode() + b"\0"
    elif code in _FIXED:
        buf += _struct.pack("<" + _FIXED[code], int(value))
    elif code == "a" and sig[1] not in "{(":
        buf += b"\0\0\0\0"
        at = len(buf)
        _pad(buf, _ALIGN[sig[1]])
        start = len(buf)
        for item in value:
            _marshal(buf, sig[1:], item)
        buf[at - 4 : at] = _struct.pack("<I", len(buf) - start)
    else:
        raise Unsupported(f"marshalling '{sig}'")


def _split(sig: str) -> list[str]:
    """A signature's complete types: "asast" -> ["as", "as", "t"]."""
    types, i = [], 0
    while i < len(sig):
        j = _end(sig, i)
        types.append(sig[i:j])
        i = j
    return types


def _end(sig: str, i: int) -> int:
    """Where the complete type starting at i ends."""
    if sig[i] == "a":
        return _end(sig, i + 1)
    if sig[i] in "({":
        depth = 0
        for j in range(i, len(sig)):
            depth += sig[j] in "({"
            depth -= sig[j] in ")}"
            if not depth:
                return j + 1
    return i + 1


def method_call(
    serial: int,
    destination: str,
    path: str,
    interface: str,
    member: str,
    signature: str = "",
    args: tuple[Any, ...] = (),
    flags: int = 0,
) -> bytes:
    """One METHOD_CALL message, ready for the socket."""
    body = bytearray()
    for sig, value in zip(_split(signature), args, strict=True):
        _marshal(body, sig, value)
    fields = bytearray()
    given = {"path": path, "interface": interface, "member": member, "destination": destination}
    for name, (code, sig) in _FIELDS.items():
        _pad(fields, 8)
        fields += bytes([code, 1]) + sig.encode() + b"\0"
        _marshal(fields, sig, given[name])
    if signature:
        _pad(fields, 8)
        fields += b"\x08\x01g\0"
        _marshal(fields, "g", signature)
    head = (
        _struct.pack("<BBBBIII", ord("l"), METHOD_CALL, flags, 1, len(body), serial, len(fields))
        + fields
    )
    return head + b"\0" * (-len(head) & 7) + body


class _Reader:
    """Values out of one message's bytes, from offset 0 of the message (alignment counts
    from there)."""

    def __init__(self, data: bytes, pos: int, little: bool) -> None:
        self.data, self.pos, self.end = data, pos, "<" if little else ">"

    def read(self, sig: str) -> Any:
        code = sig[0]
        self.pos += -self.pos & (_ALIGN[code] - 1)
        if code in _FIXED:
            (value,) = _struct.unpack_from(self.end + _FIXED[code], self.data, self.pos)
            self.pos += _struct.calcsize(_FIXED[code])
            return bool(value) if code == "b" else value
        if code in "so":
            (n,) = _struct.unpack_from(self.end + "I", self.data, self.pos)
            self.pos += 5 + n
            return self.data[self.pos - n - 1 : self.pos - 1].decode(errors="surrogateescape")
        if code == "g":
            n = self.data[self.pos]
            self.pos += 2 + n
            return self.data[self.pos - n - 1 : self.pos - 1].decode()
        if code == "v":
            return self.read(self.read("g"))
        if code == "(":
            return tuple(self.read(t) for t in _split(sig[1:-1]))
        if code == "a":
            (n,) = _struct.unpack_from(self.end + "I", self.data, self.pos)
            self.pos += 4
            item = sig[1:]
            self.pos += -self.pos & (_ALIGN[item[0]] - 1)
            stop = self.pos + n
            if item == "{sv}":  # a property dict, GetAll's: most of what a verb reads
                return self._properties(stop)
            if item[0] == "{":
                key, value = _split(item[1:-1])
                pairs = {}
                while self.pos < stop:
                    self.pos += -self.pos & 7
                    k = self.read(key)
                    pairs[k] = self.read(value)
                return pairs
            items = []
            while self.pos < stop:
                items.append(self.read(item))
            return items
        raise Unsupported(f"unmarshalling '{sig}'")

    def _properties(self, stop: int) -> dict[str, Any]:
        """An a{sv}'s entries up to stop: read's own steps, unrolled for the string key and
        the signature, and for a value that is a string or a fixed type."""
        data = self.data
        pairs: dict[str, Any] = {}
        fixed = _STRUCTS[self.end]
        length = fixed["u"].unpack_from
        while self.pos < stop:
            pos = self.pos + (-self.pos & 7)
            (n,) = length(data, pos)
            key = data[pos + 4 : pos + 4 + n].decode(errors="surrogateescape")
            pos += 5 + n
            m = data[pos]
            sig = data[pos + 1 : pos + 1 + m].decode()
            pos += 2 + m
            if sig in ("s", "o"):
                pos += -pos & 3
                (n,) = length(data, pos)
                pairs[key] = data[pos + 4 : pos + 4 + n].decode(errors="surrogateescape")
                self.pos = pos + 5 + n
            elif sig in fixed:
                fmt = fixed[sig]
                pos += -pos & (_ALIGN[sig] - 1)
                (value,) = fmt.unpack_from(data, pos)
                pairs[key] = bool(value) if sig == "b" else value
                self.pos = pos + fmt.size
            else:
                self.pos = pos
                pairs[key] = self.read(sig)
        return pairs


def parse_message(data: bytes) -> tuple[int, int, dict[int, Any], list[Any]]:
    """(type, reply serial or 0, header fields by code, body) of one whole message."""
    little = data[0] == ord("l")
    reader = _Reader(data, 12, little)
    fields = dict(reader.read("a(yv)"))
    reader.pos += -reader.pos & 7
    body = [reader.read(t) for t in _split(fields.get(8, ""))]
    return data[1], fields.get(5, 0), fields, body


def message_length(fixed: bytes) -> int:
    """A whole message's length, from its first 16 bytes."""
    end = "<" if fixed[0] == ord("l") else ">"
    body, _, fields = _struct.unpack_from(end + "III", fixed, 4)
    return int(16 + fields + (-(16 + fields) & 7) + body)


# ---- the connection ------------------------------------------------------------------------


def _socket_path(address: str) -> tuple[str, bool]:
    """(path, abstract) of the first unix address in a D-Bus address list."""
    for entry in address.split(";"):
        kind, _, params = entry.partition(":")
        if kind != "unix":
            continue
        keys = dict(p.partition("=")[::2] for p in params.split(","))
        if "path" in keys:
            return _unescape(keys["path"]), False
        if "abstract" in keys:
            return _unescape(keys["abstract"]), True
    raise Unsupported(f"the bus address '{address}'")


def _unescape(value: str) -> str:
    from hostagent.bus.paths import hex_unescaped

    return hex_unescaped(value, "%").decode(errors="surrogateescape")


def bus_address(system: bool) -> str:
    if system:
        return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or SYSTEM_BUS
    address = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if not address:
        runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
        address = f"unix:path={runtime}/bus"
    return address


class QuickBus:
    """One blocking connection. ``calls`` sends several calls at once and returns their
    bodies in order; a call the daemon refused raises its HostAgentError."""

    def __init__(self, address: str) -> None:
        path, abstract = _socket_path(address)
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self.sock.settimeout(_TIMEOUT)
        try:
            self.sock.connect(("\0" + path) if abstract else path)
        except OSError:
            self.sock.close()
            raise
        self._serial = 1
        self._buffer = b""
        self._authenticated = False
        uid = str(os.geteuid()).encode().hex().encode()
        # Authentication, Hello and the first calls go out in one write (as sd-bus does it).
        self._pending = b"\0AUTH EXTERNAL " + uid + b"\r\nBEGIN\r\n"
        self._hello = self._queue(DBUS, "/org/freedesktop/DBus", DBUS, "Hello")

    def close(self) -> None:
        self.sock.close()

    def _queue(
        self,
        destination: str,
        path: str,
        interface: str,
        member: str,
        signature: str = "",
        args: tuple[Any, ...] = (),
        flags: int = 0,
    ) -> int:
        self._serial += 1
        self._pending += method_call(
            self._serial, destination, path, interface, member, signature, args, flags
        )
        return self._serial

    def calls(self, *calls: tuple[str, str, str, str, tuple[Any, ...]]) -> list[list[Any]]:
        """Each (path, interface, member, signature, args) to the daemon, sent together;
        their reply bodies, in order. The first error among them is raised."""
        answers = self.answers(*calls)
        for answer in answers:
            if isinstance(answer, HostAgentError):
                raise answer
        return answers  # type: ignore[return-value]

    def answers(
        self, *calls: tuple[str, str, str, str, tuple[Any, ...]]
    ) -> list[list[Any] | HostAgentError]:
        """As calls, but each refused call's error in its place. BusError when the bus
        itself fails."""
        serials = [self._queue(BUS_NAME, *call) for call in calls]
        try:
            self.sock.sendall(self._pending)
            self._pending = b""
            if not self._authenticated:
                self._authenticate()
            replies = self._replies(set(serials))
        except TimeoutError:
            raise BusError("The bus did not answer in time.") from None
        except OSError as e:
            raise BusError(f"The bus connection failed: {e.strerror or e}.") from None
        out: list[list[Any] | HostAgentError] = []
        for serial in serials:
            kind, fields, body = replies[serial]
            if kind == ERROR:
                out.append(from_dbus(fields.get(4, ""), str(body[0]) if body else ""))
            else:
                out.append(body)
        return out

    def _authenticate(self) -> None:
        while b"\r\n" not in self._buffer:
            self._fill()
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        if not line.startswith(b"OK "):
            raise BusError(f"The bus refused this user: {line.decode(errors='replace')}.")
        self._authenticated = True
        self._replies({self._hello})

    def _replies(self, wanted: set[int]) -> dict[int, tuple[int, dict[int, Any], list[Any]]]:
        got: dict[int, tuple[int, dict[int, Any], list[Any]]] = {}
        while wanted - got.keys():
            while len(self._buffer) < 16:
                self._fill()
            size = message_length(self._buffer[:16])
            while len(self._buffer) < size:
                self._fill()
            data, self._buffer = self._buffer[:size], self._buffer[size:]
            kind, reply_to, fields, body = parse_message(data)
            if kind in (METHOD_RETURN, ERROR) and reply_to in wanted:
                got[reply_to] = (kind, fields, body)
        return got

    def _fill(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise BusError("The bus closed the connection.")
        self._buffer += data
