"""What the daemon reads off the bus: every message framed from its header first, so that one
too big for its method is refused before a byte of its body is unmarshalled.

dbus-fast unmarshals a whole message before anyone sees it. A CreateSession whose options
hold a million entries (31 MB, under the bus's own 32 MB limit) cost the daemon's one thread
about two seconds to build into Python objects, only to be refused, and every other caller
waited behind it. The header says how long the body is, and which method it is for. So the
unmarshaller reads through an ``Intake``: it reads each message's fixed header and header
fields itself, asks ``limit_of`` how large that message may be, and either hands the message
on unchanged, or reads its body into one reused buffer, drops it, and has ``refuse`` answer
the caller with a named error. Memory and time for a refused message are a few kilobytes and
one pass of ``recv_into``, whatever its size.

dbus-fast offers no hook here: ``Intake.guard`` replaces a connected bus's reader with one
built by dbus-fast's own ``build_message_reader`` over the Intake in place of the socket (the
unmarshaller reads through ``recvmsg`` alone when descriptors are negotiated, in 1.84 as in
5.x; the arguments of ``build_message_reader`` differ between the two).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FIXED = 16  # endianness, type, flags, version, body length, serial, header fields' length
HEAD_MAX = 64 * 1024  # the header fields of any message the bus relays are far smaller
DISCARD_CHUNK = 256 * 1024
METHOD_CALL, SIGNAL = 1, 4
NO_REPLY_EXPECTED = 0x1
NEVER = -1  # limit_of's answer for a message dropped unread whatever its size
_PATH, _INTERFACE, _MEMBER, _SENDER, _SIGNATURE = 1, 2, 3, 7, 8


@dataclass(frozen=True)
class Header:
    """What a message's header says of it: enough to judge its size and answer its sender."""

    kind: int  # METHOD_CALL, SIGNAL, ...
    flags: int
    serial: int
    body_len: int
    path: str = ""
    interface: str = ""
    member: str = ""
    sender: str = ""
    signature: str = ""

    @property
    def wants_reply(self) -> bool:
        return self.kind == METHOD_CALL and not self.flags & NO_REPLY_EXPECTED


def head_length(fixed: bytes | bytearray) -> tuple[int, int]:
    """From the 16 fixed bytes: the whole header's length, padded to 8 (where the body
    starts), and the body's. ValueError for bytes that are not a D-Bus header."""
    end = _endian(fixed[0])
    body_len, _serial, fields_len = struct.unpack_from(end + "III", fixed, 4)
    if fixed[3] != 1:
        raise ValueError(f"protocol version {fixed[3]}")
    return FIXED + fields_len + (-(FIXED + fields_len) & 7), body_len


def parse_header(head: bytes | bytearray) -> Header:
    """The header of a message whose head (fixed bytes, fields, padding) is head. Pure.

    Reads the fields the daemon needs (their types are fixed by the specification); a field of
    any other code is skipped when its type is a simple one, and parsing stops at one that is
    not, keeping what was read so far."""
    end = _endian(head[0])
    body_len, serial, fields_len = struct.unpack_from(end + "III", head, 4)
    fields: dict[int, Any] = {}
    pos, stop = FIXED, FIXED + fields_len
    while pos < stop:
        pos += -pos & 7
        code, sig_len = head[pos], head[pos + 1]
        sig = head[pos + 2 : pos + 2 + sig_len].decode("ascii", "replace")
        pos += 3 + sig_len
        if sig in ("s", "o"):
            pos += -pos & 3
            (n,) = struct.unpack_from(end + "I", head, pos)
            fields[code] = head[pos + 4 : pos + 4 + n].decode("utf-8", "replace")
            pos += 5 + n
        elif sig == "g":
            n = head[pos]
            fields[code] = head[pos + 1 : pos + 1 + n].decode("ascii", "replace")
            pos += 2 + n
        elif sig == "u":
            pos += (-pos & 3) + 4
        else:
            break
    return Header(
        kind=head[1],
        flags=head[2],
        serial=serial,
        body_len=body_len,
        path=fields.get(_PATH, ""),
        interface=fields.get(_INTERFACE, ""),
        member=fields.get(_MEMBER, ""),
        sender=fields.get(_SENDER, ""),
        signature=fields.get(_SIGNATURE, ""),
    )


def _endian(byte: int) -> str:
    if byte == ord("l"):
        return "<"
    if byte == ord("B"):
        return ">"
    raise ValueError(f"endianness byte {byte}")


def _unlimited(header: Header) -> int | None:
    return None


class Intake:
    """A bus connection's socket as its unmarshaller reads it: a message over its limit never
    reaches it. The socket is guarded from the connection's first message, before the daemon
    has any object to serve; ``limit`` then says how large each may be (until then, any)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.limit_of: Callable[[Header], int | None] = _unlimited
        self.refuse: Callable[[Header, int], None] | None = None
        self.refused = 0  # messages dropped unread, since the start
        self._head = bytearray()  # the next message's head, read but not yet judged
        self._head_len = FIXED  # how long that head is, once its fixed bytes are in
        self._ready = bytearray()  # a judged head the unmarshaller has not yet taken
        self._ancillary: list[tuple[int, int, bytes]] = []  # descriptors read with the head
        self._passing = 0  # the rest of a judged message's body, read straight through
        self._dropping = 0  # the rest of a refused message's body
        self._scratch = bytearray(DISCARD_CHUNK)

    def limit(
        self, limit_of: Callable[[Header], int | None], refuse: Callable[[Header, int], None]
    ) -> None:
        """From here on, limit_of(header) gives a message's largest body in bytes (None:
        any, NEVER: none at all), and refuse(header, limit) answers one that is over it."""
        self.limit_of, self.refuse = limit_of, refuse

    @classmethod
    def guard(cls, bus: Any) -> Intake:
        """Put an Intake between a connected bus (descriptors negotiated, nothing yet read past
        its Hello reply) and its unmarshaller."""
        from dbus_fast.aio.message_reader import build_message_reader

        if not bus._negotiate_unix_fd:  # the unmarshaller would read with recv, past us
            raise ValueError("an Intake needs a bus that negotiates descriptors")
        intake = cls(bus._sock)
        loop = asyncio.get_running_loop()
        loop.remove_reader(bus._fd)
        stand_in: Any = intake  # read as the socket it wraps
        try:  # 5.x
            reader = build_message_reader(
                sock=stand_in,
                process=bus._process_message,
                finalize=bus._finalize,
                negotiate_unix_fd=True,
            )
        except TypeError:  # 1.84 reads the stream only when no socket is given
            reader = build_message_reader(  # type: ignore[call-arg]
                stream=bus._stream,
                sock=stand_in,
                process=bus._process_message,
                finalize=bus._finalize,
            )
        loop.add_reader(bus._fd, reader)
        return intake

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)

    def recvmsg(
        self, size: int, ancsize: int = 0, flags: int = 0
    ) -> tuple[bytes, list[tuple[int, int, bytes]], int, Any]:
        """As socket.recvmsg: at most size bytes of the messages that pass, with the
        descriptors that came with them; BlockingIOError when none are to be had yet."""
        while True:
            if self._ready:
                data = bytes(self._ready[:size])
                del self._ready[:size]
                ancillary, self._ancillary = self._ancillary, []
                if len(data) < size and self._passing:  # the body's start, if it is here
                    try:
                        more, extra, _, _ = self.sock.recvmsg(
                            min(size - len(data), self._passing), ancsize, flags
                        )
                    except BlockingIOError:
                        more, extra = b"", []
                    self._passing -= len(more)
                    data, ancillary = data + more, ancillary + extra
                return data, ancillary, 0, None
            if self._passing:
                data, ancillary, msg_flags, address = self.sock.recvmsg(
                    min(size, self._passing), ancsize, flags
                )
                self._passing -= len(data)
                return data, ancillary, msg_flags, address
            if not (self._drop(ancsize) if self._dropping else self._read_head(ancsize)):
                return b"", [], 0, None  # the bus closed

    def _read_head(self, ancsize: int) -> bool:
        """Read the next message's head and judge it; False at the end of the stream."""
        while len(self._head) < self._head_len:
            data, ancillary, _, _ = self.sock.recvmsg(self._head_len - len(self._head), ancsize)
            if not data:
                return False
            self._head += data
            self._ancillary += ancillary
            if len(self._head) == FIXED:
                self._head_len, _ = head_length(self._head)
        header = parse_header(self._head) if self._head_len <= HEAD_MAX else None
        limit = None if header is None else self.limit_of(header)
        if header is not None and (limit is None or header.body_len <= limit):
            self._ready, self._head = self._head, bytearray()
            self._passing = header.body_len
        else:
            _, body_len = head_length(self._head)
            self._dropping = body_len
            self._head = bytearray()
            self._close_descriptors()
            self.refused += 1
            if header is not None and limit is not None and self.refuse is not None:
                self.refuse(header, limit)
        self._head_len = FIXED
        return True

    def _drop(self, ancsize: int) -> bool:
        """Read and forget the rest of a refused body; False at the end of the stream.
        BlockingIOError when the socket has no more of it yet."""
        view = memoryview(self._scratch)
        while self._dropping:
            want = min(self._dropping, DISCARD_CHUNK)
            got, ancillary, _, _ = self.sock.recvmsg_into([view[:want]], ancsize)
            self._ancillary += ancillary
            self._close_descriptors()
            if not got:
                return False
            self._dropping -= got
        return True

    def _close_descriptors(self) -> None:
        for level, kind, data in self._ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(data) - len(data) % 4
                for fd in struct.unpack(f"{usable // 4}i", data[:usable]):
                    os.close(fd)
        self._ancillary = []
