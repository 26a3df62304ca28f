"""Writes that fill the bus socket: the daemon's connection must wait them out, in order,
not drop (hostagent.bus.compat.pace_writes). dbus-daemon is stopped while the burst is sent,
so the kernel's buffer fills for certain."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
from collections.abc import Awaitable, Callable

import pytest
from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus

from hostagent.bus import compat
from hostagent.bus.call import add_match, call

BURST = 400  # signals of 16 KiB: 6 MiB, far past a unix socket's buffer


async def _burst(address: str, daemon_pid: int, paced: bool) -> tuple[bool, list[int]]:
    """Whether the sender's bus survived a burst sent while dbus-daemon was stopped, and the
    order in which a listener received the signals."""
    sender = await MessageBus(bus_address=address).connect()
    listener = await MessageBus(bus_address=address).connect()
    if paced:
        assert compat.pace_writes(sender)
    seen: list[int] = []
    done = asyncio.get_running_loop().create_future()

    def on_message(msg: Message) -> None:
        if msg.message_type == MessageType.SIGNAL and msg.member == "Burst":
            seen.append(msg.body[0])
            if len(seen) == BURST and not done.done():
                done.set_result(None)

    listener.add_message_handler(on_message)
    await add_match(listener, "type='signal',interface='org.example.Pacing'")
    os.kill(daemon_pid, signal.SIGSTOP)
    try:
        for i in range(BURST):
            try:
                sender.send(
                    Message.new_signal("/p", "org.example.Pacing", "Burst", "us", [i, "x" * 16384])
                )
            except OSError:
                break  # the bus was dropped
            await asyncio.sleep(0)  # let the writer run, as the daemon's loop would
    finally:
        os.kill(daemon_pid, signal.SIGCONT)
    disconnected: Callable[[], Awaitable[None]] = sender.wait_for_disconnect  # untyped
    dropped = asyncio.ensure_future(disconnected())
    await asyncio.wait([done, dropped], timeout=20, return_when=asyncio.FIRST_COMPLETED)
    dropped.cancel()
    try:
        await asyncio.wait_for(done, 0.1)
        await call(
            sender,
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "GetId",
            timeout=10,
        )
        alive = True
    except Exception:
        alive = False
    for bus in (sender, listener):
        with contextlib.suppress(Exception):  # a dropped bus may refuse even this
            bus.disconnect()
        with contextlib.suppress(Exception):
            if bus._sock is not None:
                bus._sock.close()
    return alive, seen


def test_a_burst_into_a_full_socket_is_sent_in_order(bus_daemon: tuple[str, int]) -> None:
    alive, seen = asyncio.run(_burst(*bus_daemon, paced=True))
    assert alive
    assert seen == list(range(BURST))


def test_without_pacing_a_full_socket_drops_the_bus(bus_daemon: tuple[str, int]) -> None:
    """The hazard the shim exists for, so the test above can fail."""
    alive, seen = asyncio.run(_burst(*bus_daemon, paced=False))
    if alive and seen == list(range(BURST)):
        pytest.fail("this dbus-fast survives a full socket; pace_writes may be retired")
    assert not alive or seen != list(range(BURST))


def test_pacing_twice_changes_nothing_more(bus_daemon: tuple[str, int]) -> None:
    async def main() -> None:
        bus = await MessageBus(bus_address=bus_daemon[0]).connect()
        assert compat.pace_writes(bus) and compat.pace_writes(bus)
        assert bus._writer is not None
        paced = bus._writer.sock
        assert isinstance(paced, compat._PacedSocket)
        assert not isinstance(paced._sock, compat._PacedSocket)
        bus.disconnect()

    asyncio.run(main())


def _close_after(fd: int, _sent: object) -> None:
    os.close(fd)


def test_descriptors_in_a_burst_arrive_with_their_messages(bus_daemon: tuple[str, int]) -> None:
    """A reply carrying a descriptor (CaptureByFileDescriptor) can meet a full socket: the
    writer offers it with sendmsg once and forgets the descriptor, so the paced socket must
    keep it for the message's first bytes, or the reply arrives without it."""
    from hostagent.daemon.bus.replies import FileReply

    count = 200
    address, daemon_pid = bus_daemon

    async def main() -> list[bytes]:
        sender = await MessageBus(bus_address=address, negotiate_unix_fd=True).connect()
        listener = await MessageBus(bus_address=address, negotiate_unix_fd=True).connect()
        assert compat.pace_writes(sender)
        got: list[bytes] = []
        done = asyncio.get_running_loop().create_future()

        def on_message(msg: Message) -> None:
            if msg.message_type == MessageType.SIGNAL and msg.member == "Fd":
                fds = list(msg.unix_fds)
                got.append(os.pread(fds[msg.body[0]], 64, 0) if fds else b"")
                for fd in fds:
                    os.close(fd)
                if len(got) == count and not done.done():
                    done.set_result(None)

        listener.add_message_handler(on_message)
        await add_match(listener, "type='signal',interface='org.example.Pacing'")
        replies = [FileReply.of(f"capture {i}".encode(), "t") for i in range(count)]
        os.kill(daemon_pid, signal.SIGSTOP)
        try:
            for reply in replies:
                # 64 KiB of padding per message fills the socket within a few messages.
                msg = Message.new_signal(
                    "/p", "org.example.Pacing", "Fd", "hs", [0, "x" * 65536], [reply.fd]
                )
                sender.send(msg).add_done_callback(functools.partial(_close_after, reply.fd))
                await asyncio.sleep(0)
        finally:
            os.kill(daemon_pid, signal.SIGCONT)
        await asyncio.wait_for(done, 15)
        sender.disconnect()
        listener.disconnect()
        return got

    got = asyncio.run(main())
    assert got == [f"capture {i}".encode() for i in range(count)]


def test_a_file_reply_is_sealed_and_read_from_its_start() -> None:
    import fcntl

    from hostagent.daemon.bus.replies import FileReply

    reply = FileReply.of(b"screen\n" * 1000, "t")
    try:
        assert os.read(reply.fd, 100) == (b"screen\n" * 1000)[:100]
        seals = fcntl.fcntl(reply.fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SHRINK
        with pytest.raises(PermissionError):
            os.write(reply.fd, b"forged")
    finally:
        os.close(reply.fd)
