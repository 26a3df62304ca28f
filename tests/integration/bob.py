"""bob, an ordinary user of the test sandbox, attacking the system daemon over the real bus.

Run inside the sandbox as bob (``python3 -m tests.integration.bob ATTACK ...`` with the
checkout on PYTHONPATH); each attack prints one JSON object with what it saw. The test side
(test_hostile.py) checks the daemon and alice's sessions around it. Only dbus-fast and the
standard library are used, as any user could.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from typing import Any

from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from hostagent.bus.compat import fix_body, pace_writes

BUS = "org.hostagent.HostAgent1"
MANAGER = "/org/hostagent/HostAgent1"
MANAGER_IFACE = "org.hostagent.HostAgent1.Manager"
SESSION_IFACE = "org.hostagent.HostAgent1.Session"
SYSTEMD = "org.freedesktop.systemd1"
SYSTEMD_MANAGER = "org.freedesktop.systemd1.Manager"
SOCKET = "/run/dbus/system_bus_socket"


async def connect() -> MessageBus:
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    pace_writes(bus)  # bob floods; his own connection should survive it
    return bus


async def call(bus: MessageBus, member: str, signature: str, body: list[Any], **kw: Any) -> Any:
    """The reply's body, or the error's name and text."""
    reply = await bus.call(
        Message(
            destination=kw.get("destination", BUS),
            path=kw.get("path", MANAGER),
            interface=kw.get("interface", MANAGER_IFACE),
            member=member,
            signature=signature,
            body=fix_body(body),  # dbus-fast 1.84 mismeasures non-ASCII strings
        )
    )
    assert reply is not None
    if reply.message_type == MessageType.ERROR:
        return {"error": reply.error_name, "text": reply.body[0] if reply.body else ""}
    return {"ok": reply.body}


async def owner_of(bus: MessageBus, name: str) -> str:
    reply = await bus.call(
        Message(
            destination="org.freedesktop.DBus",
            path="/org/freedesktop/DBus",
            interface="org.freedesktop.DBus",
            member="GetNameOwner",
            signature="s",
            body=[name],
        )
    )
    assert reply is not None
    return str(reply.body[0])


def unicast(
    bus: MessageBus, to: str, path: str, iface: str, member: str, sig: str, body: list[Any]
) -> None:
    msg = Message.new_signal(path, iface, member, sig, body)
    msg.destination = to
    bus.send(msg)


async def spoof_systemd(seconds: str) -> dict[str, Any]:
    """1: pose as systemd to the daemon, then fail every job and remove every unit it could
    be waiting for, for a while."""
    bus = await connect()
    daemon = await owner_of(bus, BUS)
    systemd = await owner_of(bus, SYSTEMD)
    unicast(
        bus,
        daemon,
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus",
        "NameOwnerChanged",
        "sss",
        [SYSTEMD, systemd, bus.unique_name],
    )
    sent, end, job = 0, time.monotonic() + float(seconds), 1
    while time.monotonic() < end:
        for _ in range(200):
            unit = f"hostagent-a{job % 50}.scope"
            unicast(
                bus,
                daemon,
                "/org/freedesktop/systemd1",
                SYSTEMD_MANAGER,
                "JobRemoved",
                "uoss",
                [job, f"/org/freedesktop/systemd1/job/{job}", unit, "failed"],
            )
            unicast(
                bus,
                daemon,
                "/org/freedesktop/systemd1",
                SYSTEMD_MANAGER,
                "UnitRemoved",
                "so",
                [unit, "/org/freedesktop/systemd1/unit/x"],
            )
            job, sent = job + 1, sent + 2
        await asyncio.sleep(0.01)  # let the writer drain
    await call(bus, "ListSessions", "", [])  # every signal went out before this reply
    bus.disconnect()
    return {"sent": sent}


async def wait_names(count: str) -> dict[str, Any]:
    """2: one WaitAny naming very many sessions."""
    bus = await connect()
    names = [f"s{i}" for i in range(int(count))]
    started = time.monotonic()
    result = await call(bus, "WaitAny", "asast", [names, ["idle"], 1])
    return {**result, "seconds": time.monotonic() - started}


async def abandoned_waits(session: str, connections: str) -> dict[str, Any]:
    """4: fill many connections with waits that never end, then leave."""
    outcomes: dict[str, int] = {}
    buses = [await connect() for _ in range(int(connections))]
    pending = []
    for bus in buses:
        for _ in range(300):  # past the per-caller cap
            pending.append(call(bus, "WaitAny", "asast", [[session], ["blocked"], 0]))
    tasks = [asyncio.ensure_future(p) for p in pending]
    done, _ = await asyncio.wait(tasks, timeout=5)
    for task in done:
        result = task.result()
        key = result.get("error", "ok")
        outcomes[key] = outcomes.get(key, 0) + 1
    for bus in buses:
        bus.disconnect()
    return {"answered": outcomes, "left_waiting": len(tasks) - len(done)}


async def capture(session: str, lines: str, method: str = "Capture") -> dict[str, Any]:
    """3: capture a history far larger than a bus message (inline, or by descriptor)."""
    bus = await connect()
    path = await session_path(bus, session)
    result = await call(bus, method, "i", [int(lines)], path=path, interface=SESSION_IFACE)
    if "ok" in result and method == "Capture":
        result = {"ok": len(result["ok"][0].encode())}
    return result


async def big_options(megabytes: str, to: str = "hostagent") -> dict[str, Any]:
    """10: a create whose options dict is tens of MB; to "systemd": the same message sent to
    systemd's own Manager (as GetUnit, which it refuses), the bench's measure of what being
    the recipient of such a message costs a service that is not hostagent."""
    bus = await connect()
    per = 1000
    env = {f"K{i}": "v" * per for i in range(int(megabytes) * 1024 * 1024 // per)}
    body = ["big", "shell", "", {"env": Variant("a{ss}", env)}]
    where = (
        {"destination": SYSTEMD, "path": "/org/freedesktop/systemd1", "interface": SYSTEMD_MANAGER}
        if to == "systemd"
        else {}
    )
    started = time.monotonic()
    result = await call(bus, "GetUnit" if where else "CreateSession", "sssa{sv}", body, **where)
    return {**result, "seconds": time.monotonic() - started}


async def million_options(times: str, to: str = "hostagent") -> dict[str, Any]:
    """16: creates, one after another, each with an options dict of a million entries (24 MB
    on the wire); the errors they got and the slowest reply's seconds. to "systemd": the
    same messages sent to systemd's Manager (as GetUnit, which it refuses)."""
    bus = await connect()
    options = {f"k{i}": Variant("s", "") for i in range(1_000_000)}
    errors, slowest = set(), 0.0
    member, where = _aimed(to, "CreateSession")
    for _ in range(int(times)):
        started = time.monotonic()
        result = await call(bus, member, "sssa{sv}", ["big", "shell", "", options], **where)
        slowest = max(slowest, time.monotonic() - started)
        errors.add(result.get("error", "none"))
    return {"errors": sorted(errors), "slowest": slowest}


async def path_words(
    kilobytes: str, clients: str, each: str, where: str = "properties", to: str = "hostagent"
) -> dict[str, Any]:
    """17: creates whose one path is kilobytes of quoted text, in a ReadWritePaths= word
    (where "properties") or as the cwd ("cwd"), each times from each of clients connections
    at once; to "systemd": the same sent to systemd's Manager (as GetUnit, which it refuses).
    The errors, the longest error text, and the slowest reply's seconds."""
    path = "/" + "a" * (int(kilobytes) * 1000)
    options = (
        {"properties": Variant("as", [f"ReadWritePaths='{path}'"])} if where == "properties" else {}
    )
    cwd = path if where == "cwd" else "/tmp"
    buses = [await connect() for _ in range(int(clients))]
    member, where = _aimed(to, "CreateSession")

    async def one(bus: MessageBus, i: int) -> tuple[dict[str, Any], float]:
        started = time.monotonic()
        body = [f"pw-{i}", "shell", cwd, options]
        result = await call(bus, member, "sssa{sv}", body, **where)
        return result, time.monotonic() - started

    calls = [
        one(bus, i * int(clients) + n) for i in range(int(each)) for n, bus in enumerate(buses)
    ]
    results = await asyncio.gather(*calls)
    for bus in buses:
        bus.disconnect()
    texts = [r.get("text", "") for r, _ in results]
    return {
        "errors": sorted({r.get("error", "none") for r, _ in results}),
        "text": max(texts, key=len)[:500],
        "longest_text": max(len(t) for t in texts),
        "slowest": max(took for _, took in results),
    }


def _aimed(to: str, member: str) -> tuple[str, dict[str, str]]:
    """The member to call, and where: hostagent's Manager, or systemd's as a GetUnit it
    refuses for its arguments (what being sent such a message costs a service not ours)."""
    if to != "systemd":
        return member, {}
    return "GetUnit", {
        "destination": SYSTEMD,
        "path": "/org/freedesktop/systemd1",
        "interface": SYSTEMD_MANAGER,
    }


async def create(name: str, options_json: str = "{}", cwd: str = "") -> dict[str, Any]:
    """A create with options given as {key: [signature, value]}."""
    bus = await connect()
    options = {k: Variant(sig, value) for k, (sig, value) in json.loads(options_json).items()}
    return await call(bus, "CreateSession", "sssa{sv}", [name, "shell", cwd, options])


async def fill(count: str, char: str, times: str) -> dict[str, Any]:
    """8: creates whose one argument is small in characters and large in bytes."""
    bus = await connect()
    errors: dict[str, int] = {}
    text = ""
    for i in range(int(count)):
        options = {"args": Variant("as", [char * int(times)])}
        result = await call(
            bus, "CreateSession", "sssa{sv}", [f"fill-{i}", "shell", "/tmp", options]
        )
        errors[result.get("error", "ok")] = errors.get(result.get("error", "ok"), 0) + 1
        text = result.get("text", "")
    return {"errors": errors, "text": text}


async def forge_follow(target: str, session: str) -> dict[str, Any]:
    """9: tell alice's follower about sessions that do not exist, and that hers is gone."""
    bus = await connect()
    path = await session_path(bus, session)
    unicast(
        bus,
        target,
        MANAGER,
        MANAGER_IFACE,
        "SessionNew",
        "so",
        ["forged", f"{MANAGER}/session/forged"],
    )
    unicast(bus, target, MANAGER, MANAGER_IFACE, "SessionRemoved", "so", [session, path])
    unicast(
        bus,
        target,
        path,
        "org.freedesktop.DBus.Properties",
        "PropertiesChanged",
        "sa{sv}as",
        [SESSION_IFACE, {"Activity": Variant("s", "blocked")}, []],
    )
    await call(bus, "ListSessions", "", [])
    return {"sent": 3}


async def session_path(bus: MessageBus, name: str) -> str:
    return str((await call(bus, "GetSession", "s", [name]))["ok"][0])


async def follow() -> None:
    """alice's side of 9: a follower (hostagent.client.follow, as watch and notify use it)
    that prints its picture, name -> activity, at every change, until stdin closes."""
    from hostagent.client.follow import Follower
    from hostagent.client.library import Client

    def show() -> None:
        picture = {n: v.activity for n, v in follower.sessions.items()}
        print(json.dumps({"sessions": picture}), flush=True)

    follower = Follower(lambda: Client.connect(True), show)
    await follower.start()
    assert follower.client is not None
    print(json.dumps({"name": follower.client.bus.unique_name}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    follower.close()


# ---- 6: a connection whose pid was reused --------------------------------------------------


def _raw_message(msg: Message) -> bytes:
    return bytes(msg._marshall(False))


class RawReader:
    """Splits what the bus sends on a raw socket into whole messages. The bus may send the
    Hello reply and its NameAcquired signal in one read or two, so reads are not messages."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def next_reply(self) -> dict[int, Any]:
        """The header fields of the next method return or error (code -> value, plus 0 ->
        the message type); signals are passed over."""
        while True:
            message = self._next()
            if message[1] in (2, 3):  # METHOD_RETURN, ERROR; 4 is a signal
                return {0: message[1], **_header_fields(message)}

    def _next(self) -> bytes:
        while (size := self._size()) is None or len(self.buffer) < size:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the bus closed the connection")
            self.buffer += data
        message, self.buffer = self.buffer[:size], self.buffer[size:]
        return message

    def _size(self) -> int | None:
        if len(self.buffer) < 16:
            return None
        order: Any = "little" if self.buffer[:1] == b"l" else "big"
        body = int.from_bytes(self.buffer[4:8], order)
        fields = int.from_bytes(self.buffer[12:16], order)
        return 16 + (fields + 7) // 8 * 8 + body


def _header_fields(message: bytes) -> dict[int, Any]:
    """The header fields of one whole message: strings, object paths and signatures as str,
    the reply serial as int. Each field is a struct, so each starts on an 8-byte boundary."""
    order: Any = "little" if message[:1] == b"l" else "big"
    end = 16 + int.from_bytes(message[12:16], order)
    fields: dict[int, Any] = {}
    at = 16
    while at < end:
        at = (at + 7) // 8 * 8
        code, sig_len = message[at], message[at + 1]
        kind = message[at + 2 : at + 2 + sig_len].decode()
        at += 3 + sig_len
        if kind == "g":
            size = message[at]
            fields[code] = message[at + 1 : at + 1 + size].decode()
            at += 2 + size
        else:  # "s", "o" and "u" all start with a 4-byte-aligned uint32
            at = (at + 3) // 4 * 4
            value = int.from_bytes(message[at : at + 4], order)
            if kind == "u":
                fields[code] = value
                at += 4
            else:
                fields[code] = message[at + 4 : at + 4 + value].decode()
                at += 5 + value
    return fields


def hook_with_stale_pid() -> None:
    """Connect, then leave the connection to a child and exit: the bus keeps this process's
    pid for the connection. Print it; on a line 'go PATH' from stdin, report a hook for NAME
    with no token, and print the reply's error. PATH is the session's object path."""
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
    unique = reader.next_reply().get(6, "")  # DESTINATION: the name the bus gave us
    connected_pid = os.getpid()
    if os.fork():
        os._exit(0)  # the pid the bus knows this connection by is free from now on
    print(json.dumps({"pid": connected_pid, "name": unique}), flush=True)
    line = sys.stdin.readline().split()
    if line[:1] != ["go"]:
        return
    report = Message(
        destination=BUS,
        path=line[1],
        interface=SESSION_IFACE,
        member="ReportHook",
        signature="sa{sv}",
        body=["SessionStart", {"session_id": Variant("s", "forged-by-pid")}],
        serial=2,
    )
    sock.sendall(_raw_message(report))
    sock.settimeout(30)
    reply = reader.next_reply()
    assert reply.get(5) == 2, reply  # REPLY_SERIAL: the bus answers Hello first, then this
    # ERROR_NAME, or "ok" when the hook was taken; SENDER says whether the bus or the daemon
    print(json.dumps({"reply": reply.get(4, "ok"), "sender": reply.get(7)}), flush=True)


def _raw_connection(fds: bool) -> socket.socket:
    """A bus connection by hand, past Hello, whose replies nobody reads unless asked."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(SOCKET)
    sock.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\n")
    assert sock.recv(4096).startswith(b"OK")
    if fds:
        sock.sendall(b"NEGOTIATE_UNIX_FD\r\n")
        assert sock.recv(4096).startswith(b"AGREE_UNIX_FD")
    sock.sendall(b"BEGIN\r\n")
    hello = Message(
        destination="org.freedesktop.DBus",
        path="/org/freedesktop/DBus",
        interface="org.freedesktop.DBus",
        member="Hello",
        serial=1,
    )
    sock.sendall(_raw_message(hello))
    RawReader(sock).next_reply()
    return sock


async def unread_captures(
    session: str, lines: str, count: str, method: str, hold: str
) -> dict[str, Any]:
    """1: ask for count captures of a long history, then never read a reply for hold
    seconds (on connections that take descriptors, for CaptureByFileDescriptor)."""
    bus = await connect()
    path = await session_path(bus, session)
    bus.disconnect()
    socks = [_raw_connection(fds=method == "CaptureByFileDescriptor") for _ in range(2)]
    for i in range(int(count)):
        msg = Message(
            destination=BUS,
            path=path,
            interface=SESSION_IFACE,
            member=method,
            signature="i",
            body=[int(lines)],
            serial=2 + i,
        )
        socks[i % 2].sendall(_raw_message(msg))
    await asyncio.sleep(float(hold))
    for sock in socks:
        sock.close()
    return {"sent": int(count)}


ATTACKS = {
    "spoof-systemd": spoof_systemd,
    "wait-names": wait_names,
    "abandoned-waits": abandoned_waits,
    "capture": capture,
    "unread-captures": unread_captures,
    "big-options": big_options,
    "million-options": million_options,
    "path-words": path_words,
    "create": create,
    "fill": fill,
    "forge-follow": forge_follow,
}


def main() -> None:
    attack, *args = sys.argv[1:]
    if attack == "hook-with-stale-pid":
        hook_with_stale_pid()
        return
    if attack == "follow":
        asyncio.run(follow())
        return
    print(json.dumps(asyncio.run(ATTACKS[attack](*args))), flush=True)


if __name__ == "__main__":
    main()
