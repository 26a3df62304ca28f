"""A session's owner, and running things as that owner.

Everything the daemon does on a user's behalf (the held child, tmux commands, checks of paths
the user controls) runs with the owner's uid, gid and groups, never root's, and with a fixed
environment. When the daemon already is the owner (user mode, or root's own sessions) the
cheap checks run in-process instead of in a helper.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import weakref
from dataclasses import dataclass

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# Exit codes of the cwd check, run as the owner.
_CWD_CHECK = '[ -e "$1" ] || exit 2; [ -d "$1" ] || exit 3; cd -- "$1" 2>/dev/null || exit 4'
CWD_PROBLEMS = {
    2: "does not exist (or is not reachable by the owner)",
    3: "is not a directory",
    4: "is not accessible to the owner",
}


@dataclass(frozen=True)
class Owner:
    uid: int
    gid: int
    name: str
    home: str
    shell: str
    groups: tuple[int, ...]

    @classmethod
    def from_uid(cls, uid: int) -> Owner:
        pw = pwd.getpwuid(uid)  # KeyError for an unknown uid
        groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
        return cls(uid, pw.pw_gid, pw.pw_name, pw.pw_dir, pw.pw_shell or "/bin/sh", groups)


def build_env(
    owner: Owner, preset_env: dict[str, str], caller_env: dict[str, str], system: bool
) -> dict[str, str]:
    """passwd first, then the preset, then the caller: each later layer wins. The owner's
    XDG_RUNTIME_DIR is set when it exists (the system daemon's is not the owner's)."""
    runtime_dir = f"/run/user/{owner.uid}" if system else os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and not os.path.isdir(runtime_dir):
        runtime_dir = None
    env = {
        "HOME": owner.home,
        "USER": owner.name,
        "LOGNAME": owner.name,
        "SHELL": owner.shell,
        "PATH": DEFAULT_PATH,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TERM": "tmux-256color",
    }
    if runtime_dir:
        env["XDG_RUNTIME_DIR"] = runtime_dir
    env.update(preset_env)
    env.update(caller_env)
    return env


def as_owner(owner: Owner) -> dict[str, object]:
    """subprocess keywords that run the child as owner; none when we already are owner."""
    if os.geteuid() == owner.uid:
        return {}
    return {"user": owner.uid, "group": owner.gid, "extra_groups": list(owner.groups)}


MAX_HELPERS_PER_OWNER = 16  # helper processes running as one user at once
MAX_HELPERS = 128  # as anyone


class _HelperSlots:
    """Bounds on helper processes, per owner and in all: a user whose tmux server is stopped
    can make their own helpers wait, never spawn hundreds, and never take another's slots."""

    def __init__(self) -> None:
        self.total = asyncio.Semaphore(MAX_HELPERS)
        self.owners: dict[int, asyncio.Semaphore] = {}

    def of(self, uid: int) -> asyncio.Semaphore:
        slot = self.owners.get(uid)
        if slot is None:
            slot = self.owners[uid] = asyncio.Semaphore(MAX_HELPERS_PER_OWNER)
        return slot


# One set per event loop: a semaphore belongs to the loop it first waited on.
_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _HelperSlots] = (
    weakref.WeakKeyDictionary()
)


def _slots() -> _HelperSlots:
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = _HelperSlots()
    return slots


MAX_OUTPUT = 64 << 20  # what the daemon reads of one helper's output; past it, OutputTooLarge


class OutputTooLarge(Exception):
    """A helper printed more than the daemon reads (a user can make tmux print anything)."""


async def exec_as_owner(
    owner: Owner, argv: list[str], timeout: float = 10.0, stdin: bytes | None = None
) -> tuple[int, bytes, bytes] | None:
    """Exit code, stdout and stderr of argv run as owner with a fixed environment (nothing of
    the daemon's, no caller's PATH), fed stdin; None when it did not finish within timeout,
    waiting for a free helper slot included (then it is killed). OutputTooLarge past
    MAX_OUTPUT bytes of output."""
    slots = _slots()
    try:
        async with asyncio.timeout(timeout), slots.of(owner.uid), slots.total:
            return await _run_helper(owner, argv, stdin)
    except TimeoutError:
        return None


async def _read_at_most(stream: asyncio.StreamReader | None, limit: int) -> bytes:
    if stream is None:
        return b""
    try:
        await stream.readexactly(limit + 1)
    except asyncio.IncompleteReadError as e:
        return e.partial  # the end came first: all of it
    raise OutputTooLarge(f"more than {limit} bytes")


async def _feed(stream: asyncio.StreamWriter | None, data: bytes | None) -> None:
    """Write data to the helper's stdin beside reading its output, so neither side blocks."""
    if stream is None or data is None:
        return
    try:
        stream.write(data)
        await stream.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # it exited without reading everything; its exit code says why
    finally:
        stream.close()


async def _run_helper(
    owner: Owner, argv: list[str], stdin: bytes | None
) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd="/",
        env={"PATH": DEFAULT_PATH, "HOME": owner.home, "LANG": "C.UTF-8"},
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        **as_owner(owner),  # type: ignore[arg-type]
    )
    try:
        out, err, _ = await asyncio.gather(
            _read_at_most(proc.stdout, MAX_OUTPUT),
            _read_at_most(proc.stderr, MAX_OUTPUT),
            _feed(proc.stdin, stdin),
        )
        await proc.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out, err


async def run_as_owner(owner: Owner, argv: list[str], timeout: float = 10.0) -> tuple[int, str]:
    """Exit code and stdout of argv run as owner: paths a user controls are looked at with the
    user's rights, never root's (docs/security.md). -1 when it timed out."""
    result = await exec_as_owner(owner, argv, timeout)
    if result is None:
        return -1, ""
    return result[0], result[1].decode(errors="replace")


async def sh_as_owner(owner: Owner, script: str, *args: str) -> int:
    """Exit code of a tiny sh script run as owner."""
    return (await run_as_owner(owner, ["/bin/sh", "-c", script, "sh", *args]))[0]


def _cwd_code(cwd: str) -> int:
    """_CWD_CHECK's exit code, computed here; only for a caller that is the owner."""
    if not os.path.exists(cwd):
        return 2
    if not os.path.isdir(cwd):
        return 3
    return 0 if os.access(cwd, os.X_OK) else 4


async def check_cwd(owner: Owner, cwd: str) -> str | None:
    """Why the owner cannot use cwd, checked as the owner, or None. When the daemon runs as
    the owner already (user mode, or root's own sessions), no helper process is needed."""
    if os.geteuid() == owner.uid:
        code = _cwd_code(cwd)
    else:
        code = await sh_as_owner(owner, _CWD_CHECK, cwd)
    return None if code == 0 else CWD_PROBLEMS.get(code, f"cannot be checked (exit {code})")


async def exists_as_owner(owner: Owner, path: str) -> bool:
    if os.geteuid() == owner.uid:
        return os.path.exists(path)
    return await sh_as_owner(owner, '[ -e "$1" ]', path) == 0
