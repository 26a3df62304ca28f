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
from tests.integration.helpers import create, settled
from tests.integration.hostile_watch import ALICES, STALL, Probe, bob
from tests.sandbox import Sandbox

WINDOW = 8.0  # seconds of each window: some 300 rounds, so a p99 is not one slow call
LIST = "ListSessions"


@pytest.fixture(scope="module")
def alices(sandbox: Sandbox) -> Iterator[str]:
    """alice's session, which the probe asks for, for the module."""
    create(sandbox, "demo-agent", user="alice", name=ALICES)
    yield ALICES
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


Samples = dict[str, list[float]]


def p99(samples: Samples, method: str) -> float:
    return percentile(samples[method], 99)


def _ratio_to(quiet: Samples) -> Callable[[Samples, str], float]:
    return lambda samples, method: p99(samples, method) / p99(quiet, method)


def _judged(
    sb: Sandbox, at_us: Callable[[], object], at_systemd: Callable[[], object], what: str
) -> None:
    """Time the bystander in three windows: quiet, the flood aimed at hostagent (at_us), the
    same aimed at systemd; assert the bound on its ListSessions p99 (the bench's), and no call
    over STALL. A bound missed is measured once more and must hold then: the machine is shared,
    and one busy minute of it moved a quiet p99 by half, or an attack's threefold."""
    for attempt in (1, 2):
        quiet = _window(sb, lambda: time.sleep(WINDOW))
        ours, theirs = _window(sb, at_us), _window(sb, at_systemd)
        ratio = _ratio_to(quiet)
        mine, systemds = ratio(ours, LIST), ratio(theirs, Probe.SYSTEMD)
        figures = (
            f"{what} ({attempt}): ListSessions p99 {p99(ours, LIST) * 1000:.1f} ms (quiet"
            f" {p99(quiet, LIST) * 1000:.1f} ms), {mine:.1f}x, slowest"
            f" {max(ours[LIST]) * 1000:.0f} ms; aimed at systemd: its GetUnit p99"
            f" {p99(theirs, Probe.SYSTEMD) * 1000:.1f} ms (quiet"
            f" {p99(quiet, Probe.SYSTEMD) * 1000:.1f} ms), {systemds:.1f}x, and our ListSessions"
            f" {ratio(theirs, LIST):.1f}x; allowed {allowed(systemds):.1f}x"
        )
        print(figures)
        assert max(ours[LIST]) < STALL, figures
        if mine <= allowed(systemds):
            return
    pytest.fail(figures)


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
    sandbox: Sandbox, alices: str, kilobytes: str, where: str
) -> None:
    """bob's four clients each send three creates whose one path (a ReadWritePaths= word, or
    the cwd) is hundreds of KB of quoted text: each is refused on its size, its error names
    the size and quotes none of it, and the bystander is not held up."""
    flood = ("path-words", kilobytes, "4", "3", where)
    pid = sandbox.daemon_pid()
    seen: list[dict[str, Any]] = []
    _judged(
        sandbox,
        lambda: seen.extend(_repeated(sandbox, *flood)()),
        _repeated(sandbox, *flood, "systemd"),
        f"{kilobytes} KB path words ({where}), 4 clients x 3",
    )
    assert sandbox.daemon_pid() == pid
    size = int(kilobytes) * 1000 + 1 + (len("ReadWritePaths=''") if where == "properties" else 0)
    named = rf"this one takes {size}\.|these took {size >> 10} KiB\.\)"
    for result in seen:
        assert len(result["errors"]) == 1, result
        assert result["errors"][0].endswith(("InvalidArgs", "InvalidCwd")), result
        assert result["longest_text"] < 300 and re.search(named, result["text"]), result


def test_a_million_options_twelve_times_stall_no_one(sandbox: Sandbox, alices: str) -> None:
    """bob sends twelve creates in a row, each with an options dict of a million entries
    (24 MB): each is refused by name from its header, and the bystander is not held up
    beyond what the same twelve do to systemd when sent to it."""
    pid = sandbox.daemon_pid()
    seen: list[dict[str, Any]] = []
    _judged(
        sandbox,
        lambda: seen.append(bob(sandbox, "million-options", "12", timeout=600)),
        lambda: bob(sandbox, "million-options", "12", "systemd", timeout=600),
        "a million options, 12 in a row",
    )
    assert sandbox.daemon_pid() == pid
    assert all(r["errors"] == ["org.freedesktop.DBus.Error.InvalidArgs"] for r in seen), seen


def test_words_at_the_caps_still_make_alices_confined_session(sandbox: Sandbox) -> None:
    """The same action within the caps, from alice's shell outside every session: a path of
    4095 bytes (optional, so it may be missing) makes her confined session; one of 4096 is
    refused, by its size, and the error is short."""
    at_cap = "/tmp/" + "/".join(["d" * 200] * 20)
    at_cap += "e" * (4095 - len(at_cap))
    name = create(
        sandbox,
        "shell",
        "-p",
        "ProtectSystem=strict",
        "-p",
        f"ReadWritePaths=-{at_cap}",
        user="alice",
    )
    try:
        assert settled(sandbox, name)[0] == "running"
    finally:
        sandbox.ctl("rm", "--force", name, user="alice", system=True)
    over = sandbox.ctl(
        "new", "--preset", "shell", "-p", f"ReadWritePaths=-{at_cap}e", user="alice", system=True
    )
    assert over.returncode != 0
    assert "takes at most 4095 bytes; this one takes 4096" in over.stderr, over.stderr
    assert len(over.stderr) < 500
