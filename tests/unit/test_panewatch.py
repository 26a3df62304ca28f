"""Following a pane (issue: day one for an admin, found by the 1000-session benchmark): a pane
that could not be read while the daemon's helpers were all busy is read once they are free,
instead of staying unknown until its agent prints something again."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from hostagent.activity import GENERIC
from hostagent.daemon import panewatch, tmux
from hostagent.daemon.owner import Owner
from hostagent.session import Activity
from tests.unit.fakes import run


class BusyTmux:
    """A tmux whose reads time out the first `busy` times, as behind full helper slots."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.reads = 0
        self.read = asyncio.Event()

    async def screen_and_title(self, owner: Owner, sock: Path) -> tuple[str, str, str]:
        self.reads += 1
        if self.reads <= self.busy:
            raise tmux.TmuxError("tmux display-message timed out")
        self.read.set()
        return "$ ", "", "bash"


@pytest.mark.parametrize("busy", [1, panewatch.RETRIES, panewatch.RETRIES + 6])
def test_a_pane_never_read_is_looked_at_until_it_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, busy: int
) -> None:
    monkeypatch.setattr(panewatch, "RETRY_DELAY", 0.001)
    monkeypatch.setattr(panewatch, "RETRY_MAX", 0.004)

    async def body() -> None:
        fake = BusyTmux(busy)
        seen: list[Activity] = []
        watch = panewatch.PaneWatch("a", Owner.from_uid(os.geteuid()), tmp_path / "a.sock",
                                    tmp_path / "a.out", GENERIC,
                                    lambda verdict: seen.append(verdict.activity),
                                    fake)  # type: ignore[arg-type]  # fmt: skip
        watch.open()
        try:
            watch._request()
            await asyncio.wait_for(fake.read.wait(), 5)
            await asyncio.sleep(0)  # the verdict is published in the same task
            assert fake.reads == busy + 1
            assert seen and seen[-1] is not Activity.UNKNOWN
        finally:
            watch.close()

    run(body())
