"""Following usage in the daemon's core (follow/usage.py over the fakes, the reading helper run
for real as the current user on tmp files): a turn's end reads the CLI's record into the
session's Usage and the owner's books; totals survive a restart and a new conversation id;
budgets stop a session at its turn's end and an admin's lift resumes it. The real CLIs are
driven on a real systemd in tests/integration/test_real_agents.py."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from hostagent.activity import Verdict
from hostagent.budgets import Budget, Budgets, Price, day_of, over_budget, priced
from hostagent.config import Config
from hostagent.daemon.follow.usage import usage_of
from hostagent.daemon.state.live import Session
from hostagent.errors import BudgetExceeded
from hostagent.options import CreateRequest
from hostagent.presets import IdSource, Preset
from hostagent.session import Activity, DormantReason, Event, State, now_usec
from hostagent.usage import Usage, since
from hostagent.usage.readers import READERS
from tests.unit.fakes import Host, ShownWatch, me, run

DATA = Path(__file__).parents[1] / "data" / "usage"
CLAUDE = DATA / "claude" / "2.1.332-two-turns-then-stopped.jsonl"
AIDER = DATA / "aider" / "0.86.2-two-turns-then-stopped.md"
METER = Preset(
    name="meter",
    command=["agent"],
    id_source=IdSource.ASSIGNED,
    assign_args=["--session-id", "{id}"],
    resume_args=["--resume", "{id}"],
    usage_format="claude",
    usage_file="{cwd}/{id}.jsonl",
)
SHARED = Preset(name="shared", command=["agent"], usage_format="aider", usage_file="{cwd}/h.md")
TWO_TURNS = READERS["claude"](CLAUDE.read_text())


async def turn(host: Host, session: Session) -> None:
    """A turn: working, then idle, each announced as the pane watch would."""
    shown = session.watch if isinstance(session.watch, ShownWatch) else ShownWatch()
    session.watch = shown
    for name in ("working", "idle"):
        shown.verdict = Verdict(Activity(name), "screen", "test", "")
        host.registry.announce(session)
        await host.settle()


async def metered(tmp: Path, config: Config | None = None) -> tuple[Host, Session]:
    host = await Host.started(tmp / "host", config)
    host.core.settings.presets.update(meter=METER, shared=SHARED)
    await host.create(me(), "a", "meter", str(tmp), CreateRequest())
    await host.settle()
    return host, host.registry.get("a")


async def read_by_a_timer(host: Host, session: Session) -> None:
    """Until a follow-up timer's reading has counted the two turns (5 s at most)."""
    deadline = asyncio.get_running_loop().time() + 5
    while usage_of(session) != TWO_TURNS:
        assert asyncio.get_running_loop().time() < deadline, "never read"
        await asyncio.sleep(0.02)
        await host.settle()


def books(host: Host) -> dict[str, Usage]:
    return host.core.usage.ledger.used(me(), 0, now_usec() + 1)


def test_a_turns_end_reads_the_record_into_usage_and_the_books(tmp_path: Path) -> None:
    async def body() -> None:
        host, session = await metered(tmp_path)
        assert usage_of(session) == Usage()  # nothing written yet: nothing used
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")
        await turn(host, session)
        assert usage_of(session) == TWO_TURNS
        assert books(host) == {"meter": TWO_TURNS}
        await turn(host, session)  # read again: nothing counted twice
        assert usage_of(session) == TWO_TURNS
        assert books(host) == {"meter": TWO_TURNS}

    run(body())


def test_totals_survive_a_restart_and_a_new_conversation(tmp_path: Path) -> None:
    async def body() -> None:
        host, session = await metered(tmp_path)
        first = session.record.agent_session
        shutil.copy(CLAUDE, tmp_path / f"{first}.jsonl")
        await turn(host, session)
        again = host.restart()
        again.core.settings.presets.update(meter=METER)
        await again.core.recover()
        await again.settle()
        session = again.registry.get("a")
        assert usage_of(session) == TWO_TURNS  # from the record, and read again: the same
        assert again.core.usage.ledger.used(me(), 0, now_usec() + 1) == {"meter": TWO_TURNS}
        # A /clear: the CLI starts a new conversation; the old one still counts.
        new = "0b9c2a3e-1111-4222-8333-444455556666"
        again.core.conversations.set_id(session, new, "hook", "clear")
        shutil.copy(CLAUDE, tmp_path / f"{new}.jsonl")
        await turn(again, session)
        assert usage_of(session) == TWO_TURNS + TWO_TURNS
        assert session.record.usage.keys() == {first, new}

    run(body())


def test_a_directorys_record_counts_only_what_came_after_the_session_began(
    tmp_path: Path,
) -> None:
    """Aider's history is one file per directory, for every run there: what it held when the
    session was created is another session's."""

    async def body() -> None:
        host = await Host.started(tmp_path / "host")
        host.core.settings.presets.update(shared=SHARED)
        history = tmp_path / "h.md"
        shutil.copy(AIDER, history)
        await host.create(me(), "b", "shared", str(tmp_path), CreateRequest())
        await host.settle()
        session = host.registry.get("b")
        await turn(host, session)
        assert usage_of(session) == Usage()
        history.write_text(AIDER.read_text() * 2)
        await turn(host, session)
        assert usage_of(session) == READERS["aider"](AIDER.read_text())

    run(body())


def test_over_its_owners_budget_a_session_stops_at_its_turns_end_until_lifted(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        config = Config(budgets=Budgets(user=Budget(tokens=TWO_TURNS.tokens)))
        host, session = await metered(tmp_path, config)
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")
        await turn(host, session)
        record = session.record
        assert (record.state, record.dormant_reason) == (State.DORMANT, DormantReason.BUDGET)
        assert "its owner's sessions used" in record.last_error
        with pytest.raises(BudgetExceeded, match="lifts the budget"):
            await host.lifecycle.resume(session)
        with pytest.raises(BudgetExceeded):
            await host.create(me(), "c", "meter", str(tmp_path), CreateRequest())
        host.core.usage.ledger.lift(me(), day_of(now_usec()))
        await host.lifecycle.resume(session)
        assert session.record.state is State.RUNNING
        await turn(host, session)  # lifted for the day: it goes on
        assert session.record.state is State.RUNNING

    run(body())


def test_a_reading_the_books_have_but_the_record_lost_is_not_counted_twice(
    tmp_path: Path,
) -> None:
    """The reading reached the books, and a crash kept its record from the disk: the next
    daemon reads the same figures again and the books add nothing."""

    async def body() -> None:
        host, session = await metered(tmp_path)
        path = host.store.path_of("a")
        before = path.read_bytes()  # the record as it was before the turn
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")
        await turn(host, session)
        assert books(host) == {"meter": TWO_TURNS}
        path.write_bytes(before)  # as if the record's write had not reached the disk
        again = host.restart()
        again.core.settings.presets.update(meter=METER)
        await again.core.recover()
        assert usage_of(again.registry.get("a")) == Usage()
        await turn(again, again.registry.get("a"))
        assert usage_of(again.registry.get("a")) == TWO_TURNS
        assert books(again) == {"meter": TWO_TURNS}

    run(body())


def test_books_of_before_the_marks_take_them_from_the_records(tmp_path: Path) -> None:
    """Books a hostagent without marks wrote: the sessions' records say what was entered."""

    async def body() -> None:
        host, session = await metered(tmp_path)
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")
        await turn(host, session)
        books_file = host.store.directory / "usage" / f"{me()}.json"
        old = json.loads(books_file.read_bytes())
        del old["counted"]
        books_file.write_text(json.dumps(old))
        again = host.restart()
        again.core.settings.presets.update(meter=METER)
        await again.core.recover()
        await turn(again, again.registry.get("a"))  # the same figures, read again
        assert books(again) == {"meter": TWO_TURNS}

    run(body())


@pytest.mark.parametrize("torn", [("json",), ("json", "json.prev")], ids=["last", "both"])
def test_torn_books_are_set_aside_and_the_days_budget_holds(
    tmp_path: Path, torn: tuple[str, ...]
) -> None:
    """The last books torn: the ones before are loaded and the records bring them up to date.
    Both torn: rebuilt from the records. Either way the day's budget still refuses."""

    async def body() -> None:
        config = Config(budgets=Budgets(user=Budget(tokens=TWO_TURNS.tokens)))
        host, session = await metered(tmp_path, config)
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")
        await turn(host, session)
        assert session.record.dormant_reason is DormantReason.BUDGET
        for end in torn:
            path = host.store.directory / "usage" / f"{me()}.{end}"
            path.write_bytes(path.read_bytes()[:40])
        again = host.restart()
        again.core.settings.presets.update(meter=METER)
        await again.core.recover()
        assert books(again) == {"meter": TWO_TURNS}
        kept = [p.name for p in host.store.corrupt_dir.iterdir()]
        assert len(kept) == len(torn) and all(k.startswith("usage-") for k in kept), kept
        with pytest.raises(BudgetExceeded):
            await again.create(me(), "c", "meter", str(tmp_path), CreateRequest())
        books_file = host.store.directory / "usage" / f"{me()}.json"
        assert json.loads(books_file.read_bytes())["counted"]  # written whole again

    run(body())


def test_a_turn_still_going_is_let_finish(tmp_path: Path) -> None:
    async def body() -> None:
        config = Config(budgets=Budgets(session=Budget(tokens=1)))
        host, session = await metered(tmp_path, config)
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")
        shown = ShownWatch()
        session.watch = shown
        shown.verdict = Verdict(Activity.BLOCKED, "screen", "test", "")
        host.registry.announce(session)
        host.core.usage.read_soon(session)  # an id learned mid-turn reads too
        await host.settle()
        assert usage_of(session) == TWO_TURNS
        assert session.record.state is State.RUNNING
        await turn(host, session)
        assert session.record.dormant_reason is DormantReason.BUDGET
        assert "it used" in session.record.last_error

    run(body())


@pytest.mark.parametrize(
    ("budgets", "user", "session", "lifted", "why"),
    [
        (Budgets(), Usage(10**9, 0), Usage(), False, ""),
        (
            Budgets(user=Budget(tokens=100)),
            Usage(60, 40),
            Usage(),
            False,
            "owner's sessions used 100 tokens",
        ),
        (Budgets(user=Budget(tokens=100)), Usage(60, 39), Usage(), False, ""),
        (Budgets(user=Budget(tokens=100)), Usage(60, 40), Usage(), True, ""),
        (Budgets(user=Budget(cost_usd=1.0)), Usage(cost_usd=1.5), Usage(), False, "$1.50 today"),
        (Budgets(user=Budget(cost_usd=1.0)), Usage(5, 5), Usage(), False, ""),  # cost unknown
        (Budgets(session=Budget(tokens=10)), Usage(5, 5), Usage(5, 5), False, "it used 10 tokens"),
        (
            Budgets(user=Budget(tokens=100), users={"alice": Budget(tokens=1000)}),
            Usage(100, 0),
            Usage(),
            False,
            "",
        ),
    ],
)
def test_over_budget(budgets: Budgets, user: Usage, session: Usage, lifted: bool, why: str) -> None:
    said = over_budget(budgets, "alice", user, session, lifted)
    assert (why in said) if why else said == ""


def test_an_admins_price_gives_a_cost_only_where_the_cli_states_none() -> None:
    prices = {"m": Price(input=1.0, output=10.0, cache_read=0.1, cache_write=2.0)}
    used = Usage(1_000_000 + 200_000 + 300_000, 100_000, 200_000, 300_000, None, 3, "m")
    assert priced(used, prices).cost_usd == pytest.approx(1.0 + 1.0 + 0.02 + 0.6)
    assert priced(Usage(10, 1, cost_usd=0.5, model="m"), prices).cost_usd == 0.5
    assert priced(Usage(10, 1, model="other"), prices).cost_usd is None


@pytest.mark.parametrize(
    ("before", "after", "added"),
    [
        (Usage(), Usage(10, 2, 1, 1, None, 1), Usage(10, 2, 1, 1, None, 1)),
        (Usage(10, 2, calls=1), Usage(15, 3, calls=2), Usage(5, 1, calls=1)),
        (
            Usage(10, 2, calls=1, cost_usd=0.1),
            Usage(15, 3, calls=2, cost_usd=0.25),
            Usage(5, 1, calls=1, cost_usd=0.15),
        ),
        (Usage(10, 2, calls=2), Usage(4, 1, calls=1), Usage()),  # a record rewritten shorter
    ],
)
def test_since(before: Usage, after: Usage, added: Usage) -> None:
    got = since(before, after)
    assert (got.input, got.output, got.calls) == (added.input, added.output, added.calls)
    assert (
        got.cost_usd == pytest.approx(added.cost_usd)
        if added.cost_usd
        else got.cost_usd in (None, 0.0)
    )


def test_a_desktop_hears_why_a_budget_stopped_a_session() -> None:
    from hostagent.cli.notify import alert_for

    why = "Stopped at its turn's end: it used 1250 tokens today, the budget is 1."
    for before in (("running", "idle"), ("stopped", "exited")):  # the stop may be seen first
        alert = alert_for("a", before, ("dormant", "exited"), "budget", why)
        assert alert is not None and (alert.summary, alert.body) == ("a stopped: over budget", why)
    assert alert_for("a", ("stopped", "exited"), ("dormant", "exited"), "reboot") is None
    # A reboot's dormant session is no news from a running one; an exit still is.
    assert alert_for("a", ("running", "idle"), ("stopped", "exited")) is not None


def test_a_record_written_after_the_prompt_is_read_by_the_follow_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CLI may write its record after it has drawn its prompt (Qwen Code's memory sub-agent
    runs then): the session is read again a moment after its turn's end."""
    from hostagent.daemon.follow import usage as following

    monkeypatch.setattr(following, "FOLLOW_UPS", (0.05, 1.0))

    async def body() -> None:
        host, session = await metered(tmp_path)
        await turn(host, session)
        assert usage_of(session) == Usage()
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")
        await read_by_a_timer(host, session)
        # The second follow-up must not start a reading the test's end would cut off: its
        # helper process would be left to the garbage collector, and warn in a later test.
        host.core.usage.close()
        await host.settle()

    run(body())


def test_a_turn_that_ended_while_the_daemon_was_down_is_read_at_its_start(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        host, session = await metered(tmp_path)
        await turn(host, session)  # nothing written yet: nothing used
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")  # meanwhile
        again = host.restart()
        again.core.settings.presets.update(meter=METER)
        await again.core.recover()
        await again.settle()
        assert usage_of(again.registry.get("a")) == TWO_TURNS
        assert books(again) == {"meter": TWO_TURNS}

    run(body())


def test_a_start_reads_each_session_but_stops_none_its_turn_did_not_end(tmp_path: Path) -> None:
    """Over its owner's budget, a session found at the daemon's start has its usage read, and
    its pane's first reading (idle) is no turn's end: it goes on until a turn of its ends."""

    async def body() -> None:
        config = Config(budgets=Budgets(user=Budget(tokens=TWO_TURNS.tokens)))
        host, session = await metered(tmp_path, config)
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")  # meanwhile
        again = host.restart()
        again.core.settings.presets.update(meter=METER)
        await again.core.recover()
        await again.settle()
        session = again.registry.get("a")
        assert usage_of(session) == TWO_TURNS  # over the budget now
        shown = ShownWatch()
        again.registry.watched(session, shown)
        shown.verdict = Verdict(Activity.IDLE, "screen", "test", "")
        again.registry.announce(session)  # the pane's first reading after the start
        await again.settle()
        assert session.record.state is State.RUNNING
        await turn(again, session)  # a turn of its own ends: now it stops
        assert session.record.dormant_reason is DormantReason.BUDGET

    run(body())


def test_a_budget_stop_the_daemon_did_not_finish_ends_dormant_for_the_budget(
    tmp_path: Path,
) -> None:
    """The intent is written with the stop: a daemon that dies before the end leaves a record
    that recovery ends as the budget stop would have, and a lift resumes it."""

    async def body() -> None:
        config = Config(budgets=Budgets(user=Budget(tokens=TWO_TURNS.tokens)))
        host, session = await metered(tmp_path, config)
        why = "Stopped at its turn's end: over budget."
        host.registry.change(
            session, Event.STOP, dormant_reason=DormantReason.BUDGET, last_error=why
        )  # the budget stop's first step; then the daemon died
        host.systemd.events = None
        host.systemd.end(session.record.unit)
        again = host.restart()
        again.core.settings.presets.update(meter=METER)
        await again.core.recover()
        await again.settle()
        record = again.registry.get("a").record
        assert (record.state, record.dormant_reason, record.last_error) == (
            State.DORMANT,
            DormantReason.BUDGET,
            why,
        )
        again.core.usage.ledger.lift(me(), day_of(now_usec()))
        await again.lifecycle.resume(again.registry.get("a"))
        await again.settle()
        assert record.state is State.RUNNING

    run(body())


def test_a_budget_stop_that_never_reached_systemd_leaves_the_session_running(
    tmp_path: Path,
) -> None:
    """Killed before the scope was stopped: the next start adopts the live unit, and the
    stop's reason goes with the stop that did not happen."""

    async def body() -> None:
        host, session = await metered(tmp_path)
        host.registry.change(
            session, Event.STOP, dormant_reason=DormantReason.BUDGET, last_error="over"
        )  # the budget stop's first step; then the daemon died, the scope still running
        again = host.restart()
        again.core.settings.presets.update(meter=METER)
        await again.core.recover()
        await again.settle()
        record = again.registry.get("a").record
        assert (record.state, record.dormant_reason, record.last_error) == (
            State.RUNNING,
            DormantReason.NONE,
            "",
        )

    run(body())


def test_a_turn_too_quick_to_be_seen_working_is_read_after_its_line_was_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The screen went from idle to idle (a CLI without hooks, a quick answer): the line sent
    through the daemon is what says a turn may have happened, and the usage is read after."""
    from hostagent.daemon.follow import usage as following

    monkeypatch.setattr(following, "FOLLOW_UPS", (0.05, 1.0))

    async def body() -> None:
        host, session = await metered(tmp_path)
        await turn(host, session)  # idle, and nothing used
        host.core.usage.close()  # that turn's own follow-ups are not this one's
        await host.core.terminal.send_text(session, "quick one", True)
        shutil.copy(CLAUDE, tmp_path / f"{session.record.agent_session}.jsonl")  # its answer
        await read_by_a_timer(host, session)
        host.core.usage.close()
        await host.settle()

    run(body())
