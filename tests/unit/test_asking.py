"""A blocked session's question as the daemon keeps it (state/asking.py), an answer typed as
its keys (follow/answering.py), and who may answer (permissions.answer_from_inside)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hostagent.daemon.bus.questions import program_name
from hostagent.daemon.follow import answering
from hostagent.daemon.state.asking import ANSWER_TAKES, Asking
from hostagent.errors import AccessDenied, InvalidArgs, NoQuestion
from hostagent.identity import Owner
from hostagent.options import CreateRequest
from hostagent.permissions import answer_from_inside
from hostagent.session import SessionRecord
from tests.unit.fakes import Host, ShownWatch, me, run

MENU = "Bash command\n  rm -rf build/\nDo you want to proceed?\n❯ 1. Yes\n  2. No\n"
MOVED = "Bash command\n  rm -rf build/\nDo you want to proceed?\n  1. Yes\n❯ 2. No\n"
OTHER = "Bash command\n  make install\nDo you want to proceed?\n❯ 1. Yes\n  2. No\n"
PROMPT = "● Done.\n> "


def test_a_question_keeps_its_id_while_the_screen_shows_it() -> None:
    asking = Asking()
    assert asking.see(True, MENU) and asking.asked is not None
    first = asking.asked
    assert not asking.see(True, MENU)  # read again: no change
    assert asking.see(True, MOVED)  # the highlight moved: the same question, shown so
    assert asking.asked is not None and asking.asked.id == first.id
    assert asking.asked.question.selected == 1 and asking.asked.since == first.since
    assert asking.see(True, OTHER)  # another command: another question
    assert asking.asked is not None and asking.asked.id != first.id
    assert asking.see(False, PROMPT) and asking.asked is None


@pytest.mark.parametrize(
    "blocked, screen, asks",
    [
        (True, MENU, True),
        (False, MENU, False),  # a menu drawn in an idle session's scrollback is no question
        (True, PROMPT, False),  # blocked by a hook, nothing drawn yet
        (True, "Run shell command? (Y)es/(N)o [Yes]:", True),
    ],
)
def test_only_a_blocked_session_asks(blocked: bool, screen: str, asks: bool) -> None:
    asking = Asking()
    asking.see(blocked, screen)
    assert (asking.asked is not None) == asks


def test_an_answered_question_stays_out_until_its_dialog_goes() -> None:
    """The CLI has not redrawn yet: the same dialog read again is not asked again; once a
    screen shows no question, the same question drawn later is a new one."""
    asking = Asking()
    asking.see(True, MENU)
    answered = asking.asked
    assert answered is not None
    asking.took(answered, at=100.0)
    assert asking.asked is None
    assert not asking.see(True, MENU, at=100.5) and asking.asked is None
    asking.see(False, PROMPT, at=101.0)
    assert asking.see(True, MENU, at=101.5) and asking.asked is not None
    assert asking.asked.id != answered.id


def test_a_dialog_still_drawn_after_its_answer_dropped_the_keys_is_asked_again() -> None:
    asking = Asking()
    asking.see(True, MENU)
    answered = asking.asked
    assert answered is not None
    asking.took(answered, at=100.0)
    assert not asking.see(True, MENU, at=100.0 + ANSWER_TAKES - 0.1)
    assert asking.see(True, MENU, at=100.0 + ANSWER_TAKES) and asking.asked is not None
    assert asking.asked.id != answered.id


async def _asking(tmp_path: Path, screen: str) -> tuple[Host, str]:
    """Host with session 'a' running, its watch asking what screen shows; the question's id."""
    host = await Host.started(tmp_path)
    await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
    session = host.registry.get("a")
    watch = ShownWatch()
    host.registry.watched(session, watch)
    watch.asking.see(True, screen)
    host.scopes.tmux.screens["a"] = (screen, "")
    assert watch.asking.asked is not None
    return host, watch.asking.asked.id


def test_an_answer_presses_the_keys_from_where_the_highlight_stands_now(tmp_path: Path) -> None:
    async def body() -> None:
        host, id = await _asking(tmp_path, MENU)
        fake = host.scopes.tmux
        fake.screens["a"] = (MOVED, "")  # the user moved the highlight meanwhile
        session = host.registry.get("a")
        chosen = await answering.answer(fake, session, id, "yes")
        assert chosen.label == "Yes" and fake.pressed == [("a", ("Up", "Enter"))]
        assert session.asked is None
        assert session.watch.looks_again == [ANSWER_TAKES + 0.1]  # type: ignore[union-attr]
        with pytest.raises(NoQuestion, match="asks nothing now"):
            await answering.answer(fake, session, id, "yes")

    run(body())


@pytest.mark.parametrize(
    "said, problem",
    [("maybe", "No choice starts with 'maybe'"), ("3", "No choice 3"), ("", "Give a choice")],
)
def test_an_answer_that_names_no_choice_types_nothing(
    tmp_path: Path, said: str, problem: str
) -> None:
    async def body() -> None:
        host, id = await _asking(tmp_path, MENU)
        with pytest.raises(InvalidArgs, match=problem):
            await answering.answer(host.scopes.tmux, host.registry.get("a"), id, said)
        assert host.scopes.tmux.pressed == []
        assert host.registry.get("a").asked is not None  # still waiting

    run(body())


def test_a_question_replaced_on_screen_is_not_answered(tmp_path: Path) -> None:
    async def body() -> None:
        host, id = await _asking(tmp_path, MENU)
        fake = host.scopes.tmux
        fake.screens["a"] = (OTHER, "")  # the agent asks another before the watch read it
        with pytest.raises(NoQuestion, match="left the screen"):
            await answering.answer(fake, host.registry.get("a"), id, "1")
        with pytest.raises(NoQuestion, match="another question"):
            await answering.answer(fake, host.registry.get("a"), "not-its-id", "1")
        assert fake.pressed == []

    run(body())


def test_of_two_answers_at_once_the_first_is_typed_and_the_other_told(tmp_path: Path) -> None:
    """The first answer is parked in its screen read; the second comes meanwhile."""

    async def body() -> None:
        host, id = await _asking(tmp_path, MENU)
        fake = host.scopes.tmux
        read, gate, reading = fake.screen_and_title, asyncio.Event(), asyncio.Event()

        async def parked(owner: Owner, sock: Path) -> tuple[str, str, str]:
            reading.set()
            await gate.wait()
            return await read(owner, sock)

        fake.screen_and_title = parked  # type: ignore[method-assign]
        session = host.registry.get("a")
        first = asyncio.ensure_future(answering.answer(fake, session, id, "yes"))
        await reading.wait()
        with pytest.raises(NoQuestion, match="being answered"):
            await answering.answer(fake, session, id, "no")
        gate.set()
        assert (await first).label == "Yes"
        assert fake.pressed == [("a", ("Enter",))]

    run(body())


def _record(name: str, uuid: str, parent: str = "") -> SessionRecord:
    return SessionRecord(name=name, uuid=uuid, parent=parent)


@pytest.mark.parametrize(
    "inside, target, makers, refused",
    [
        ("planner", "planner", [], "its own terminal"),
        ("child", "planner", ["u-planner"], "its maker 'planner''s terminal"),
        ("grandchild", "planner", ["u-child", "u-planner"], "its maker 'planner''s"),
        ("planner", "child", [], None),  # a maker answers the sessions it made
        ("child", "sibling", ["u-planner"], None),  # not a maker: act_from_inside decides
    ],
)
def test_a_session_never_answers_its_own_question_nor_its_makers(
    inside: str, target: str, makers: list[str], refused: str | None
) -> None:
    caller, asked = _record(inside, f"u-{inside}"), _record(target, f"u-{target}")
    if refused is None:
        answer_from_inside(caller, asked, makers)
        return
    with pytest.raises(AccessDenied, match=refused):
        answer_from_inside(caller, asked, makers)


@pytest.mark.parametrize("allowed", [True, False])
def test_an_owners_rule_answers_her_sessions_question_once_unless_the_admin_forbids(
    tmp_path: Path, allowed: bool
) -> None:
    async def body() -> None:
        host, _ = await _asking(tmp_path, MENU)
        host.config.answer_rules = allowed
        host.core.answers.set(
            me(), "rules: [{preset: shell, question: '*rm -rf build/*', answer: yes}]"
        )
        session = host.registry.get("a")
        host.registry.announce(session)
        host.registry.announce(session)  # looked at once, whatever is announced after
        await host.core.background.settle()
        assert host.scopes.tmux.pressed == ([("a", ("Enter",))] if allowed else [])
        assert (session.asked is None) == allowed

    run(body())


@pytest.mark.parametrize(
    "argv, name",
    [
        (["/usr/bin/python3", "/usr/bin/hostagentctl", "--system", "answer"], "hostagentctl"),
        (["python3", "-I", "-m", "hostagent.cli.notify"], "hostagent.cli.notify"),
        (["/usr/lib/cockpit/cockpit-bridge"], "cockpit-bridge"),
        (["/bin/sh", "-c", "hostagentctl answer a 1"], "sh"),  # a command, not a script
        ([], "?"),
    ],
)
def test_the_journal_names_the_program_that_answered(argv: list[str], name: str) -> None:
    assert program_name(argv) == name


def test_rules_never_answer_a_session_made_from_inside_another(tmp_path: Path) -> None:
    """An agent chooses its child's preset and directory: a child matching its user's rules
    would approve its maker's work, so rules answer sessions made outside every session."""

    async def body() -> None:
        host, _ = await _asking(tmp_path, MENU)
        host.core.answers.set(me(), "rules: [{preset: shell, answer: yes}]")
        session = host.registry.get("a")
        session.record.parent = "a-maker-uuid"
        host.registry.announce(session)
        await host.core.background.settle()
        assert host.scopes.tmux.pressed == [] and session.asked is not None

    run(body())
