"""Bad input is cheap (issue 70, attack 10, "one call stalls everyone"): bob's floods of
huge path words and of huge options dicts, as bob against the real bus and daemon.

Each flood is timed from a bystander's side (the hostile suite's probe: ListSessions and
GetSession every 20 ms, a CreateSession every second), beside the same flood aimed at
systemd's Manager instead (as a GetUnit it refuses), where systemd's own GetUnit is timed.
The bound is the hostile bench's: the bystander's ListSessions p99 under the flood within
twice its quiet p99, or one and a half times what the flood aimed at systemd does to
systemd's GetUnit, whichever is more. Before the caps, four of bob's clients sending three
400 KB path words each held the daemon's loop for some twenty seconds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench.hostile import allowed
from bench.report import percentile
from tests.integration.helpers import create
from tests.integration.hostile_watch import ALICES, STALL, Probe, bob
from tests.sandbox import Sandbox

WINDOW = 8.0  # seconds of each window: some 300 rounds, so a p99 is not one slow call
LIST = "ListSessions"


@pytest.fixture(scope="module")
def quiet(sandbox: Sandbox) -> Iterator[dict[str, list[float]]]:
    """alice's session, and the probe's calls with nobody attacking, for the module."""
    create(sandbox, "demo-agent", user="alice", name=ALICES)
    try:
        yield _window(sandbox, lambda: time.sleep(WINDOW))
    finally:
        sandbox.ctl("rm", ALICES)


def _window(sb: Sandbox, attack: Callable[[], object]) -> dict[str, list[float]]:
    with Probe(sb, reference=True, every=0.02) as probe:
        attack()
    assert probe.errors == [], probe.errors
    return probe.samples


def _repeated(sb: Sandbox, *args: str) -> Callable[[], list[dict[str, Any]]]:
    """bob's flood, again and again until the window ends; what each run printed."""

    def attack() -> list[dict[str, Any]]:
        seen = []
        deadline = time.monotonic() + WINDOW
        while time.monotonic() < deadline:
            seen.append(bob(sb, *args, timeout=300))
        return seen

    return attack


def _bound(quiet: dict[str, list[float]], ours: dict[str, list[float]],
           theirs: dict[str, list[float]], what: str) -> Callable[[], None]:  # fmt: skip
    """Print the figures of a flood at once; the returned check asserts the bound on them:
    the bystander's ListSessions p99 under the flood (ours) against the quiet run's, beside
    systemd's GetUnit under the same flood aimed at it (theirs)."""

    def p99(samples: dict[str, list[float]], method: str) -> float:
        return percentile(samples[method], 99)

    def ratio(samples: dict[str, list[float]], method: str) -> float:
        return p99(samples, method) / p99(quiet, method)

    mine, systemds = ratio(ours, LIST), ratio(theirs, Probe.SYSTEMD)
    figures = (
        f"{what}: ListSessions p99 {p99(ours, LIST) * 1000:.1f} ms (quiet"
        f" {p99(quiet, LIST) * 1000:.1f} ms), {mine:.1f}x, slowest {max(ours[LIST]) * 1000:.0f}"
        f" ms; aimed at systemd: its GetUnit p99 {p99(theirs, Probe.SYSTEMD) * 1000:.1f} ms"
        f" (quiet {p99(quiet, Probe.SYSTEMD) * 1000:.1f} ms), {systemds:.1f}x, and our"
        f" ListSessions {ratio(theirs, LIST):.1f}x; allowed {allowed(systemds):.1f}x"
    )
    print(figures)

    def check() -> None:
        assert max(ours[LIST]) < STALL, figures
        assert mine <= allowed(systemds), figures

    return check


@pytest.mark.parametrize(
    ("kilobytes", "where"),
    [
        ("400", "properties"),  # the attack: over what any valid call takes, refused unread
        ("400", "cwd"),
        ("200", "properties"),  # under that: unmarshalled, and refused on its size unparsed
        ("200", "cwd"),
    ],
)
def test_path_words_from_four_clients_stall_no_one(
    sandbox: Sandbox, quiet: dict[str, list[float]], kilobytes: str, where: str
) -> None:
    """bob's four clients each send three creates whose one path (a ReadWritePaths= word, or
    the cwd) is hundreds of KB of quoted text: each is refused on its size, its error names
    the size and quotes none of it, and the bystander is not held up."""
    flood = ("path-words", kilobytes, "4", "3", where)
    pid = sandbox.daemon_pid()
    seen: list[dict[str, Any]] = []
    ours = _window(sandbox, lambda: seen.extend(_repeated(sandbox, *flood)()))
    theirs = _window(sandbox, _repeated(sandbox, *flood, "systemd"))
    check = _bound(quiet, ours, theirs, f"{kilobytes} KB path words ({where}), 4 clients x 3")
    assert sandbox.daemon_pid() == pid
    size = int(kilobytes) * 1000 + 1 + (len("ReadWritePaths=''") if where == "properties" else 0)
    named = rf"this one takes {size}\.|these took {size >> 10} KiB\.\)"
    for result in seen:
        assert len(result["errors"]) == 1, result
        assert result["errors"][0].endswith(("InvalidArgs", "InvalidCwd")), result
        assert result["longest_text"] < 300 and re.search(named, result["text"]), result
    check()


def test_a_million_options_twelve_times_stall_no_one(
    sandbox: Sandbox, quiet: dict[str, list[float]]
) -> None:
    """bob sends twelve creates in a row, each with an options dict of a million entries
    (24 MB): each is refused by name from its header, and the bystander is not held up
    beyond what the same twelve do to systemd when sent to it."""
    pid = sandbox.daemon_pid()
    seen: dict[str, Any] = {}
    ours = _window(sandbox, lambda: seen.update(bob(sandbox, "million-options", "12", timeout=600)))
    theirs = _window(sandbox, lambda: bob(sandbox, "million-options", "12", "systemd", timeout=600))
    check = _bound(quiet, ours, theirs, "a million options, 12 in a row")
    assert sandbox.daemon_pid() == pid
    assert seen["errors"] == ["org.freedesktop.DBus.Error.InvalidArgs"], seen
    check()
