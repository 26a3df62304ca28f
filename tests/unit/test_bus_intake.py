"""The bus intake: a message too big for its method never reaches the unmarshaller, and its
caller gets InvalidArgs at once, while the messages around it pass unchanged."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import pytest
from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from hostagent import BUS_NAME, MANAGER_INTERFACE, MANAGER_PATH
from hostagent.bus.call import CallError, call
from hostagent.daemon.bus.intake import FIXED, METHOD_CALL, NEVER, Header, Intake, parse_header
from tests.unit.fakes import run
from tests.unit.test_bus_export import serve


def _wire(member: str, body: list[object], signature: str, serial: int) -> bytes:
    msg = Message(
        destination=BUS_NAME,
        path=MANAGER_PATH,
        interface=MANAGER_INTERFACE,
        member=member,
        signature=signature,
        body=body,
        serial=serial,
    )
    return bytes(msg._marshall(False))


def _read_all(intake: Intake) -> bytes:
    """Everything the unmarshaller would be handed, asked for in its own small pieces."""
    out = b""
    while True:
        try:
            data, _, _, _ = intake.recvmsg(4096, socket.CMSG_LEN(64))
        except BlockingIOError:
            return out
        if not data:
            return out
        out += data


def test_the_header_says_what_the_message_is() -> None:
    wire = _wire("GetSession", ["alice-1"], "s", 7)
    header = parse_header(wire[: FIXED + int.from_bytes(wire[12:16], "little") + 8])
    assert header.kind == METHOD_CALL and header.serial == 7
    assert (header.path, header.interface, header.member) == (
        MANAGER_PATH,
        MANAGER_INTERFACE,
        "GetSession",
    )
    assert header.signature == "s" and header.body_len == 4 + len("alice-1") + 1
    assert header.wants_reply


def test_an_oversized_message_is_refused_unread_and_the_next_ones_pass() -> None:
    small = _wire("GetSession", ["a"], "s", 2)
    big = _wire(
        "CreateSession",
        ["x", "shell", "", {"env": Variant("a{ss}", {f"K{i}": "v" * 1000 for i in range(3000)})}],
        "sssa{sv}",
        3,
    )
    after = _wire("ListSessions", [], "", 4)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    intake = Intake(ours)
    refused: list[tuple[Header, int]] = []
    intake.limit(
        lambda h: 64 * 1024 if h.member == "CreateSession" else None,
        lambda h, limit: refused.append((h, limit)),
    )
    theirs.setblocking(False)
    sent = bytearray(small + big + after)
    handed = b""
    while sent or not handed.endswith(after):  # the socket's buffer is smaller than big
        if sent:
            try:
                n = theirs.send(sent[:65536])
                del sent[:n]
            except BlockingIOError:
                pass
        handed += _read_all(intake)
    assert handed == small + after, "the big message reached the unmarshaller"
    assert len(big) > 3_000_000
    assert [(h.member, h.serial, limit) for h, limit in refused] == [
        ("CreateSession", 3, 64 * 1024)
    ]
    assert intake.refused == 1
    ours.close()
    theirs.close()


def test_descriptors_sent_with_a_refused_message_are_closed() -> None:
    big = _wire("SendText", ["x" * 100_000, True], "sb", 2)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    intake = Intake(ours)
    intake.limit(lambda h: 1024, lambda h, limit: None)
    r, w = os.pipe()
    socket.send_fds(theirs, [big[:64]], [w])
    theirs.sendall(big[64:])
    os.close(w)
    assert _read_all(intake) == b""
    assert os.read(r, 1) == b"", "the writing end still open in the intake"
    os.close(r)
    ours.close()
    theirs.close()


def test_a_message_never_taken_is_dropped_even_with_no_body() -> None:
    bare = bytes(Message.new_signal("/x", "org.example.X", "Poke")._marshall(False))
    after = _wire("ListSessions", [], "", 4)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    intake = Intake(ours)
    intake.limit(lambda h: NEVER if h.member == "Poke" else None, lambda h, limit: None)
    theirs.sendall(bare * 3 + after)
    assert _read_all(intake) == after
    assert intake.refused == 3
    ours.close()
    theirs.close()


def test_signals_of_a_sender_the_daemon_does_not_listen_to_are_dropped_unread(
    tmp_path: Path, bus_address: str
) -> None:
    """Anyone may send the daemon a unicast signal; only the bus's and systemd's are read."""

    async def body() -> None:
        host, server, _ = await serve(tmp_path, bus_address)
        trusted = await MessageBus(bus_address=bus_address).connect()
        stranger = await MessageBus(bus_address=bus_address).connect()
        assert host.exporter is not None
        host.exporter.listens_to = lambda sender: sender == trusted.unique_name
        heard: list[str] = []
        server.add_message_handler(
            lambda m: heard.append(m.sender) if m.member == "JobRemoved" else None
        )
        for bus in (stranger, trusted, stranger):
            bus.send(
                Message(
                    message_type=MessageType.SIGNAL,
                    destination=server.unique_name,
                    path="/org/freedesktop/systemd1",
                    interface="org.freedesktop.systemd1.Manager",
                    member="JobRemoved",
                    signature="uoss",
                    body=[1, "/org/freedesktop/systemd1/job/1", "x.scope", "failed"],
                )
            )
        # Each connection's messages arrive in order: these replies come after its signals.
        for bus in (stranger, trusted):
            await call(bus, BUS_NAME, MANAGER_PATH, MANAGER_INTERFACE, "ListSessions")
        assert heard == [trusted.unique_name]
        for bus in (trusted, stranger, server):
            bus.disconnect()
        await asyncio.sleep(0)

    run(body())


def test_a_call_too_big_for_its_method_is_refused_by_name_and_costs_no_one(
    tmp_path: Path, bus_address: str
) -> None:
    async def body() -> None:
        _, server, _ = await serve(tmp_path, bus_address)
        client = await MessageBus(bus_address=bus_address).connect()
        env = {f"K{i}": "v" * 1000 for i in range(20_000)}  # 20 MB
        started = time.monotonic()
        with pytest.raises(CallError) as big:
            await call(
                client,
                BUS_NAME,
                MANAGER_PATH,
                MANAGER_INTERFACE,
                "CreateSession",
                "sssa{sv}",
                ["big", "shell", "", {"env": Variant("a{ss}", env)}],
                timeout=30,
            )
        assert big.value.name == "org.freedesktop.DBus.Error.InvalidArgs"
        assert "environment 64 KiB" in big.value.text and "CreateSession's" in big.value.text
        with pytest.raises(CallError) as names:
            await call(
                client,
                BUS_NAME,
                MANAGER_PATH,
                MANAGER_INTERFACE,
                "WaitAny",
                "asast",
                [[f"n{i}" for i in range(100_000)], ["idle"], 1],
            )
        assert "at most 4096 sessions" in names.value.text
        (rows,) = await call(client, BUS_NAME, MANAGER_PATH, MANAGER_INTERFACE, "ListSessions")
        assert rows == []
        print(f"refused in {time.monotonic() - started:.2f} s")
        client.disconnect()
        server.disconnect()
        await asyncio.sleep(0)

    run(body())
