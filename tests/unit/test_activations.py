"""Services an agent has a bus start for it: which journal lines tell of one, and what the
session's Containment then says."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hostagent.daemon.follow import containment
from hostagent.daemon.follow.activations import (
    Activation,
    ActivationWatch,
    describe,
    journal_follow_argv,
    parse,
)
from hostagent.options import CreateRequest
from tests.unit.fakes import Host, me, run


async def nothing_followed(argv: list[str], max_line: int) -> AsyncIterator[bytes]:
    """The journal as a test reads it: entries are handed to read() one by one."""
    return
    yield b""


A11Y = (
    "[session uid=1001 pid=490] Activating via systemd: service name='org.a11y.Bus' "
    "unit='at-spi-dbus-bus.service' requested by ':1.2' (uid=1001 pid=507 comm=\"codex\")"
)


@pytest.mark.parametrize(
    ("message", "activation"),
    [
        (A11Y, Activation("session", "org.a11y.Bus", "at-spi-dbus-bus.service", 507)),
        (
            "[system] Activating via systemd: service name='org.freedesktop.PolicyKit1' "
            "unit='polkit.service' requested by ':1.1' (uid=0 pid=49 "
            'comm="/lib/systemd/systemd-logind")',
            Activation("system", "org.freedesktop.PolicyKit1", "polkit.service", 49),
        ),
        # A service file without SystemdService=: the bus runs it itself.
        (
            "[session uid=1001 pid=490] Activating service name='org.example.Notes' requested "
            "by ':1.9' (uid=1001 pid=812 comm=\"node\")",
            Activation("session", "org.example.Notes", "", 812),
        ),
        ("[session uid=1001 pid=490] Successfully activated service 'org.a11y.Bus'", None),
        ("Activating via systemd: service name='x' unit='y' requested by ':1.2' (pid=3)", None),
        ("", None),
    ],
)
def test_which_lines_tell_of_an_activation(message: str, activation: Activation | None) -> None:
    assert parse(message) == activation


def test_what_the_session_is_told() -> None:
    said = describe(Activation("session", "org.a11y.Bus", "at-spi-dbus-bus.service", 507))
    assert said == (
        "the agent had the owner's session bus start org.a11y.Bus (at-spi-dbus-bus.service), "
        "which runs outside the session's scope and outlives it"
    )
    assert "the system bus start org.x," in describe(Activation("system", "org.x", "", 1))


def test_a_restarted_follow_goes_on_after_the_last_line_read() -> None:
    assert "--lines=0" in journal_follow_argv("")
    argv = journal_follow_argv("s=abc;i=1")
    assert "--after-cursor=s=abc;i=1" in argv and "--lines=0" not in argv
    assert argv[-1] == "_COMM=dbus-daemon"


def test_the_session_whose_scope_holds_the_asker_is_flagged(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        session = host.registry.get("a")
        # Where each pid is, as /proc would say: 507 in a's scope, 600 somewhere else.
        host.scopes.cgroups.update({507: session.record.unit, 600: None})
        guard = containment.Guard(host.registry, host.systemd)
        watch = ActivationWatch(host.registry, host.scopes, guard, nothing_followed)

        def entry(message: str, cursor: str) -> bytes:
            return json.dumps({"MESSAGE": message, "__CURSOR": cursor}).encode()

        await watch.read(entry(A11Y.replace("pid=507", "pid=600"), "c1"))
        await watch.read(entry("[session uid=1001 pid=490] Successfully activated", "c2"))
        await watch.read(b"not json")
        assert host.registry.get("a").record.containment == ""
        assert watch.cursor == "c2"
        await watch.read(entry(A11Y, "c3"))
        assert "start org.a11y.Bus (at-spi-dbus-bus.service)" in session.record.containment
        assert watch.cursor == "c3"

    run(body())
