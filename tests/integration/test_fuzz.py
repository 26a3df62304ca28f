"""Hostile input at the D-Bus boundary: 10 000 calls
and signals that hypothesis makes up (names, presets, paths, env, options of every type, wrong
signatures, strings heavy in bytes, huge containers, and unicast signals posing as systemd, the
bus or the daemon), against the real daemon. Afterwards the daemon has not crashed, every
refusal was a named error, the good sessions still work, and no stray record exists."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from dbus_fast import Message, Variant
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from hostagent import MANAGER_INTERFACE, MANAGER_PATH, SESSION_INTERFACE
from hostagent.bus.call import CallError, call
from hostagent.bus.paths import path_encode
from hostagent.client.library import Client
from hostagent.errors import ALL_ERRORS
from tests.integration.helpers import SESSIONS_DIR, create, settled
from tests.sandbox import Sandbox

BATCHES, PER_BATCH = 100, 100  # 10 000 calls
NAMED = {e.dbus_name for e in ALL_ERRORS} | {
    "org.freedesktop.DBus.Error.UnknownObject",
    "org.freedesktop.DBus.Error.UnknownMethod",
    "org.freedesktop.DBus.Error.UnknownProperty",
    "org.freedesktop.DBus.Error.PropertyReadOnly",
}
BUS = "org.hostagent.HostAgent1"

# D-Bus strings cannot hold NUL; the bus itself would refuse such a message.
text = st.one_of(
    st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=80),
    # Few characters, many bytes: what exec limits and message sizes count.
    st.text(st.sampled_from("€𝄞語ü\u200b"), min_size=1, max_size=3000),
)
HUGE = 20_000  # entries in a container: past every cap, well under the bus's message size
huge_variants = st.sampled_from(
    [
        Variant("as", ["x"] * HUGE),
        Variant("a{ss}", {f"K{i}": "v" for i in range(HUGE)}),
        Variant("as", ["€" * 40_000]),
    ]
)
names = st.one_of(
    text,
    st.from_regex(r"\A[a-z0-9][a-z0-9_.-]{0,70}\Z"),
    st.sampled_from(["", "-x", "a/b", "../etc", "x" * 64, "Upper", "ünï", "a b", "typist"]),
)
presets = st.one_of(text, st.sampled_from(["shell", "demo-agent", "claude", "", "nope"]))
paths = st.one_of(
    text,
    st.sampled_from(["", "/tmp", "/root", "/nonexistent", "relative", "/etc/shadow", "/proc/1"]),
)
variants = st.one_of(
    text.map(lambda v: Variant("s", v)),
    st.lists(text, max_size=5).map(lambda v: Variant("as", v)),
    st.dictionaries(text, text, max_size=4).map(lambda v: Variant("a{ss}", v)),
    st.integers(0, 2**64 - 1).map(lambda v: Variant("t", v)),
    st.integers(0, 2**32 - 1).map(lambda v: Variant("u", v)),
    st.integers(0, 2**16 - 1).map(lambda v: Variant("q", v)),
    st.integers(-(2**31), 2**31 - 1).map(lambda v: Variant("i", v)),
    st.booleans().map(lambda v: Variant("b", v)),
    st.floats(allow_nan=False).map(lambda v: Variant("d", v)),
    st.integers(0, 255).map(lambda v: Variant("y", v)),
)
variants = st.one_of(variants, huge_variants)
option_keys = st.one_of(
    st.sampled_from(
        [
            "command",
            "args",
            "env",
            "agent_session",
            "memory_max",
            "memory_high",
            "cpu_weight",
            "tasks_max",
            "runtime_max_sec",
            "columns",
            "rows",
            "user",
        ]
    ),
    text,
)
options = st.dictionaries(option_keys, variants, max_size=5)
SHORT = st.integers(1, 20_000)  # µs: a wait that never blocks the run

Call = tuple[str, str, str, list[Any]]  # path, member, signature, body
SIGNAL = "signal"  # a Call whose path starts so is a unicast signal sent to the daemon
SYSTEMD_MANAGER = "org.freedesktop.systemd1.Manager"
signals: st.SearchStrategy[Call] = st.one_of(
    st.tuples(
        st.sampled_from(["org.freedesktop.systemd1", BUS, "org.freedesktop.PolicyKit1"]), text, text
    ).map(
        lambda a: (
            f"{SIGNAL}:/org/freedesktop/DBus:org.freedesktop.DBus",
            "NameOwnerChanged",
            "sss",
            list(a),
        )
    ),
    st.tuples(
        st.integers(0, 2**32 - 1), names, st.sampled_from(["done", "failed", "canceled"])
    ).map(
        lambda a: (
            f"{SIGNAL}:/org/freedesktop/systemd1:{SYSTEMD_MANAGER}",
            "JobRemoved",
            "uoss",
            [a[0], f"/org/freedesktop/systemd1/job/{a[0]}", f"hostagent-{a[1]}.scope", a[2]],
        )
    ),
    names.map(
        lambda n: (
            f"{SIGNAL}:/org/freedesktop/systemd1:{SYSTEMD_MANAGER}",
            "UnitRemoved",
            "so",
            [f"hostagent-{n}.scope", "/org/freedesktop/systemd1/unit/x"],
        )
    ),
    st.tuples(text, text).map(
        lambda a: (
            f"{SIGNAL}:/org/freedesktop/systemd1/unit/hostagent_2dgood_2d0_2escope:"
            "org.freedesktop.DBus.Properties",
            "PropertiesChanged",
            "sa{sv}as",
            ["org.freedesktop.systemd1.Unit", {"ActiveState": Variant("s", a[0])}, [a[1]]],
        )
    ),
)
calls: st.SearchStrategy[Call] = st.one_of(
    signals,
    st.tuples(names, presets, paths, options).map(
        lambda a: (MANAGER_PATH, "CreateSession", "sssa{sv}", list(a))
    ),
    names.map(lambda n: (MANAGER_PATH, "GetSession", "s", [n])),
    st.integers(0, 2**32 - 1).map(lambda p: (MANAGER_PATH, "GetSessionByPID", "u", [p])),
    st.tuples(st.sampled_from(["ResumeSession", "StopSession", "RemoveSession"]), names).map(
        lambda a: (MANAGER_PATH, a[0], "s", [a[1]])
    ),
    st.tuples(names, text, st.integers(-(2**31), 2**31 - 1)).map(
        lambda a: (MANAGER_PATH, "KillSession", "ssi", list(a))
    ),
    st.tuples(st.lists(names, max_size=4), st.lists(text, max_size=3), SHORT).map(
        lambda a: (MANAGER_PATH, "WaitAny", "asast", list(a))
    ),
    SHORT.map(
        lambda t: (MANAGER_PATH, "WaitAny", "asast", [[f"n{i}" for i in range(HUGE)], ["idle"], t])
    ),
    st.tuples(names, st.integers(-(2**31), 2**31 - 1)).map(
        lambda a: (path_encode(SESSION_PREFIX, a[0]), "Capture", "i", [a[1]])
    ),
    st.tuples(st.sampled_from(["good_2d0", "good_2d1"]), st.integers(-(2**31), 2**31 - 1)).map(
        lambda a: (f"{SESSION_PREFIX}/{a[0]}", "Capture", "i", [a[1]])
    ),
    st.tuples(text, st.booleans()).map(
        lambda a: (f"{SESSION_PREFIX}/typist", "SendText", "sb", list(a))
    ),
    st.tuples(st.lists(text, max_size=3), SHORT).map(
        lambda a: (f"{SESSION_PREFIX}/good_2d0", "WaitForActivity", "ast", list(a))
    ),
    st.tuples(text, options).map(
        lambda a: (f"{SESSION_PREFIX}/good_2d1", "ReportHook", "sa{sv}", list(a))
    ),
    # Wrong signatures for real methods.
    st.tuples(st.sampled_from(["CreateSession", "StopSession", "WaitAny"]), text).map(
        lambda a: (MANAGER_PATH, a[0], "s", [a[1]])
    ),
)
SESSION_PREFIX = "/org/hostagent/HostAgent1/session"


async def run_batch(address: str, batch: list[Call]) -> list[tuple[Call, str]]:
    """Every call with its outcome: "ok" or the error name; created sessions are removed."""
    client = await Client.connect(True, address)
    (daemon,) = await call(
        client.bus,
        "org.freedesktop.DBus",
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus",
        "GetNameOwner",
        "s",
        [BUS],
    )
    outcomes = []
    try:
        for path, member, signature, body in batch:
            if path.startswith(SIGNAL):
                _, signal_path, interface = path.split(":")
                msg = Message.new_signal(signal_path, interface, member, signature, body)
                msg.destination = daemon
                client.bus.send(msg)
                outcomes.append(((path, member, signature, body), "sent"))
                continue
            interface = MANAGER_INTERFACE if path == MANAGER_PATH else SESSION_INTERFACE
            try:
                reply = await call(
                    client.bus, BUS, path, interface, member, signature, body, timeout=30
                )
                outcomes.append(((path, member, signature, body), "ok"))
            except CallError as e:
                outcomes.append(((path, member, signature, body), f"{e.name}: {e.text}"))
                continue
            if member == "CreateSession":
                try:
                    await call(client.bus, BUS, reply[0], SESSION_INTERFACE, "Remove", timeout=60)
                except CallError as e:  # a session the fuzz made must go again, and says why not
                    outcomes.append(
                        ((reply[0], "Remove", "", []), f"not removed: {e.name}: {e.text}")
                    )
    finally:
        await client.aclose()
    return outcomes


def test_ten_thousand_fuzzed_calls(sb: Sandbox) -> None:
    good = [create(sb, "demo-agent", user="alice", name=f"good-{i}") for i in range(2)]
    typist = create(sb, "shell", user="alice", name="typist")
    pid_before = sb.daemon_pid()
    seen: dict[str, int] = {}

    @settings(
        max_examples=BATCHES,
        deadline=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],  # a failure is reported with its call
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(calls, min_size=PER_BATCH, max_size=PER_BATCH))
    def batch(batch: list[Call]) -> None:
        for made, outcome in asyncio.run(run_batch(sb.bus_address, batch)):
            kind = outcome.partition(":")[0]
            seen[kind] = seen.get(kind, 0) + 1
            assert kind in ("ok", "sent") or kind in NAMED, (made, outcome)

    try:
        batch()
        print("outcomes:", json.dumps(seen, indent=1, sort_keys=True))
        assert sum(seen.values()) >= BATCHES * PER_BATCH
        assert sb.daemon_pid() == pid_before, "the daemon restarted"
        assert "Internal error" not in sb.journal(lines=2000)
        for name in good:
            assert settled(sb, name) == ("running", "active", "running")
            assert "> " in sb.ctl("capture", name).check().stdout
        # The typist may have been typed into an exit, stopped, killed or removed.
        assert settled(sb, typist)[0] in ("running", "stopped", None)
        listed = {r["name"] for r in json.loads(sb.ctl("--json", "list").stdout)}
        on_disk = {f.removesuffix(".yaml") for f in sb.run("ls", SESSIONS_DIR).stdout.split()}
        assert listed == on_disk and set(good) <= listed <= {*good, typist}, (listed, on_disk)
    finally:
        sb.ctl("rm", *good, typist)
