"""A fleet's pure parts: the hosts file, names across hosts, why a host is down; and that every
host is asked at once, each within its own time bound (over a stand-in for the connection)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from hostagent.cli.ctl_args import parser
from hostagent.cli.ctl_fleet import hosts_of
from hostagent.client import fleet
from hostagent.client.fleet import Host, HostsFileError, locate, parse_hosts, split_name, why_down
from hostagent.client.follow import Follower, Link
from hostagent.client.library import Client
from hostagent.client.transport import TransportError
from hostagent.errors import AccessDenied, NoSuchSession, from_dbus
from tests.unit.fakes import run

A, B, C = Host("a", "alice@10.0.0.1"), Host("b", "b.example"), Host("c", "bob@c:2222")
D = Host("d", "d")  # its ssh ends in the middle of a question


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("a alice@10.0.0.1\nb.example\n", [A, Host("b.example", "b.example")]),
        ("# build hosts\n\n  a  alice@10.0.0.1  # the first\n", [A]),
        ("bob@c:2222\n", [C]),
        ("me .\n", [Host("me", ".")]),
        (".\n", [Host("localhost", ".")]),
        ("a alice@10.0.0.1\na alice@10.0.0.1\n", [A]),  # said twice, the same host
    ],
)
def test_a_hosts_file_names_each_host(text: str, hosts: list[Host]) -> None:
    assert parse_hosts(text, "hosts") == hosts


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a b c\n", "hosts:1: 'a b c' is more than NAME and [USER@]HOST[:PORT]."),
        ("x alice@one\nx bob@two\n", "hosts: two hosts are named 'x'"),
        ("a:b box\n", "'a:b' cannot name a host"),
    ],
)
def test_a_bad_hosts_file_is_one_line_that_says_where(text: str, said: str) -> None:
    with pytest.raises(HostsFileError) as e:
        parse_hosts(text, "hosts")
    assert e.value.message.startswith(said)
    assert "\n" not in e.value.message


def test_the_fleet_is_the_hosts_given_then_the_users_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setattr(fleet, "SYSTEM_HOSTS", tmp_path / "none")
    with pytest.raises(HostsFileError, match="No hosts: write one per line in"):
        fleet.fleet_hosts([], from_files=True)
    (tmp_path / "hostagent").mkdir()
    (tmp_path / "hostagent" / "hosts").write_text("b b.example\n")
    assert fleet.fleet_hosts(["alice@a"], from_files=True) == [Host("a", "alice@a"), B]


def test_one_host_is_not_a_fleet() -> None:
    one = parser().parse_args(["-H", "alice@a", "list"])
    assert hosts_of(one) is None and one.host == "alice@a"
    two = parser().parse_args(["-H", "alice@a", "-H", "b.example", "list"])
    assert hosts_of(two) == [Host("a", "alice@a"), Host("b.example", "b.example")]
    assert two.host is None


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("a:fix", (A, "fix")),  # HOST:NAME says where
        ("only-on-b", (B, "only-on-b")),  # a name one host has
        ("z:fix", None),  # not a host of the fleet: a name, which no host has
    ],
)
def test_a_name_is_found_on_its_host(name: str, found: tuple[Host, str] | None) -> None:
    listings = {A: ["fix", "both"], B: ["only-on-b", "both"]}
    if found is None:
        with pytest.raises(NoSuchSession):
            locate(name, listings, [A, B])
    else:
        assert locate(name, listings, [A, B]) == found


def test_a_name_on_two_hosts_must_say_which() -> None:
    with pytest.raises(NoSuchSession) as e:
        locate("both", {A: ["both"], B: ["both"]}, [A, B])
    assert e.value.message == "'both' names a session on several hosts: use one of a:both, b:both."
    assert split_name("b:both", [A, B]) == (B, "both")


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (TimeoutError(), "unreachable: no answer in 20 s"),
        (
            TransportError("ssh: connect to host c port 22: No route to host; check …"),
            "unreachable: ssh: connect",
        ),
        (
            from_dbus("org.freedesktop.DBus.Error.ServiceUnknown", "The name is not activatable"),
            "no daemon: The name",
        ),
        (
            from_dbus("org.freedesktop.systemd1.UnitMasked", "Unit hostagent.service is masked."),
            "no daemon: Unit",
        ),
        (TransportError("alice@a: Permission denied (publickey)."), "permission: alice@a"),
        (AccessDenied("Only root may …"), "permission: Only root"),
        (FileNotFoundError(2, "No such file or directory"), "unreachable: [Errno 2]"),
        (EOFError(), "unreachable: the connection closed before the host answered"),
    ],
)
def test_a_host_that_gave_no_answer_says_why(error: BaseException, said: str) -> None:
    assert why_down(error, 20).startswith(said)


class FakeClient:
    """A connection to a host that answers after a delay, or never."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


def test_every_host_is_asked_at_once_and_a_slow_one_holds_up_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delays = {"alice@10.0.0.1": 0.0, "b.example": 60.0, "bob@c:2222": None, "d": -1.0}
    made: list[FakeClient] = []

    async def connect(system: bool, host: str | None = None, **_: Any) -> FakeClient:
        delay = delays[host or ""]
        if delay is None:
            raise TransportError("ssh: Could not resolve hostname c")
        made.append(FakeClient(delay))
        return made[-1]

    async def question(c: Any) -> str:
        if c.delay < 0:  # its ssh ended in the middle of the question
            raise EOFError
        await asyncio.sleep(c.delay)
        return "answer"

    monkeypatch.setattr(Client, "connect", connect)
    loop = asyncio.new_event_loop()
    try:
        answers = loop.run_until_complete(fleet.ask([A, B, C, D], True, question, timeout=0.3))
    finally:
        loop.close()
    assert [(a.host, a.value, a.down) for a in answers] == [
        (A, "answer", ""),
        (B, None, "unreachable: no answer in 0.3 s"),
        (C, None, "unreachable: ssh: Could not resolve hostname c"),
        (D, None, "unreachable: the connection closed before the host answered"),
    ]
    assert all(c.closed for c in made)


def test_a_follower_whose_bus_ends_looks_for_it_again_and_says_why(
    bus_daemon: tuple[str, int],
) -> None:
    """dbus-fast raises what ended a connection it did not close itself (an end of file: ssh
    gone with its host, dbus-daemon restarted); the follower must take that as the end too, and
    look for its bus again, saying why it cannot reach it."""
    address, pid = bus_daemon
    changed = asyncio.Event()

    async def body() -> None:
        follower = Follower(lambda: Client.connect(False, address=address), changed.set, "h")
        await follower.start()
        assert follower.link.value == "gone"  # a bus without hostagent on it
        os.kill(pid, signal.SIGKILL)
        while follower.link is not Link.RECONNECTING or not follower.why:
            changed.clear()
            await asyncio.wait_for(changed.wait(), 10)
        assert "No such file or directory" in follower.why or "refused" in follower.why
        follower.close()

    run(body())


def test_a_fleet_wait_says_which_host_it_could_not_reach(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """wait across hosts: a host that cannot be reached is one line saying why; the first
    session to get there, on a host that answers, is the answer."""
    from hostagent.cli import ctl_fleet

    class Waiting:
        async def wait_any(
            self, names: list[str], activities: list[str], t: int
        ) -> tuple[str, str]:
            return names[0], "blocked"

        async def aclose(self) -> None:
            pass

    async def connect(system: bool, host: str | None = None, **_: Any) -> Waiting:
        if host == C.target:
            raise TransportError("ssh: connect to host c port 2222: Connection refused")
        return Waiting()

    monkeypatch.setattr(Client, "connect", connect)
    args = parser().parse_args(["wait", "a:fix", "c:other", "--for", "blocked"])
    args.system_bus = True
    code = asyncio.run(ctl_fleet.fleet_wait(args, [A, C]))
    out, err = capsys.readouterr()
    assert (code, out) == (0, "a:fix blocked\n")
    args = parser().parse_args(["wait", "c:other"])
    args.system_bus = True
    assert asyncio.run(ctl_fleet.fleet_wait(args, [A, C])) == 1
    out, err = capsys.readouterr()
    assert err == "c: unreachable: ssh: connect to host c port 2222: Connection refused\n"
