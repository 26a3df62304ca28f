"""Fixtures that boot the real-systemd sandbox (tests/sandbox.py) once per run."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.sandbox import Sandbox


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = None
    if os.geteuid() != 0:
        reason = "needs root to boot the systemd-nspawn sandbox"
    elif not shutil.which("systemd-nspawn"):
        reason = "needs systemd-nspawn (apt install systemd-container)"
    for item in items:
        if "integration" in item.nodeid.split("::")[0]:
            item.add_marker(pytest.mark.integration)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    """One container for many tests; hostagent runs in it as a system service."""
    with Sandbox() as sb:
        sb.daemon_start()
        yield sb


@pytest.fixture
def fresh_sandbox() -> Iterator[Sandbox]:
    """A container of one's own, for tests that reboot or break things."""
    with Sandbox() as sb:
        yield sb


@pytest.fixture
def sb(sandbox: Sandbox) -> Sandbox:
    """The shared sandbox with the system daemon running (restarted if a test stopped it)."""
    if sandbox.run("systemctl", "is-active", "-q", "hostagent").returncode != 0:
        sandbox.daemon_start()
    return sandbox
