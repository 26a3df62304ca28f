"""The operating systems a sandbox boots: this machine's own Debian 12, or a Debian 13 tree.

Debian 12 is the host's own tree, seen through the sandbox's overlay. Debian 13 is built once
with Debian's own mmdebstrap from the same Debian archive the host's apt uses, and kept in a
cache directory under a name that changes with its package list, so a changed list builds a new
tree and an unchanged one is reused by every later run on the machine. The tree holds what the
integration suite drives inside a machine (systemd, dbus, polkit, tmux, Debian's python3
packages that hostagent depends on) and what building the .deb there needs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.sandbox_host import SandboxError

ROOTS_CACHE = Path(os.environ.get("HOSTAGENT_SANDBOX_ROOTS", "/var/cache/hostagent-sandbox"))
BUILD_TIMEOUT = 1200.0

# What a machine needs for the suite: the daemon's dependencies as Debian names them, the tools
# tests run inside (setpriv, script, useradd, busctl), and the .deb's build dependencies.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "dbus-user-session",
    "libpam-systemd",
    "polkitd",
    "pkexec",
    "tmux",
    "python3",
    "python3-dbus-fast",
    "python3-yaml",
    "python3-sdnotify",
    "util-linux",
    "bsdutils",
    "procps",
    "passwd",
    "login",
    "iproute2",
    "man-db",
    "bash-completion",
    "git",
    "build-essential",
    "debhelper",
    "dh-python",
    "pybuild-plugin-pyproject",
    "python3-all",
    "python3-setuptools",
    "sudo",
    "pipx",
    # Mistral Vibe wants Python 3.12 or newer: dev/agents makes its venv with this tree's python3.
    "python3-venv",
)


@dataclass(frozen=True)
class System:
    name: str
    suite: str  # Debian's codename; "" for this machine's own tree
    title: str


SYSTEMS = {
    "debian12": System("debian12", "", "Debian 12 (this machine's own tree)"),
    "debian13": System("debian13", "trixie", "Debian 13 (built with mmdebstrap)"),
}
DEFAULT_SYSTEM = os.environ.get("HOSTAGENT_SANDBOX_OS", "debian12")


def lower_dir(name: str) -> Path:
    """The tree a sandbox of system name boots, built first when the cache lacks it."""
    system = SYSTEMS.get(name)
    if system is None:
        raise SandboxError(f"no sandbox system '{name}'; use one of {', '.join(SYSTEMS)}")
    if not system.suite:
        return Path("/")
    key = hashlib.sha256(" ".join((system.suite, *PACKAGES)).encode()).hexdigest()[:12]
    tree = ROOTS_CACHE / f"{name}-{key}"
    if (tree / ".complete").exists():
        return tree
    with _locked(ROOTS_CACHE / ".lock"):
        if not (tree / ".complete").exists():  # another run may have built it meanwhile
            _build(system, tree)
    return tree


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian archive the host's apt is set up with (deb822 or one-line sources)."""
    texts = [p.read_text() for p in sorted(sources.glob("sources.list.d/*.sources"))]
    one_line = sources / "sources.list"
    if one_line.exists():
        texts.append(one_line.read_text())
    for text in texts:
        for uri in re.findall(r"^URIs:\s*(\S+)|^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M):
            found = uri[0] or uri[1]
            if found.rstrip("/").endswith("/debian"):
                return found
    raise SandboxError("the host's apt has no Debian archive to build a sandbox tree from")


def _build(system: System, tree: Path) -> None:
    if not shutil.which("mmdebstrap"):
        raise SandboxError(f"building {system.title} needs mmdebstrap (./dev/setup installs it)")
    partial = tree.with_name(tree.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    result = subprocess.run(
        [
            "mmdebstrap",
            "--variant=apt",
            "--mode=root",
            "--format=directory",
            f"--include={','.join(PACKAGES)}",
            system.suite,
            str(partial),
            debian_mirror(),
        ],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise SandboxError(f"mmdebstrap failed for {system.title}: {result.stderr[-2000:]}")
    (partial / ".complete").touch()
    partial.rename(tree)
    for old in ROOTS_CACHE.glob(f"{system.name}-*"):  # trees of an older package list
        if old != tree and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
