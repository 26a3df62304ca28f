"""Fixtures of the fast layer."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture
def bus_address() -> Iterator[str]:
    """A private ``dbus-daemon --session`` for one test; its address."""
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
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
