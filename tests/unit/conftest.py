"""Fixtures of the fast layer."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture
def bus_address(bus_daemon: tuple[str, int]) -> str:
    """A private ``dbus-daemon --session`` for one test; its address."""
    return bus_daemon[0]


@pytest.fixture
def bus_daemon() -> Iterator[tuple[str, int]]:
    """A private ``dbus-daemon --session`` for one test: its address and pid."""
    if not shutil.which("dbus-daemon"):
        pytest.skip("needs dbus-daemon (apt install dbus)")
    proc = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--print-address=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    try:
        yield proc.stdout.readline().strip(), proc.pid
    finally:
        os.kill(proc.pid, signal.SIGCONT)  # a test may have stopped it
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
