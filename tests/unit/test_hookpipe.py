"""The hooks FIFO on fakes at the edges: the very command the settings file names, run with a
hook's JSON on stdin, reaches the daemon; a line without the session's token does not."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from hostagent.daemon.follow.hooks.hookpipe import LINES_PER_SECOND, READ_SIZE, HookPipe
from hostagent.daemon.state.live import Session
from hostagent.identity import Owner
from hostagent.options import CreateRequest
from hostagent.permissions import TOKEN_ENV
from hostagent.presets import IdSource, Preset
from tests.unit.fakes import Host, me, run

HOOKED = Preset(
    name="hooked",
    command=["agent"],
    id_source=IdSource.ASSIGNED,
    assign_args=["--session-id", "{id}"],
    hooks_format="claude",
    hooks_args=["--settings", "{hooks_file}"],
)


class Ids:
    """Wakes a waiter whenever a session's conversation id changes."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()

    def session_added(self, session: Session) -> None: ...
    def session_removed(self, session: Session) -> None: ...

    def session_changed(self, session: Session) -> None:
        self.changed.set()


async def hook(host: Host, name: str, event: str, payload: dict[str, str], token: str) -> None:
    """Run the hook command that the session's settings file names for event."""
    session = host.registry.get(name)
    settings = json.loads(session.paths.hooks_file.read_text())
    command = settings["hooks"][event][0]["hooks"][0]["command"]
    proc = await asyncio.create_subprocess_shell(
        command,
        stdin=asyncio.subprocess.PIPE,
        env={"PATH": os.environ["PATH"], TOKEN_ENV: token},
    )
    await proc.communicate(json.dumps(payload).encode())
    assert proc.returncode == 0


def test_a_hook_line_with_the_token_is_believed_and_one_without_is_not(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        host.core.settings.presets["hooked"] = HOOKED
        await host.create(me(), "a", "hooked", str(tmp_path), CreateRequest())
        record = host.registry.get("a").record
        assert record.hook_token and record.agent_session
        ids = Ids()
        host.registry.listeners.append(ids)
        # A forged report: the right name and FIFO, the wrong secret. Then the real one.
        await hook(host, "a", "SessionStart", {"session_id": "forged-1"}, "0" * 32)
        await hook(
            host, "a", "SessionStart", {"session_id": "new-1", "source": "clear"}, record.hook_token
        )
        await asyncio.wait_for(ids.changed.wait(), 5)
        assert record.agent_session == "new-1"
        assert "forged-1" not in record.agent_session_history
        last = host.registry.get("a").last_hook
        assert last is not None and last.event == "SessionStart"

    run(body())


def test_the_hook_never_blocks_without_a_reader(tmp_path: Path) -> None:
    """With the daemon gone the FIFO has no reader: the hook still returns at once."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        host.core.settings.presets["hooked"] = HOOKED
        await host.create(me(), "a", "hooked", str(tmp_path), CreateRequest())
        for pipe in host.core.hooks.pipes.values():
            pipe.close()
        token = host.registry.get("a").record.hook_token
        await asyncio.wait_for(hook(host, "a", "Stop", {"session_id": "x"}, token), 5)

    run(body())


def test_without_its_fifo_a_hook_takes_the_bus_and_the_fifo_is_made_again(
    tmp_path: Path,
) -> None:
    """The owner's hooks FIFO removed under a running session: the hook hands its event to
    `hostagentctl hook` (a stand-in here records what it was given), and the next start of
    one of the owner's sessions (as a report over the bus does) makes the FIFO again."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        host.core.settings.presets["hooked"] = HOOKED
        await host.create(me(), "a", "hooked", str(tmp_path), CreateRequest())
        session = host.registry.get("a")
        fifo = session.paths.runtime_dir / "hooks.fifo"
        fifo.unlink()
        (pipe,) = host.core.hooks.pipes.values()
        assert not pipe.intact()
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        said = tmp_path / "said"
        ctl = bin_dir / "hostagentctl"
        ctl.write_text(f'#!/bin/sh\necho "$@" > {said}\ncat >> {said}\n')
        ctl.chmod(0o755)
        settings = json.loads(session.paths.hooks_file.read_text())
        command = settings["hooks"]["Stop"][0]["hooks"][0]["command"]
        proc = await asyncio.create_subprocess_shell(
            command,
            stdin=asyncio.subprocess.PIPE,
            env={"PATH": f"{bin_dir}:{os.environ['PATH']}", TOKEN_ENV: "t"},
        )
        await proc.communicate(b'{"session_id": "abc", "source": "x"}')
        assert proc.returncode == 0
        words, payload = said.read_text().split("\n", 1)
        assert words.split()[-2:] == ["hook", "Stop"]
        assert json.loads(payload) == {"session_id": "abc", "source": "x", "notification_type": ""}
        host.core.hooks.open_pipe(session)
        assert fifo.is_fifo() and host.core.hooks.pipes[session.record.owner].intact()

    run(body())


def test_a_flood_of_lines_pauses_the_reading_and_its_writers_wait(tmp_path: Path) -> None:
    """Past an owner's allowance the FIFO is not read for a while: the pipe fills and whoever
    floods it waits, while the daemon's loop is free; then reading goes on."""

    async def body() -> None:
        seen: list[list[str]] = []
        heard = asyncio.Event()

        def on_line(uid: int, fields: list[str]) -> None:
            seen.append(fields)
            heard.set()

        pipe = HookPipe(Owner.from_uid(me()), tmp_path, on_line)
        pipe.open()
        writer = os.open(pipe.path, os.O_WRONLY | os.O_NONBLOCK)
        line = b"a\ttoken\tStop\tid\t\t\n"
        flood = int(LINES_PER_SECOND * 2)
        os.write(writer, line * flood)

        async def until_paused() -> None:
            while not pipe.paused:
                heard.clear()
                await heard.wait()

        await asyncio.wait_for(until_paused(), 5)
        # Read a page at a time, past the allowance by less than a page's lines.
        assert LINES_PER_SECOND <= len(seen) < LINES_PER_SECOND + READ_SIZE / len(line)
        with pytest.raises(BlockingIOError):  # nobody reads: the pipe fills
            while True:
                os.write(writer, line * 100)
        taken = len(seen)
        heard.clear()
        await asyncio.wait_for(heard.wait(), 10)  # the allowance is back
        assert len(seen) > taken
        pipe.close()
        os.close(writer)
        assert not pipe.paused

    run(body())
