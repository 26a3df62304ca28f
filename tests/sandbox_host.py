"""The host's side of a sandbox: where its state lives, its cgroups, and how it is torn down,
by pid and mount point, including sandboxes that a crashed run left behind. Also the result
and error types that every part of the sandbox shares.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

STATE_ROOT = Path(os.environ.get("HOSTAGENT_SANDBOX_ROOT", "/var/tmp/hostagent-sandbox"))
CGROUP_ROOT = Path("/sys/fs/cgroup")
LIMIT_CONTROLLERS = ("pids", "memory")  # what TasksMax= and MemoryMax= need


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> Result:
        if self.returncode != 0:
            raise AssertionError(
                f"exit {self.returncode}\nstdout: {self.stdout}\nstderr: {self.stderr}"
            )
        return self


class SandboxError(Exception):
    pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


def is_mount(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mounts", encoding="utf-8") as f:
        return any(line.split()[1] == target for line in f)


def _hierarchies(limits: bool) -> list[Path]:
    """The cgroup hierarchies a sandbox's nspawn joins a cgroup of its own in.

    nspawn with --keep-unit on a host without systemd makes its payload cgroup beside its own.
    Left in the host's root, every container would get the same payload cgroup, so two
    containers at once would share one tree: each one's systemd would see, kill and remove
    the other's units. The process-tracking hierarchies (cgroup2, and name=systemd on a
    hybrid host) get a cgroup per sandbox, and with limits the v1 controllers TasksMax= and
    MemoryMax= need.
    """
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]  # a unified host: one tree
    names = ["unified", "systemd", *(LIMIT_CONTROLLERS if limits else ())]
    return [CGROUP_ROOT / n for n in names if (CGROUP_ROOT / n / "cgroup.procs").exists()]


def sandbox_cgroups(name: str, limits: bool) -> list[Path]:
    """Make this sandbox's own cgroup in each hierarchy it needs (see _hierarchies)."""
    made = []
    for hierarchy in _hierarchies(limits):
        path = hierarchy / f"hostagent-sandbox-{name}"
        path.mkdir(exist_ok=True)
        made.append(path)
    return made


def remove_cgroups(name: str) -> None:
    """Remove a sandbox's cgroups, deepest first: its systemd is gone, so they are empty."""
    for hierarchy in _hierarchies(limits=True):
        top = hierarchy / f"hostagent-sandbox-{name}"
        if not top.is_dir():
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def kill_container(leader: int, directory: Path) -> None:
    """SIGKILL a container's PID 1, if leader still is the init of this sandbox's machine."""
    if not leader or not alive(leader):
        return
    with contextlib.suppress(OSError):
        # Only a process in a PID namespace of its own (a container's init), never a host
        # process that reused the number.
        other_pidns = os.readlink(f"/proc/{leader}/ns/pid") != os.readlink("/proc/self/ns/pid")
        if other_pidns and read_int(directory / "leader.pid") == leader:
            os.kill(leader, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while alive(leader) and time.monotonic() < deadline:
                time.sleep(0.05)


def teardown(directory: Path) -> None:
    kill_container(read_int(directory / "leader.pid"), directory)
    nspawn = read_int(directory / "nspawn.pid")
    if nspawn and alive(nspawn):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{nspawn}/cmdline").read_bytes()
            if str(directory).encode() in cmdline:
                os.kill(nspawn, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while alive(nspawn) and time.monotonic() < deadline:
                    time.sleep(0.05)
    root = directory / "root"
    if is_mount(root):
        if subprocess.run(["umount", str(root)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(root)], check=False)
    shutil.rmtree(directory, ignore_errors=True)
    remove_cgroups(directory.name)


def reap_stale() -> None:
    """Tear down sandboxes whose owning process is gone (a crashed or killed test run)."""
    if not STATE_ROOT.is_dir():
        return
    for d in STATE_ROOT.iterdir():
        owner = read_int(d / "owner.pid")
        if owner != os.getpid() and not (owner and alive(owner)):
            teardown(d)
