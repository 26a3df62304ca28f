"""The lifecycle on fakes at the edges (tests/unit/fakes.py): create, stop, resume, kill and
remove, their lock rules and limits, in milliseconds and without root. The same behaviours are
shown on a real systemd by tests/integration/."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hostagent.config import Config
from hostagent.daemon.state import registry as registry_module
from hostagent.errors import (
    AlreadyRunning,
    InvalidArgs,
    InvalidName,
    LimitsExceeded,
    NoSuchPreset,
    NoSuchSession,
    NotRunning,
    SessionExists,
    SpawnFailed,
    StorageFull,
)
from hostagent.options import CreateRequest
from hostagent.session import Limits, State
from tests.unit.fakes import Host, me, run


async def parked_resume(host: Host, name: str) -> asyncio.Task[None]:
    """A stopped session being resumed, held at its scope's start until the gate opens."""
    await create(host, name)
    await host.lifecycle.stop(host.registry.get(name))
    host.scopes.gate = asyncio.Event()
    resume = asyncio.create_task(host.lifecycle.resume(host.registry.get(name)))
    await host.scopes.parked.wait()
    return resume


async def create(host: Host, name: str, preset: str = "shell", **req: Any) -> None:
    await host.create(me(), name, preset, str(host.tmp), CreateRequest(**req))


def test_create_writes_ahead_starts_the_scope_and_announces(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a", args=["--flag"])
        session = host.registry.get("a")
        assert session.record.state is State.RUNNING
        assert host.scopes.launched == [["/bin/sh", "--flag"]]
        unit = host.systemd.units["hostagent-a.scope"]
        assert (session.record.leader_pid, session.record.invocation_id) == (
            unit.leader,
            unit.invocation,
        )
        # added (starting) before the scope runs, then the running state is committed
        assert host.events[:2] == [("added", "a", "starting"), ("changed", "a", "running")]
        assert host.on_disk("a") == "running"

    run(body())


def test_create_of_a_taken_name_says_its_state_and_starts_nothing(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        await host.lifecycle.stop(host.registry.get("a"))
        with pytest.raises(SessionExists, match="already exists and is stopped"):
            await create(host, "a")
        assert len(host.scopes.launched) == 1

    run(body())


def test_create_refuses_unknown_presets_and_bad_names_before_any_record(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        with pytest.raises(NoSuchPreset):
            await create(host, "a", preset="nope")
        with pytest.raises(NoSuchPreset) as huge:  # a caller's 200 KB name is quoted cut
            await create(host, "a", preset="p" * 200_000)
        assert len(str(huge.value)) < 200
        with pytest.raises(InvalidName, match="must match"):
            await create(host, "A b")
        assert host.registry.sessions == {} and host.on_disk("a") is None

    run(body())


def test_a_failed_start_leaves_a_failed_session_that_keeps_its_id(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        host.scopes.fail_with = "no room"
        with pytest.raises(SpawnFailed, match="no room"):
            await create(host, "a", preset="assigned")
        record = host.registry.get("a").record
        assert (record.state, record.last_error) == (State.FAILED, "no room")
        assert record.agent_session and host.on_disk("a") == "failed"
        first = record.agent_session
        await host.lifecycle.resume(host.registry.get("a"))
        assert host.registry.get("a").record.agent_session == first
        assert host.scopes.launched[-1] == ["agent", "--resume", first]

    run(body())


def test_a_record_that_cannot_be_written_creates_nothing(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        (tmp_path / "file").write_text("")
        host.store.sessions_dir = tmp_path / "file" / "sessions"  # ENOTDIR, even for root
        with pytest.raises(StorageFull, match="record cannot be written"):
            await create(host, "a")
        assert "a" not in host.registry.sessions and host.scopes.launched == []

    run(body())


@pytest.mark.parametrize("error", [RuntimeError("a bug"), asyncio.CancelledError()])
def test_a_create_that_ends_before_its_record_leaves_nothing_behind(
    tmp_path: Path, error: BaseException
) -> None:
    """An error nobody foresaw, or the create cancelled (the daemon stopping), before the
    first record is written: the session never came to be, and neither its terminal's FIFO
    nor its hooks file stays."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        host.scopes.crash_with = error
        with pytest.raises(type(error)):
            await create(host, "a", preset="assigned")
        assert "a" not in host.registry.sessions and host.on_disk("a") is None
        paths = host.registry.paths(me(), "a")
        assert not paths.fifo.exists() and not paths.hooks_file.exists()
        await create(host, "a", preset="assigned")  # the name is free again

    run(body())


def test_stop_commits_stopping_before_the_scope_stops_then_stopped(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        host.events.clear()
        await host.lifecycle.stop(host.registry.get("a"))
        assert [e for e in host.events if e[0] == "changed"][:2] == [
            ("changed", "a", "stopping"),
            ("changed", "a", "stopped"),
        ]
        assert "hostagent-a.scope" not in host.systemd.units
        with pytest.raises(NotRunning):
            await host.lifecycle.stop(host.registry.get("a"))

    run(body())


def test_resume_relaunches_the_recorded_command_and_counts(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a", args=["x"])
        with pytest.raises(AlreadyRunning):
            await host.lifecycle.resume(host.registry.get("a"))
        await host.lifecycle.stop(host.registry.get("a"))
        await host.lifecycle.resume(host.registry.get("a"))
        record = host.registry.get("a").record
        assert (record.state, record.resume_count) == (State.RUNNING, 1)
        assert host.scopes.launched == [["/bin/sh", "x"], ["/bin/sh", "x"]]

    run(body())


def test_a_second_resume_while_one_is_under_way_gets_already_running(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        first = await parked_resume(host, "a")
        with pytest.raises(AlreadyRunning, match="already starting"):
            await host.lifecycle.resume(host.registry.get("a"))
        host.scopes.open_gate()
        await first
        assert host.registry.get("a").record.state is State.RUNNING
        assert len(host.scopes.launched) == 2

    run(body())


def test_remove_during_a_resume_waits_for_it_and_leaves_no_ghost(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        resume = await parked_resume(host, "a")
        remove = asyncio.ensure_future(host.lifecycle.remove(host.registry.get("a")))
        await asyncio.sleep(0)  # remove is now queued on the session lock
        assert not remove.done()
        host.scopes.open_gate()
        await resume
        await remove
        assert host.on_disk("a") is None and "hostagent-a.scope" not in host.systemd.units
        assert host.events[-1] == ("removed", "a", "stopped")
        with pytest.raises(NoSuchSession):
            host.registry.get("a")

    run(body())


def test_kill_needs_a_live_session(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        await host.lifecycle.kill(host.registry.get("a"), "all", 15)
        assert host.systemd.units["hostagent-a.scope"].signals == [("all", 15)]
        await host.lifecycle.stop(host.registry.get("a"))
        with pytest.raises(NotRunning):
            await host.lifecycle.kill(host.registry.get("a"), "all", 15)

    run(body())


def test_callers_limits_go_over_the_configured_ones(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path, Config(limits=Limits(tasks_max=64, memory_max=1 << 30)))
        await create(host, "a", limits=Limits(memory_max=1 << 20))
        assert host.systemd.units["hostagent-a.scope"].limits == Limits(
            memory_max=1 << 20, tasks_max=64
        )

    run(body())


def test_operations_past_the_cap_get_limits_exceeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "MAX_OPERATIONS", 1)

    async def body() -> None:
        host = await Host.started(tmp_path)
        resume = await parked_resume(host, "a")
        with pytest.raises(LimitsExceeded):
            await create(host, "b")
        host.scopes.open_gate()
        await resume
        await create(host, "b")

    run(body())


def test_waits_and_captures_are_bounded(tmp_path: Path) -> None:
    from hostagent.daemon.follow import terminal

    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        with pytest.raises(InvalidArgs, match="at most"):
            await host.core.terminal.wait_for_activity(
                ["a"] * 2 + [f"x{i}" for i in range(terminal.MAX_WAIT_NAMES)],
                frozenset({"idle"}),
                0,
            )
        host.scopes.tmux.screens["a"] = ("€" * 400, "")  # 1201 bytes, with its newline
        session = host.registry.get("a")
        assert await host.core.terminal.capture(session, 10, limit=1200) is None
        assert await host.core.terminal.capture(session, 10, limit=1201) == "€" * 400 + "\n"

    run(body())


def test_one_callers_captures_under_way_are_capped_and_others_go_on(tmp_path: Path) -> None:
    from hostagent.daemon.follow.terminal import MAX_CAPTURES_PER_CALLER

    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        session, terminal = host.registry.get("a"), host.core.terminal
        host.scopes.tmux.screens["a"] = ("$ \n", "")
        gate = host.scopes.tmux.capture_gate = asyncio.Event()
        bobs = [
            asyncio.ensure_future(terminal.capture(session, 0, 1001))
            for _ in range(MAX_CAPTURES_PER_CALLER)
        ]
        await asyncio.sleep(0)
        with pytest.raises(LimitsExceeded, match="captures of yours are already under way"):
            await terminal.capture(session, 0, 1001)
        alices = asyncio.ensure_future(terminal.capture(session, 0, 1000))
        await asyncio.sleep(0)
        assert not alices.done()  # under way beside bob's, not refused
        gate.set()
        assert await alices == "$ \n"
        await asyncio.gather(*bobs)
        assert await terminal.capture(session, 0, 1001) == "$ \n"  # his count went down

    run(body())


def test_a_create_looks_its_program_up_once_and_a_resume_checks_it_again(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        looked = host.owners.program_lookups
        assert looked == 1  # admission found it; the start trusts that
        session = host.registry.get("a")
        await host.lifecycle.stop(session)
        await host.lifecycle.resume(session)
        looked = host.owners.program_lookups
        assert looked == 2  # it may have gone since: said in words

    run(body())
