"""Registry.change, the one way a session's record changes, and Endings.finish, the one end of
a run: an asked-for change that the disk refuses changes nothing; a fact stands and is written
later; the stop time is stamped when a session leaves the live states; a stop whose end cannot
be written still runs the whole end."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import get_type_hints

import pytest

from hostagent.daemon.state.registry import SOON_SEC, Registry
from hostagent.daemon.state.store import SidecarStore
from hostagent.errors import StorageFull
from hostagent.options import CreateRequest
from hostagent.session import (
    FACTS,
    LIVE_STATES,
    Event,
    RecordChange,
    SessionRecord,
    State,
    transition,
)
from tests.unit.fakes import Host, me, run


class FullDisk(SidecarStore):
    full = False

    def save(self, record: SessionRecord) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().save(record)


def registry_with(tmp_path: Path, state: State) -> tuple[Registry, FullDisk]:
    store = FullDisk(tmp_path / "state")
    store.prepare()
    registry = Registry(store, tmp_path / "run", system=False)
    registry.add(SessionRecord(name="a", state=state, unit="hostagent-a.scope"))
    return registry, store


# Every event, from a state where it is possible.
CASES = [
    (State.STOPPED, Event.START),
    (State.STARTING, Event.STARTED),
    (State.STARTING, Event.START_FAILED),
    (State.RUNNING, Event.STOP),
    (State.STOPPING, Event.UNIT_GONE),
    (State.RUNNING, Event.UNIT_LOST),
    (State.RUNNING, Event.FAIL),
    (State.DORMANT, Event.ADOPT),
    (State.STOPPING, Event.OVER_BUDGET),
]


def test_the_cases_cover_every_event() -> None:
    assert {event for _, event in CASES} == set(Event)


@pytest.mark.parametrize(("state", "event"), CASES, ids=[e.value for _, e in CASES])
def test_on_a_full_disk_an_asked_change_is_put_back_and_a_fact_stands(
    tmp_path: Path, state: State, event: Event
) -> None:
    async def body() -> None:
        registry, store = registry_with(tmp_path, state)
        session = registry.get("a")
        store.full = True
        if event in FACTS:
            assert registry.change(session, event, last_error="x") is False
            assert (session.record.state, session.record.last_error) == (
                transition(state, event),
                "x",
            )
            assert registry._unsaved == {"a"}
            store.full = False
            registry.write_unsaved()
            assert store.load_all()[0].state is transition(state, event)
        else:
            with pytest.raises(StorageFull, match="free space in"):
                registry.change(session, event, last_error="x")
            assert (session.record.state, session.record.last_error) == (state, "")
            assert registry._unsaved == set()

    run(body())


@pytest.mark.parametrize(("state", "event"), CASES, ids=[e.value for _, e in CASES])
def test_the_stop_time_is_stamped_when_a_session_leaves_the_live_states(
    tmp_path: Path, state: State, event: Event
) -> None:
    registry, _ = registry_with(tmp_path, state)
    session = registry.get("a")
    assert registry.change(session, event) is True
    ended = state in LIVE_STATES and transition(state, event) not in LIVE_STATES
    assert bool(session.record.stopped_at) is ended


def test_a_field_that_is_not_the_records_is_refused(tmp_path: Path) -> None:
    """mypy refuses it first (RecordChange); a call it cannot see is refused at run time."""
    registry, _ = registry_with(tmp_path, State.RUNNING)
    with pytest.raises(AttributeError, match="no field 'stop_requested'"):
        registry.change(registry.get("a"), stop_requested=True)  # type: ignore[call-arg]


def test_the_fields_a_change_may_set_are_the_records() -> None:
    assert get_type_hints(RecordChange) == get_type_hints(SessionRecord)


def test_a_stop_whose_end_cannot_be_written_still_ends_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the scope stops: the session is stopped in memory, on the bus and
    (once it can be written) on disk, and the end's tail ran: the socket is gone."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(host.tmp), CreateRequest())
        session = host.registry.get("a")
        session.paths.socket.parent.mkdir(parents=True, exist_ok=True)
        session.paths.socket.touch()
        save = host.store.save
        full = False

        def maybe_save(record: SessionRecord) -> None:
            if full:
                raise OSError(errno.ENOSPC, "No space left on device")
            save(record)

        async def stop_then_fill(unit: str, timeout: float) -> None:
            nonlocal full
            await host.scopes.stop_as_systemd_does(unit, timeout)
            full = True

        monkeypatch.setattr(host.store, "save", maybe_save)
        host.scopes.stop_with = stop_then_fill
        await host.lifecycle.stop(session)
        assert session.record.state is State.STOPPED
        assert host.events[-1] == ("changed", "a", "stopped")
        assert host.on_disk("a") == "stopping"
        assert not session.paths.socket.exists()
        full = False
        host.registry.write_unsaved()
        assert host.on_disk("a") == "stopped"

    run(body())


class CountingDisk(FullDisk):
    saves = 0

    def save(self, record: SessionRecord) -> None:
        super().save(record)
        self.saves += 1


def test_a_change_made_soon_is_shown_at_once_and_written_once_within_a_second(
    tmp_path: Path,
) -> None:
    """A flood's ids: each shown when learned, the newest of the second written, once."""

    async def body() -> None:
        store = CountingDisk(tmp_path / "state")
        store.prepare()
        registry = Registry(store, tmp_path / "run", system=False)
        registry.add(SessionRecord(name="a", state=State.RUNNING, unit="hostagent-a.scope"))
        session = registry.get("a")
        store.save(session.record)
        store.saves = 0
        for i in range(50):
            registry.change_soon(session, agent_session=f"id-{i}")
        assert session.record.agent_session == "id-49"
        assert (store.saves, store.load_all()[0].agent_session) == (0, "")
        timer = registry._retry
        assert timer is not None
        assert timer.when() - asyncio.get_running_loop().time() <= SOON_SEC
        registry.write_unsaved()  # the timer's work
        assert (store.saves, store.load_all()[0].agent_session) == (1, "id-49")
        assert registry._retry is None
        registry.write_unsaved()  # nothing newer: nothing written
        assert store.saves == 1

    run(body())


def test_a_change_made_soon_is_written_by_the_next_change_or_at_the_stop(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        registry, store = registry_with(tmp_path, State.RUNNING)
        session = registry.get("a")
        registry.change_soon(session, agent_session="id-1")
        registry.change(session, Event.STOP)
        assert store.load_all()[0].agent_session == "id-1"
        assert registry._unsaved == set()
        registry.change_soon(session, agent_session="id-2")
        store.full = True
        registry.write_unsaved()  # the stop's, on a full disk: tried again later
        assert registry._unsaved == {"a"}
        assert registry._retry is not None
        store.full = False
        registry.write_unsaved()
        assert store.load_all()[0].agent_session == "id-2"

    run(body())


def test_a_hook_flood_shows_each_id_and_writes_the_newest_soon(tmp_path: Path) -> None:
    """A hook taken in a flood (hookflow.py) costs no write of its own: the bus shows its id
    at once, the disk the newest one once the registry writes what it holds."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(host.tmp), CreateRequest())
        session = host.registry.get("a")
        await host.core.hooks.report_hook(session, "SessionStart", {"session_id": "id-1"})
        assert disk_id(host) == "id-1"  # a hook outside a flood is written at once
        for i in range(2, 40):
            data: dict[str, object] = {"session_id": f"id-{i}"}
            await host.core.hooks.report_hook(session, "SessionStart", data, flood=True)
        assert session.record.agent_session == "id-39"
        assert disk_id(host) == "id-1"
        host.registry.write_unsaved()
        assert disk_id(host) == "id-39"
        assert session.record.agent_session_history[-1] == "id-38"

    def disk_id(host: Host) -> str:
        host.store.flush()
        return SidecarStore(host.store.directory).load_all()[0].agent_session

    run(body())
