"""One end, one write: however a run ends (its agent exits, its unit ends, a stop is asked, a
stop finished while the daemon was away), its record is written once for the end and its
session sends one PropertiesChanged for it; what follows, off the lock (the conversation the
run ended in, its usage), is one more at most. Counted by the record's own ``revision`` and
by the signals the bus objects send, for each kind of preset."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from hostagent.daemon.bus.session import session_path
from hostagent.daemon.state.live import Session
from hostagent.options import CreateRequest
from hostagent.presets import IdSource, Preset
from hostagent.presets.discovery import Discovery
from hostagent.session import Event, State
from tests.unit.fakes import ASSIGNED, FakeExporter, Host, me, run
from tests.unit.test_signal_queue import frontend_of

DATA = Path(__file__).parents[1] / "data" / "usage"
ID = "0199a0c4-7e1b-7c52-9f3e-2d8a5b6c7d8e"


def presets(tmp: Path) -> dict[str, Preset]:
    """One preset of each kind, its files under tmp."""
    rollouts = tmp / "rollouts"
    return {
        "assigned": ASSIGNED,
        "hooks": replace(
            ASSIGNED, name="hooks", hooks_format="claude", hooks_args=["--settings", "{hooks_file}"]
        ),
        "usage": replace(
            ASSIGNED, name="usage", usage_format="claude", usage_file=f"{tmp}/{{id}}.jsonl"
        ),
        # Codex's way: the id found in the file the CLI writes, which holds the usage too.
        "discovered": Preset(
            name="discovered",
            command=["agent"],
            id_source=IdSource.DISCOVERED,
            discover=Discovery(
                glob=f"{rollouts}/rollout-*.jsonl", id_pattern=r"rollout-x-([0-9a-f-]+)\.jsonl$"
            ),
            resume_args=["resume", "{id}"],
            usage_format="codex",
            usage_file=f"{rollouts}/rollout-x-{{id}}.jsonl",
        ),
    }


def write_transcript(tmp: Path, kind: str, session: Session) -> None:
    """What the agent's two turns left on disk, found only at the end (no turn was seen)."""
    if kind == "usage":
        shutil.copy(
            DATA / "claude" / "2.1.332-two-turns-then-stopped.jsonl",
            tmp / f"{session.record.agent_session}.jsonl",
        )
    elif kind == "discovered":
        (tmp / "rollouts").mkdir(exist_ok=True)
        shutil.copy(
            DATA / "codex" / "0.171.0-two-turns-then-stopped.jsonl",
            tmp / "rollouts" / f"rollout-x-{ID}.jsonl",
        )


def revision(host: Host, name: str) -> int:
    return int(json.loads(host.store.path_of(name).read_text())["revision"])


def changed_signals(exporter: FakeExporter, name: str) -> int:
    return sum(
        1
        for path, _, member in exporter.emitted
        if path == session_path(name) and member == "PropertiesChanged"
    )


async def agent_exit(host: Host, session: Session) -> None:
    host.scopes.tmux.ended["a"] = (3, None)
    await host.core.endings.agent_exited(session)


async def unit_ended(host: Host, session: Session) -> None:
    host.systemd.end(session.record.unit, "failed")


async def stop_asked(host: Host, session: Session) -> None:
    await host.lifecycle.stop(session)


WAYS: dict[str, tuple[Callable[[Host, Session], Awaitable[None]], int]] = {
    # how the run ends, and how many writes the ask itself makes before the end
    "agent-exit": (agent_exit, 0),
    "unit-ended": (unit_ended, 0),
    "stop-asked": (stop_asked, 1),  # "stopping", committed before systemd is asked
}
# The one change that may follow the end: the usage read (and an id found with it).
FOLLOWS = {"assigned": 0, "hooks": 0, "usage": 1, "discovered": 1}


async def settled(host: Host) -> None:
    await host.settle()
    await asyncio.sleep(0)  # the frontend's queued signals go out on the loop's next turn


async def started(tmp: Path, kind: str) -> tuple[Host, Session, FakeExporter]:
    host = await Host.started(tmp / "host")
    host.core.settings.presets.update(presets(tmp))
    _, exporter = frontend_of(host)
    await host.create(me(), "a", kind, str(tmp), CreateRequest())
    await settled(host)
    return host, host.registry.get("a"), exporter


@pytest.mark.parametrize("kind", list(FOLLOWS))
@pytest.mark.parametrize("way", list(WAYS))
def test_an_end_is_one_write_and_one_signal(tmp_path: Path, way: str, kind: str) -> None:
    async def body() -> None:
        host, session, exporter = await started(tmp_path, kind)
        write_transcript(tmp_path, kind, session)
        end, asked = WAYS[way]
        before = revision(host, "a")
        exporter.emitted.clear()
        await end(host, session)
        await settled(host)
        assert session.record.state not in (State.RUNNING, State.STOPPING)
        writes, signals = revision(host, "a") - before, changed_signals(exporter, "a")
        assert writes == asked + 1 + FOLLOWS[kind]
        # Changes made in one turn of the loop go out as one signal: the scripted systemd
        # stops at once, so a stop's "stopping" may share the end's.
        assert 1 + FOLLOWS[kind] <= signals <= writes
        if FOLLOWS[kind]:  # the follow-up did its work
            assert session.record.usage and session.record.usage_read_at
        if kind == "discovered":
            assert session.record.agent_session == ID

    run(body())


@pytest.mark.parametrize("kind", list(FOLLOWS))
def test_a_stop_that_finished_while_the_daemon_was_away_is_one_write(
    tmp_path: Path, kind: str
) -> None:
    async def body() -> None:
        host, session, _ = await started(tmp_path, kind)
        write_transcript(tmp_path, kind, session)
        host.registry.change(session, Event.STOP)  # the stop's ask, then the daemon died
        host.systemd.events = None  # the daemon is gone
        host.systemd.end(session.record.unit)
        before = revision(host, "a")
        again = host.restart()
        again.core.settings.presets.update(presets(tmp_path))
        await again.core.recover()
        await again.settle()
        after = again.registry.get("a").record
        assert after.state is State.STOPPED
        assert revision(again, "a") - before == 1 + FOLLOWS[kind]
        if FOLLOWS[kind]:
            assert after.usage and after.usage_read_at

    run(body())


def test_an_agent_that_leaves_a_process_behind_ends_in_one_write_that_says_so(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        host, session, _ = await started(tmp_path, "assigned")
        left = await asyncio.create_subprocess_exec("sleep", "30")
        try:
            host.systemd.units[session.record.unit].leader = left.pid  # still in the scope
            before = revision(host, "a")
            await agent_exit(host, session)
            await settled(host)
        finally:
            left.kill()
            await left.wait()
        assert revision(host, "a") - before == 1
        assert "1 process left behind by the agent: sleep" in session.record.containment

    run(body())
