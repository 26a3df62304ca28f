"""Shared test settings: every test runs under a timeout, so a hang fails instead of stalling."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from hypothesis import settings

# Hypothesis's deadline per example (200 ms) is a timing assert: a store round trip took 289 ms
# once on a loaded machine (dev/mutants) and failed the suite. A hang is still caught, by the
# timeout below.
settings.register_profile("hostagent", deadline=None)
settings.load_profile("hostagent")

# A bound for hangs, not a speed test: dev/test runs the fast layer beside a lane of containers
# with real agent CLIs starting on the same two cores, where hostagentctl's 300 random command
# lines (9 s alone) took over 30 s.
UNIT_TIMEOUT = 90
INTEGRATION_TIMEOUT = 240


class TestTimeout(Exception):
    pass


@pytest.fixture(autouse=True)
def _timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    own = request.node.get_closest_marker("bound")
    seconds = (
        int(own.args[0])
        if own
        else INTEGRATION_TIMEOUT
        if request.node.get_closest_marker("integration")
        else UNIT_TIMEOUT
    )

    def expired(signum: int, frame: object) -> None:
        raise TestTimeout(f"test exceeded {seconds}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
