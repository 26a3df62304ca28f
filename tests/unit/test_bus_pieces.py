"""The pure pieces under the bus layer: path escaping, error names, the 1.84 string shim."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from dbus_fast import Message, Variant
from dbus_fast.aio import MessageBus
from hypothesis import given
from hypothesis import strategies as st

from hostagent import errors
from hostagent.bus import compat as dbuscompat
from hostagent.bus.call import DBUS, DBUS_PATH, DISCONNECTED, CallError, call
from hostagent.bus.paths import label_decode, label_encode, path_decode, path_encode
from hostagent.cli.ctl_options import UsageError, parse_size


@pytest.mark.parametrize(
    ("label", "encoded"),
    [
        ("", "_"),
        ("abc", "abc"),
        ("a-b", "a_2db"),
        ("1x", "_31x"),
        ("agent-session-1.scope", "agent_2dsession_2d1_2escope"),
    ],
)
def test_label_encoding_matches_sd_bus(label: str, encoded: str) -> None:
    assert label_encode(label) == encoded
    assert label_decode(encoded) == label


@given(st.text())
def test_labels_round_trip(label: str) -> None:
    assert path_decode("/p", path_encode("/p", label)) == label


def test_every_error_has_a_distinct_wire_name() -> None:
    names = [e.dbus_name for e in errors.ALL_ERRORS]
    assert len(names) == len(set(names))
    err = errors.from_dbus("org.hostagent.HostAgent1.Error.NoSuchSession", "m")
    assert isinstance(err, errors.NoSuchSession)
    assert errors.from_dbus("x.Y", "m").dbus_name == "x.Y"


def test_utf8_shim_marshals_byte_lengths() -> None:
    body = dbuscompat.fix_body(["a·b", {"k": Variant("as", ["❯"])}])
    data = bytes(Message(path="/", member="M", signature="sa{sv}", body=body)._marshall(False))
    assert b"\x04\x00\x00\x00a\xc2\xb7b\x00" in data


WIRE_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"))
ROWS = st.lists(st.tuples(*[WIRE_TEXT] * 4, st.integers(0, 2**32 - 1)), max_size=8)


@given(rows=ROWS, serial=st.integers(1, 2**32 - 1), sender=st.sampled_from([":1.7", ":1.1234"]))
def test_a_premarshalled_reply_is_the_reply_dbus_fast_would_write(
    rows: list[tuple[str, str, str, str, int]], serial: int, sender: str
) -> None:
    """The cached ListSessions reply goes out byte for byte as dbus-fast's own would."""
    call = Message(path="/", member="ListSessions", serial=serial)
    call.sender = sender
    value = dbuscompat.fix_value([(*row, "/org/x") for row in rows])
    ours = dbuscompat.PremarshalledReply(
        call, "a(ssssuo)", dbuscompat.marshal_body("a(ssssuo)", [value])
    )
    theirs = Message.new_method_return(call, "a(ssssuo)", [value])
    ours.serial = theirs.serial = 5
    assert bytes(ours._marshall(False)) == bytes(theirs._marshall(False))


def test_length_fix_copies_only_what_it_wraps() -> None:
    """An all-ASCII reply passes through as the same objects: ListSessions' rows stay the
    untracked tuples they were built as (docs/benchmarks-notes.md)."""
    rows = [("s1", "shell", "running", "idle", 0, "/p/s1")] * 3
    body = [rows, {"k": Variant("s", "v")}]
    assert dbuscompat._fix(body) is body
    fixed = dbuscompat._fix([[("s1", "❯ ready"), ("s2", "ok")], {"·": Variant("as", ["x"])}])
    (row1, row2), mapping = fixed
    assert isinstance(row1, tuple) and len(row1[1]) == len("❯ ready".encode())
    assert row2 == ("s2", "ok")
    (key,) = mapping
    assert len(key) == 2


@pytest.mark.parametrize(("text", "size"), [("512M", 512 << 20), ("2G", 2 << 30), ("10", 10)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_bad_size() -> None:
    with pytest.raises(UsageError):
        parse_size("lots")


def test_a_bus_lost_mid_call_is_a_named_error(bus_daemon: tuple[str, int]) -> None:
    """The bus daemon goes away while a call waits: the caller gets Disconnected and a line
    that says what to do, not a bare EOFError."""
    address, pid = bus_daemon

    async def body() -> None:
        slow = await MessageBus(bus_address=address).connect()
        await slow.request_name("org.hostagent.test.Slow")
        slow.add_message_handler(lambda msg: True if msg.member == "Slow" else None)
        caller = await MessageBus(bus_address=address).connect()
        waiting = asyncio.ensure_future(
            call(caller, "org.hostagent.test.Slow", "/", "org.hostagent.test", "Slow")
        )
        await call(caller, DBUS, DBUS_PATH, DBUS, "GetId")  # the Slow call is on the bus
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(CallError) as lost:
            await asyncio.wait_for(waiting, 10)
        assert lost.value.name == DISCONNECTED and "hostagentctl list" in lost.value.text

    asyncio.run(body())
