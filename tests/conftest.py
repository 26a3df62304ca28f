"""Shared test settings: every test runs under a timeout, so a hang fails instead of stalling."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

UNIT_TIMEOUT = 30
INTEGRATION_TIMEOUT = 240


class TestTimeout(Exception):
    pass


@pytest.fixture(autouse=True)
def _timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    seconds = (
        INTEGRATION_TIMEOUT if request.node.get_closest_marker("integration") else UNIT_TIMEOUT
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
