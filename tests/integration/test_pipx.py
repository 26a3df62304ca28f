"""hostagent without the distro package: the README's pipx block, run as written by an ordinary
user with their own user manager and session bus, in a fresh machine without hostagent; then
hostagentctl doctor on what --uninstall-user leaves. The machine has no network, so pip takes
the packages a registry would give from a directory of wheels made here first (pip's own
PIP_FIND_LINKS and PIP_NO_INDEX: the commands stay as written)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.debs import copy_checkout, doc_block
from tests.sandbox import Sandbox
from tests.sandbox_host import Result

pytestmark = [
    pytest.mark.core,
    pytest.mark.skipif(not shutil.which("pipx"), reason="needs pipx (./dev/setup)"),
]

WHEELS = "/var/tmp/wheels"
USER = "alice"
CHECKOUT = f"/home/{USER}/hostagent"


def download(into: Path, python: str) -> None:
    """What pipx install . asks of a registry, for the machine's python (e.g. "3.13")."""
    pip = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(into)]
    binary = ["--only-binary=:all:", "--python-version", python]
    for argv in (
        [*pip, *binary, "dbus-fast>=1.84", "pyyaml>=6.0", "setuptools>=61", "pip"],
        [*pip, "--no-deps", "sdnotify>=0.3.1"],  # a source distribution only
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def machine() -> Iterator[Sandbox]:
    with Sandbox(install=False) as sb:
        python = sb.run("python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
        download(sb.root / WHEELS.lstrip("/"), python.check().stdout.strip())
        copy_checkout(sb.root / CHECKOUT.lstrip("/"))
        # As after 'pipx ensurepath' and a new login: Debian's ~/.profile puts ~/.local/bin
        # on PATH when it exists.
        sb.run("mkdir", "-p", f"/home/{USER}/.local/bin").check()
        sb.run("chown", "-R", f"{USER}:{USER}", f"/home/{USER}").check()
        yield sb


def as_user(sb: Sandbox, script: str) -> Result:
    return sb.run(
        "bash",
        "-lc",
        script,
        user=USER,
        cwd=CHECKOUT,
        timeout=600,
        env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": WHEELS},
    )


def test_the_readmes_pipx_block_ends_in_a_session_created_and_listed(machine: Sandbox) -> None:
    sb = machine
    result = as_user(sb, doc_block("README.md", "pipx"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "first" in result.stdout and "on your own daemon" in result.stdout, result.stdout
    assert sb.run("systemctl", "--user", "-M", f"{USER}@", "is-active", "hostagent").returncode == 0
    doctor = as_user(sb, "hostagentctl doctor")
    assert "daemon: hostagent" in doctor.stdout and "user mode" in doctor.stdout, doctor.stdout


def test_doctor_says_what_is_missing_and_how_to_get_it(machine: Sandbox) -> None:
    sb = machine
    removed = as_user(sb, "hostagent --uninstall-user")
    assert removed.returncode == 0, removed.stderr
    assert "Removed /home/alice/.local/share/systemd/user/hostagent.service." in removed.stdout
    doctor = as_user(sb, "hostagentctl doctor")
    assert doctor.returncode == 1, doctor.stdout
    lines = doctor.stdout.splitlines()
    assert lines[0] == "daemon: none answers on the session bus", doctor.stdout
    assert any(
        "no hostagent.service unit" in line and "hostagent --install-user" in line for line in lines
    ), doctor.stdout
    assert any("activation file" in line for line in lines), doctor.stdout
    # The hint of every other verb points at doctor.
    listed = as_user(sb, "hostagentctl list")
    assert listed.returncode == 1 and "hostagentctl doctor" in listed.stderr, listed.stderr
    # Its session kept running; the daemon put back, it is there again.
    assert as_user(sb, "hostagent --install-user").returncode == 0
    assert as_user(sb, "hostagentctl list --no-legend").stdout.split()[0] == "first"
