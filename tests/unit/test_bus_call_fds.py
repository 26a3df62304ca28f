"""A reply's descriptors are closed only when the reply can hold some (hostagent/bus/call.py):
dbus-fast 2.x hands an empty descriptor list on to the next message it reads, so the list of a
reply with none may, by the time its caller looks, hold another message's descriptors."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import pytest
from dbus_fast import Message, MessageType

from hostagent.bus.call import CallError, call


class OneReply:
    """A bus whose every call is answered with reply."""

    def __init__(self, reply: Message) -> None:
        self.reply = reply

    async def call(self, msg: Message) -> Message:
        return self.reply


def open_fd() -> int:
    return os.open("/dev/null", os.O_RDONLY)


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    ("kind", "signature", "closed"),
    [
        (MessageType.METHOD_RETURN, "u", False),  # holds none: the list is another's
        (MessageType.METHOD_RETURN, "h", True),  # descriptors this caller did not ask for
        (MessageType.ERROR, "s", False),
    ],
)
def test_only_a_reply_that_can_hold_descriptors_has_them_closed(
    kind: MessageType, signature: str, closed: bool
) -> None:
    fd = open_fd()
    body: list[Any] = [0] if signature in ("u", "h") else ["no"]
    reply = Message(
        message_type=kind,
        reply_serial=1,
        error_name="org.example.Error" if kind == MessageType.ERROR else None,
        signature=signature,
        body=body,
        unix_fds=[fd],
    )
    try:
        with pytest.raises(CallError) if kind == MessageType.ERROR else contextlib.nullcontext():
            asyncio.run(call(OneReply(reply), "a.b", "/a", "a.b", "M"))  # type: ignore[arg-type]
        assert is_open(fd) is not closed
    finally:
        if is_open(fd):
            os.close(fd)
