"""Fixtures that boot the real-systemd sandbox (tests/sandbox.py) once per run."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.debs import guide_machine
from tests.sandbox import Sandbox
from tests.sandbox_host import SandboxError

LIMIT_CONTROLLERS = {"pids", "memory"}  # what TasksMax= and MemoryMax= need


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


@pytest.fixture(scope="session")
def admin_machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Path]]:
    """A fresh machine where the admin guide's install block ran as written, and the directory
    with the .debs it built (tests/integration/debs.py)."""
    into = tmp_path_factory.mktemp("debs")
    with guide_machine(into) as sb:
        yield sb, into


@pytest.fixture(scope="session")
def debs(admin_machine: tuple[Sandbox, Path]) -> Path:
    return admin_machine[1]


@pytest.fixture(scope="session")
def limits_sandbox(sandbox: Sandbox) -> Iterator[Sandbox]:
    """A machine where TasksMax= and MemoryMax= are enforced: the shared one when its cgroups
    have the pids and memory controllers (a unified host that delegates them), else one in the
    hybrid layout, where this build machine lends its cgroup v1 controllers."""
    if sandbox.controllers() >= LIMIT_CONTROLLERS:
        yield sandbox
        return
    try:
        box = Sandbox(layout="hybrid", system=sandbox.system)
    except SandboxError as e:
        pytest.skip(f"no pids and memory controllers in unified cgroups on this host, and {e}")
    with box:
        box.daemon_start()
        yield box


@pytest.fixture
def sb(request: pytest.FixtureRequest) -> Sandbox:
    """The shared sandbox with the system daemon running (restarted if a test stopped it);
    for a test marked needs_limits, one where cgroup limits are enforced."""
    wanted = "limits_sandbox" if request.node.get_closest_marker("needs_limits") else "sandbox"
    box: Sandbox = request.getfixturevalue(wanted)
    if box.run("systemctl", "is-active", "-q", "hostagent").returncode != 0:
        box.daemon_start()
    return box


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the journal of the machine it ran on: a failure seen once
    in CI can then be understood from its log, not only from a rerun."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not (report.failed and call.when == "call"):
        return
    for name, value in getattr(item, "funcargs", {}).items():
        for box in value if isinstance(value, tuple) else (value,):
            if isinstance(box, Sandbox) and box.leader:
                try:
                    journal = box.run("journalctl", "-n", "150", "--no-pager", timeout=20).stdout
                except Exception as e:  # the machine may be what failed
                    journal = f"(no journal: {e})"
                report.sections.append((f"journal of {name}", journal))
