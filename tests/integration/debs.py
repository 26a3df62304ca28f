"""The Debian packages built from a copy of the tree, as a distribution would build them: on
this machine for Debian 12, inside a Debian 13 machine (its own debhelper and python3) for
Debian 13. The Cockpit page is assembled first (cockpit/build, which takes xterm.js from npm),
since the package build itself has no network."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.sandbox import REPO, Sandbox
from tests.sandbox_roots import DEFAULT_SYSTEM

CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}


def host(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # Debian's own python3 and tools, whatever venv or pyenv the test runs under.
    return subprocess.run(argv, cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True, timeout=600)


def copy_tree(to: Path) -> None:
    """The checkout's files as git sees them, the assembled Cockpit page, and debian/ in place,
    into to: what a release tarball holds."""
    built = host(str(REPO / "cockpit" / "build"))
    assert built.returncode == 0, built.stdout + built.stderr
    files = host("git", "ls-files", "-co", "--exclude-standard", cwd=REPO).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (to / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, to / f)
    shutil.copytree(REPO / "cockpit" / "dist", to / "cockpit" / "dist")
    shutil.copytree(REPO / "packaging" / "debian", to / "debian")


def build_debs(into: Path) -> None:
    """Build hostagent and hostagent-cockpit into the directory into."""
    if DEFAULT_SYSTEM == "debian12":
        copy_tree(into / "hostagent")
        result = host("dpkg-buildpackage", "-us", "-uc", "-b", cwd=into / "hostagent")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return
    with Sandbox(install=False) as sb:
        inside = sb.root / "var/tmp/build"
        copy_tree(inside / "hostagent")
        result = sb.run("dpkg-buildpackage", "-us", "-uc", "-b", cwd="/var/tmp/build/hostagent",
                        timeout=600)  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        for built in inside.glob("hostagent*_*"):
            shutil.copy2(built, into / built.name)
