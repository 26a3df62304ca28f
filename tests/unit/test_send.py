"""A line sent into a session: its text, then its Enter as a key of its own once the CLI has
drawn the text and at least the preset's enter_gap after the paste. How the screen is looked at in
between decides what a send costs, and a look that fails must not leave a line half-sent."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hostagent.daemon.host import tmux
from hostagent.identity import Owner
from hostagent.options import CreateRequest
from tests.unit.fakes import SHELL, Host, me, run


@pytest.mark.parametrize("fail_reads", [False, True])
def test_a_send_looks_once_after_the_gap_and_always_ends_with_its_enter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fail_reads: bool
) -> None:
    """The CLI draws the text at once: one look at the screen, not before the gap (the Enter
    may not come sooner anyway). A look that fails (tmux busy) still ends in the Enter."""
    monkeypatch.setattr(SHELL, "enter_gap", 0.05)

    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        fake = host.scopes.tmux
        typed, read = fake.send_text, fake.screen_and_title
        pasted: list[float] = []
        reads: list[float] = []

        async def send_text(owner: Owner, sock: Path, text: str, enter: bool) -> None:
            await typed(owner, sock, text, enter)
            if text:  # drawn as it is typed
                pasted.append(time.monotonic())
                fake.screens["a"] = (f"$ {text}", "")

        async def screen_and_title(owner: Owner, sock: Path) -> tuple[str, str, str]:
            reads.append(time.monotonic())
            if fail_reads:
                raise tmux.TmuxError("tmux display-message timed out")
            return await read(owner, sock)

        monkeypatch.setattr(fake, "send_text", send_text)
        monkeypatch.setattr(fake, "screen_and_title", screen_and_title)
        await host.core.terminal.send_text(host.registry.get("a"), "make the build", True)
        assert fake.typed[-2:] == [("a", "make the build", False), ("a", "", True)]
        assert len(reads) == 1 and reads[0] - pasted[0] >= 0.05

    run(body())
