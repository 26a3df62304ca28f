"""Who may do what, in the fast layer: every acting handler refuses a caller who is neither
the owner nor root (and polkit says no), lets the owner and root through, CreateSession makes
a session for another user only for root, and a containment flag is written like any change.
The same rules are shown on the real bus and polkit by tests/integration/test_security.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dbus_fast import Variant
from dbus_fast.aio import MessageBus

from hostagent.activity import Verdict
from hostagent.config import Config, UserCaps
from hostagent.daemon.bus import manager, questions
from hostagent.daemon.bus import session as handlers
from hostagent.daemon.bus.auth import Authorizer
from hostagent.daemon.bus.interface import Call
from hostagent.daemon.bus.services import Services
from hostagent.daemon.bus.session import SessionObject
from hostagent.daemon.follow import containment
from hostagent.daemon.host.counters import ScopeCounters
from hostagent.daemon.host.journal import JournalReaders
from hostagent.daemon.state.asking import Asking
from hostagent.errors import (
    AccessDenied,
    InvalidArgs,
    InvalidName,
    NoSessionForPID,
    NoSuchPreset,
)
from hostagent.options import CreateRequest
from hostagent.permissions import create_owner, owner_may_act, require_inside, require_reload
from hostagent.session import Activity, Limits
from tests.unit.fakes import FakeExporter, Host, ShownWatch, me, placed, run

STRANGER = me() + 4242  # neither the owner nor root


def nowhere() -> MessageBus:
    """The authorizer's bus, never connected: a test tells it who each caller is beforehand,
    and polkit is never reached."""
    return MessageBus(bus_address="unix:path=/nonexistent")


@pytest.mark.parametrize(
    ("caller", "owner", "may"),
    [(1001, 1001, True), (0, 1001, True), (1002, 1001, False), (1001, 0, False)],
)
def test_the_owner_and_root_may_act_without_polkit(caller: int, owner: int, may: bool) -> None:
    assert owner_may_act(caller, owner) is may


@pytest.mark.parametrize(
    ("caller", "requested", "system", "owner"),
    [
        (1001, None, True, 1001),  # one's own
        (0, 1001, True, 1001),  # root, for alice
        (0, None, True, 0),
        (1001, 1001, True, 1001),  # asking for oneself is no request for another
        (1001, None, False, 1000),  # a user daemon's sessions are its user's
    ],
)
def test_whose_session_a_create_makes(
    caller: int, requested: int | None, system: bool, owner: int
) -> None:
    assert create_owner(caller, requested, system, daemon_uid=1000) == owner


@pytest.mark.parametrize(
    ("caller", "requested", "system"), [(1001, 1002, True), (1000, 1002, False), (0, 1002, False)]
)
def test_only_root_on_the_system_bus_creates_for_another(
    caller: int, requested: int, system: bool
) -> None:
    with pytest.raises(InvalidArgs, match="Only root may create"):
        create_owner(caller, requested, system, daemon_uid=1000)


Handler = Callable[[SessionObject, Call], Awaitable[Any]]
ACTING: dict[str, Handler] = {
    "Stop": handlers.stop,
    "Kill": lambda o, c: handlers.kill(o, c, "agent", 15),
    "Resume": handlers.resume,
    "Remove": handlers.remove,
    "RemoveWithFlags": lambda o, c: handlers.remove_with_flags(o, c, 0),
    "Diff": lambda o, c: handlers._diff(o, c, False),
    "Capture": lambda o, c: handlers._capture(o, c, 10),
    "SendText": lambda o, c: handlers._send(o, c, "rm -rf ~", True),
    "GetAttachCommand": handlers._attach,
    "GetTmuxAttachCommand": handlers._tmux_attach,
    "OpenJournal": lambda o, c: handlers._journal(o, c, 10, False),
    "Answer": lambda o, c: questions.answer(o, c, "q1", "1"),
}


def services(host: Host, callers: dict[str, int]) -> Services:
    auth = Authorizer(nowhere(), use_polkit=False)
    auth._uids.update(callers)  # who each bus name is, as the bus would say
    return Services(
        host.lifecycle,
        host.owners,
        host.core.hooks,
        auth,
        placed(auth.bus, dict.fromkeys(callers, "")),  # outside every session
        FakeExporter(),
        lambda: None,
        JournalReaders(system=True),
        host.core.usage,
        ScopeCounters(host.lifecycle.scopes.systemd),
        host.core.answers,
    )


@pytest.mark.parametrize("method", ACTING, ids=list(ACTING))
def test_a_stranger_is_refused_by_every_acting_method_and_nothing_happens(
    tmp_path: Path, method: str
) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        obj = SessionObject(host.registry.get("a"), services(host, {":1.9": STRANGER}))
        before = list(host.events)
        with pytest.raises(AccessDenied, match="belongs to another user"):
            await ACTING[method](obj, Call(":1.9", interactive=False))
        assert host.events == before
        assert host.registry.get("a").record.state.value == "running"

    run(body())


@pytest.mark.parametrize("caller", [me(), 0], ids=["owner", "root"])
@pytest.mark.parametrize(
    "method", ["Stop", "Kill", "Capture", "GetAttachCommand", "GetTmuxAttachCommand"]
)
def test_the_owner_and_root_get_through(tmp_path: Path, method: str, caller: int) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        obj = SessionObject(host.registry.get("a"), services(host, {":1.7": caller}))
        await ACTING[method](obj, Call(":1.7", interactive=False))

    run(body())


@pytest.mark.parametrize("system", [True, False], ids=["system", "user"])
def test_the_attach_command_is_hostagentctls_confined_one(tmp_path: Path, system: bool) -> None:
    """GetAttachCommand gives what a person or Cockpit runs: hostagentctl's attach on this
    daemon's bus, never a plain tmux client the session's server could command."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        obj = SessionObject(host.registry.get("a"), services(host, {":1.7": me()}))
        host.registry.system = system
        bus = "--system" if system else "--user"
        assert await handlers._attach(obj, Call(":1.7", False)) == [
            "hostagentctl",
            bus,
            "attach",
            "a",
        ]
        tmux = await handlers._tmux_attach(obj, Call(":1.7", False))
        assert tmux[1:3] == ["-S", str(host.registry.get("a").paths.socket)]

    run(body())


def test_a_containment_flag_is_written_like_any_change(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        session = host.registry.get("a")
        guard = containment.Guard(host.registry, host.systemd)
        async with session.lock:
            guard.flag(session, "1 process of the agent left its scope")
        host.store.flush()
        (record,) = type(host.store)(host.store.directory).load_all()
        assert record.containment == "1 process of the agent left its scope"
        assert host.events[-1] == ("changed", "a", "running")

    run(body())


@pytest.mark.parametrize(
    ("caller", "daemon", "allowed"), [(0, 0, True), (1000, 1000, True), (1001, 0, False)]
)
def test_only_root_or_the_daemons_own_user_reloads(caller: int, daemon: int, allowed: bool) -> None:
    if allowed:
        require_reload(caller, daemon)
    else:
        with pytest.raises(AccessDenied, match="Only root may reload"):
            require_reload(caller, daemon)


UNIT = "hostagent-a.scope"


@pytest.mark.parametrize(
    ("caller_unit", "token", "expected", "believed"),
    [
        (UNIT, "s3cret", "s3cret", True),
        (UNIT, "", "", True),  # a session started before tokens: the scope alone
        ("hostagent-b.scope", "s3cret", "s3cret", False),  # another session's process
        (None, "s3cret", "s3cret", False),  # from outside any scope
        (UNIT, "guess", "s3cret", False),  # a reused pid inside, without the secret
    ],
)
def test_a_hook_is_believed_only_from_inside_the_session_with_its_secret(
    caller_unit: str | None, token: str, expected: str, believed: bool
) -> None:
    if believed:
        require_inside(caller_unit, UNIT, "a", token, expected)
    else:
        with pytest.raises(AccessDenied, match="Only a process inside session 'a'"):
            require_inside(caller_unit, UNIT, "a", token, expected)


class Asked(Authorizer):
    """An authorizer that records whether polkit would have been asked."""

    polkit_asked = False

    async def is_admin(self, sender: str, interactive: bool) -> bool:
        self.polkit_asked = True
        return False


@pytest.mark.parametrize(
    ("name", "preset", "error"),
    [("Bad Name", "shell", InvalidName), ("fine", "no-such-preset", NoSuchPreset)],
)
def test_a_bad_create_is_refused_before_polkit_could_prompt(
    tmp_path: Path, name: str, preset: str, error: type[Exception]
) -> None:
    """machined's order: read, validate, then authorize; a typo never costs a password."""

    async def body() -> None:
        config = Config(limits=Limits(tasks_max=64), users=UserCaps(admins_exceed=True))
        host = await Host.started(tmp_path, config, system=True)
        auth = Asked(nowhere(), use_polkit=True)
        auth._uids[":1.9"] = STRANGER
        frontend = host.core.front(
            auth, placed(auth.bus, {":1.9": ""}), FakeExporter(), lambda: None
        )
        over = {"tasks_max": Variant("t", 128)}  # past the cap: polkit would be asked
        with pytest.raises(error):
            await manager._create(frontend, Call(":1.9", True), name, preset, "/tmp", over)
        assert not auth.polkit_asked

    run(body())


@pytest.mark.parametrize(
    ("method", "call"),
    [
        ("Kill", lambda o, c: handlers.kill(o, c, "everyone", 15)),
        ("Kill", lambda o, c: handlers.kill(o, c, "agent", 0)),
        ("Capture", lambda o, c: handlers._capture(o, c, -1)),
        ("SendText", lambda o, c: handlers._send(o, c, "\x00", True)),
        ("WaitForActivity", lambda o, c: handlers._wait(o, c, ["busy"], 0)),
    ],
)
def test_bad_arguments_are_refused_before_the_caller_is_asked_about(
    tmp_path: Path, method: str, call: Handler
) -> None:
    """machined's order, read, validate, authorize: even a stranger is told what is wrong with
    the call, and nothing is done."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        obj = SessionObject(host.registry.get("a"), services(host, {":1.9": STRANGER}))
        with pytest.raises(InvalidArgs):
            await call(obj, Call(":1.9", interactive=False))
        assert host.systemd.units["hostagent-a.scope"].signals == []

    run(body())


@pytest.mark.parametrize(("caller", "sees"), [(me(), True), (0, True), (STRANGER, False)])
def test_the_screen_text_an_explanation_matched_is_for_those_who_may_capture(
    tmp_path: Path, caller: int, sees: bool
) -> None:
    """Anyone may ask why a session is blocked; what its screen said is the owner's."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        session = host.registry.get("a")
        secret = "❯ 1. Yes, run curl -H 'Authorization: Bearer sk-alice'"
        watch = SimpleNamespace(
            verdict=Verdict(Activity.BLOCKED, "screen", "approval", secret), asking=Asking()
        )
        session.watch = watch
        obj = SessionObject(session, services(host, {":1.5": caller}))
        said = await handlers._explain(obj, Call(":1.5", interactive=False))
        assert said["rule"] == "approval"
        assert (said["matched"] == secret) is sees and ("sk-alice" in str(said)) is sees

    run(body())


def test_pid_0_is_the_callers_own_session_as_the_bus_places_it(tmp_path: Path) -> None:
    """A hook in a session's PID namespace knows only its own pid numbers: it asks for pid 0,
    and the daemon answers with the session the bus places its connection in."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        unit = host.registry.get("a").record.unit
        auth = Authorizer(nowhere(), use_polkit=False)
        auth._uids.update({":1.7": me(), ":1.8": me()})
        frontend = host.core.front(
            auth, placed(auth.bus, {":1.7": unit, ":1.8": ""}), FakeExporter(), lambda: None
        )
        assert (
            await manager._by_pid(frontend, Call(":1.7", False), 0)
            == "/org/hostagent/HostAgent1/session/a"
        )
        with pytest.raises(NoSessionForPID, match="does not belong to any session"):
            await manager._by_pid(frontend, Call(":1.8", False), 0)

    run(body())


@pytest.mark.parametrize(
    ("caller", "system", "listed", "words"),
    [
        (me(), True, ["a"], False),  # her own, whole in the list; the property without words
        (0, True, ["a"], False),
        (STRANGER, True, [], False),  # the bus shows him the id, never the words
        (me(), False, ["a"], True),  # her own bus: the property is hers, whole
    ],
)
def test_a_question_is_listed_whole_only_to_those_who_may_answer_it(
    tmp_path: Path, caller: int, system: bool, listed: list[str], words: bool
) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path, system=system)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        session = host.registry.get("a")
        watch = ShownWatch()
        host.registry.watched(session, watch)
        watch.asking.see(True, "Run rm -rf build?\n❯ 1. Yes\n  2. No\n")
        auth = Authorizer(nowhere(), use_polkit=False)
        auth._uids[":1.5"] = caller
        frontend = host.core.front(
            auth, placed(auth.bus, {":1.5": ""}), FakeExporter(), lambda: None
        )
        found = await questions.list_questions(frontend, Call(":1.5", False))
        assert [name for name, _ in found] == listed
        assert all(q["text"].value == "Run rm -rf build?" for _, q in found)
        shown = questions.question_variants(session.asked, not system)
        assert shown["id"].value and shown["count"].value == 2
        assert ("text" in shown) is words

    run(body())
