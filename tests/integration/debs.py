"""The Debian packages as an admin gets them: docs/admin-guide.md's "install" block, run as
written in a copy of the checkout (the files git has, nothing built), inside a fresh machine of
the system under test (Debian 12 or 13, each with its own debhelper and python3), with no
network. The machine keeps the installed package for the tests that use it as installed."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.sandbox import REPO, Sandbox

CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
BUILD_DIR = "/var/tmp/build"


def host(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # Debian's own python3 and tools, whatever venv or pyenv the test runs under.
    return subprocess.run(argv, cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True, timeout=600)


def doc_block(document: str, tag: str) -> str:
    """A tagged block of a document, as dev/doc-block (and so .ci/run) reads it."""
    result = host(str(REPO / "dev" / "doc-block"), str(REPO / document), tag)
    assert result.returncode == 0, result.stderr
    return result.stdout


def copy_checkout(to: Path) -> None:
    """The checkout's files as git sees them (tracked, and untracked but not ignored): what a
    clean clone or a release tarball holds."""
    files = host("git", "ls-files", "-co", "--exclude-standard", cwd=REPO).stdout.splitlines()
    for f in files:
        if (REPO / f).is_file():
            (to / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, to / f)


@contextmanager
def guide_machine(into: Path) -> Iterator[Sandbox]:
    """A fresh machine where the admin guide's install block ran; the .debs it built and the
    build's .changes are copied into the directory into."""
    with Sandbox(install=False) as sb:
        copy_checkout(sb.root / BUILD_DIR.lstrip("/") / "hostagent")
        result = sb.run(
            "bash",
            "-euo",
            "pipefail",
            "-c",
            doc_block("docs/admin-guide.md", "install"),
            cwd=f"{BUILD_DIR}/hostagent",
            timeout=900,
            env={"DEBIAN_FRONTEND": "noninteractive"},
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        (into / "build.log").write_text(result.stdout + result.stderr)
        for built in (sb.root / BUILD_DIR.lstrip("/")).glob("hostagent*_*"):
            shutil.copy2(built, into / built.name)
        yield sb
