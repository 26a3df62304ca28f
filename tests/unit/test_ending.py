"""Why a session ended: the agent's exit status or signal, read
from tmux once its pane died, and systemd's Result for a scope that ended without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostagent.daemon.host.procfs import cgroup_path
from hostagent.daemon.host.scope import own_unit
from hostagent.daemon.host.tmux import FINAL_BYTES, final_screen
from hostagent.daemon.ops.ending import End
from hostagent.session import State, agent_end, unit_end
from tests.unit.fakes import Host, ShownWatch, run
from tests.unit.test_lifecycle import create


@pytest.mark.parametrize(
    ("status", "signal", "result", "why"),
    [
        (0, None, "success", ""),
        (None, None, "success", ""),
        (3, None, "exit-code", "the agent exited with status 3"),
        (None, 9, "signal", "the agent was killed by SIGKILL"),
        (None, 15, "success", ""),  # asked to end, and it did: as systemd counts it
        (None, 200, "signal", "the agent was killed by signal 200"),
    ],
)
def test_agent_end(status: int | None, signal: int | None, result: str, why: str) -> None:
    assert agent_end(status, signal) == (result, why)


DEAD_33 = "Pane is dead (status 4, Wed Dec  2 10:59:05 2026)"  # tmux 3.3
DEAD_35 = "Pane is dead (status 4, Wed Dec 2 10:59:05 2026)"  # tmux 3.5's default format
TUI = "╭─ Codex ─╮\n│ > fix the tests │\n╰─────────╯"


@pytest.mark.parametrize(
    ("capture", "last_seen", "shown"),
    [
        # what the agent printed, tmux's padding and line gone
        (
            "building\nerror: no such file\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
            + DEAD_33
            + "\n",
            "",
            "building\nerror: no such file\n",
        ),
        (
            "ok\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
            + DEAD_35
            + "\n",
            "",
            "ok\n",
        ),
        # a full-screen agent cleared the terminal leaving its alternate screen: its last frame
        (
            "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
            + DEAD_33
            + "\n",
            TUI,
            TUI + "\n",
        ),
        # ... unless it printed something after it (Codex's "to resume, run ...")
        (
            "To continue, run codex resume 019a\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
            + DEAD_33,
            TUI,
            "To continue, run codex resume 019a\n",
        ),
        # a screen read after the server dropped the line, or a user's own look-alike above it
        ("Pane is dead is what I typed\n$ ", "", "Pane is dead is what I typed\n$\n"),
        ("", "", "\n"),
        # the watch read the dead pane before the end was handled: not the agent's screen
        (
            "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
            + DEAD_33,
            "\n\n" + DEAD_33 + "\n",
            "\n",
        ),
    ],
)
def test_final_screen(capture: str, last_seen: str, shown: str) -> None:
    assert final_screen(capture, last_seen) == shown


def test_a_final_screen_keeps_its_end_within_the_bound() -> None:
    shown = final_screen("x" * (FINAL_BYTES * 2) + "\nthe end\n" + DEAD_33, "")
    assert shown.endswith("the end\n") and len(shown.encode()) <= FINAL_BYTES + 1


@pytest.mark.parametrize(
    ("unit_result", "killed", "result"),
    [
        ("", 0, "success"),
        ("success", 0, "success"),
        ("timeout", 0, "timeout"),
        ("oom-kill", 0, "oom-kill"),
        ("", 9, "signal"),
        ("", 15, "success"),
        ("timeout", 9, "timeout"),  # systemd's reason wins over ours
        ("resources", 0, "resources"),
    ],
)
def test_unit_end(unit_result: str, killed: int, result: str) -> None:
    assert unit_end(unit_result, killed, 60)[0] == result


@pytest.mark.parametrize(
    ("status", "signal", "state", "why"),
    [
        (0, None, State.STOPPED, ""),
        (2, None, State.FAILED, "the agent exited with status 2"),
        (None, 11, State.FAILED, "the agent was killed by SIGSEGV"),
    ],
)
def test_a_dead_pane_ends_the_session_with_its_reason_and_last_screen(
    tmp_path: Path, status: int | None, signal: int | None, state: State, why: str
) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        session = host.registry.get("a")
        host.scopes.tmux.screens["a"] = ("$ make\nError 2\n", "")
        host.scopes.tmux.ended["a"] = (status, signal)
        await host.core.endings.agent_exited(session)
        record = session.record
        assert (record.state, record.last_error) == (state, why)
        assert (record.exit_status, record.exit_signal) == (status or 0, signal or 0)
        assert "hostagent-a.scope" in host.systemd.stopped
        assert host.on_disk("a") == state.value
        # The last screen stays readable until a resume.
        assert "Error 2" in (await host.core.terminal.capture(session, 0) or "")
        await host.lifecycle.resume(session)
        assert (record.result, record.last_error) == ("", "")
        assert host.store.load_screen("a") is None

    run(body())


def test_a_pane_that_is_alive_ends_nothing(tmp_path: Path) -> None:
    """A pane-died line anyone of the owner's could forge: tmux is asked, and it says no."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        await host.core.endings.agent_exited(host.registry.get("a"))
        assert host.registry.get("a").record.state is State.RUNNING
        assert host.systemd.stopped == []

    run(body())


def test_an_end_that_comes_with_the_shutdown_is_left_for_recovery(tmp_path: Path) -> None:
    """The machine going down ends every agent (SIGHUP, or the unit stopped): neither is the
    session's own end, so the record keeps saying running and the next start makes it dormant."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        await create(host, "b")
        host.systemd.stopping = True
        host.scopes.tmux.ended["a"] = (None, 1)
        await host.core.endings.agent_exited(host.registry.get("a"))
        host.systemd.end("hostagent-b.scope")
        await host.settle()
        for name in ("a", "b"):
            assert host.registry.get(name).record.state is State.RUNNING, name
            assert host.on_disk(name) == "running"
        assert host.systemd.stopped == []

    run(body())


@pytest.mark.parametrize(
    ("cgroup", "unit"),
    [
        ("0::/system.slice/hostagent.service\n", "hostagent.service"),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/hostagent.service\n",
            "hostagent.service",
        ),
        ("12:pids:/\n1:name=systemd:/system.slice/hostagent.service\n0::/\n", "hostagent.service"),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", ""),  # started by hand
        ("", ""),
    ],
)
def test_scopes_are_ordered_before_the_daemons_own_service(cgroup: str, unit: str) -> None:
    assert own_unit(cgroup_path(cgroup)) == unit


def test_a_run_that_ended_with_its_terminal_keeps_the_last_screen_its_watch_read(
    tmp_path: Path,
) -> None:
    """A kill of the whole scope takes tmux with it: nothing is left to capture, so the last
    screen the pane watch read is what capture shows."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await create(host, "a")
        session = host.registry.get("a")
        shown = ShownWatch()  # a watch that read this last
        shown.last_screen = "$ make\nbuilding…\n\n"
        host.registry.watched(session, shown)
        async with session.lock:
            await host.core.endings.finish(session, End("signal", "killed by SIGTERM"))
        assert host.store.load_screen("a") == "$ make\nbuilding…\n"
        assert await host.core.terminal.capture(session, 0) == "$ make\nbuilding…\n"

    run(body())
