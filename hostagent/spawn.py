"""Starting a session's tmux server as a held child, so it is in its scope before it runs.

The child is a tiny shell shim that, already running as the owner, changes into the session's
cwd and blocks reading a pipe on its stdin. The daemon moves it into a new scope, waits for
systemd's job to finish, and only then writes to the pipe: the shim execs tmux, and every
process of the session starts inside the scope. Closing the pipe without a word makes the shim
exit instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shutil
from dataclasses import dataclass

from .errors import quote

ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_ENV_ENTRIES = 256
MAX_ENV_BYTES = 64 * 1024
MAX_ARGV_ENTRIES = 1024
MAX_ARGV_BYTES = 128 * 1024
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# $1 cwd, then the command. Exit 126 when the pipe closes without a go-ahead.
_SHIM = 'cd -- "$1" || exit 125; shift; read -r go || exit 126; exec "$@" </dev/null'

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


def env_problem(key: str, value: str) -> str | None:
    if not ENV_KEY_RE.match(key):
        return f"environment key {quote(key)} is not a valid name"
    if "\0" in value:
        return f"environment value of {quote(key)} contains NUL"
    return None


def size_problem(argv: list[str], env: dict[str, str]) -> str | None:
    if len(argv) > MAX_ARGV_ENTRIES or sum(len(a) + 1 for a in argv) > MAX_ARGV_BYTES:
        return f"the command line exceeds {MAX_ARGV_ENTRIES} arguments or {MAX_ARGV_BYTES} bytes"
    if any("\0" in a for a in argv):
        return "an argument contains NUL"
    size = sum(len(k) + len(v) + 2 for k, v in env.items())
    if len(env) > MAX_ENV_ENTRIES or size > MAX_ENV_BYTES:
        return f"the environment exceeds {MAX_ENV_ENTRIES} entries or {MAX_ENV_BYTES} bytes"
    return None


def build_env(
    owner: Owner, preset_env: dict[str, str], caller_env: dict[str, str], runtime_dir: str | None
) -> dict[str, str]:
    """passwd first, then the preset, then the caller: each later layer wins."""
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


async def exec_as_owner(
    owner: Owner, argv: list[str], timeout: float = 10.0
) -> tuple[int, bytes, bytes] | None:
    """Exit code, stdout and stderr of argv run as owner with a fixed environment (nothing of
    the daemon's, no caller's PATH); None when it did not finish in time (it is killed)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd="/",
        env={"PATH": DEFAULT_PATH, "HOME": owner.home, "LANG": "C.UTF-8"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        **as_owner(owner),  # type: ignore[arg-type]
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None
    return proc.returncode or 0, out, err


async def run_as_owner(owner: Owner, argv: list[str], timeout: float = 10.0) -> tuple[int, str]:
    """Exit code and stdout of argv run as owner: paths a user controls are looked at with the
    user's rights, never root's (DESIGN §12). -1 when it timed out."""
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


def tmux_binary() -> str:
    return shutil.which("tmux") or "/usr/bin/tmux"


class HeldChild:
    """The shim, running as owner, blocked until released."""

    def __init__(self, proc: asyncio.subprocess.Process, write_fd: int) -> None:
        self.proc = proc
        self._write_fd = write_fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    async def start(cls, owner: Owner, cwd: str, env: dict[str, str], argv: list[str]) -> HeldChild:
        read_fd, write_fd = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                _SHIM,
                "hostagent-shim",
                cwd,
                *argv,
                cwd="/",
                env=env,
                process_group=0,
                stdin=read_fd,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                **as_owner(owner),  # type: ignore[arg-type]
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(proc, write_fd)

    async def release(self) -> tuple[int, str, str]:
        """Let it exec; its exit code, stdout and stderr (tmux's client exits once the server
        runs)."""
        # The shim may already have exited (it could not enter the cwd); its status says why.
        with contextlib.suppress(BrokenPipeError):
            os.write(self._write_fd, b"go\n")
        os.close(self._write_fd)
        self._write_fd = -1
        out, err = await self.proc.communicate()
        return (
            self.proc.returncode or 0,
            out.decode(errors="replace").strip(),
            err.decode(errors="replace").strip(),
        )

    async def abort(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
