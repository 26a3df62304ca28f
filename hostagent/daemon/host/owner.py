"""A session's owner, and running things as that owner.

Everything the daemon does on a user's behalf (the held child, tmux commands, checks of paths
the user controls) runs with the owner's uid, gid and groups, never root's, and with a fixed
environment. When the daemon already is the owner (user mode, or root's own sessions) the
cheap checks run in-process instead of in a helper.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from hostagent.daemon.host.forking import Forker
from hostagent.daemon.host.systemd import SystemdError
from hostagent.identity import Owner

log = logging.getLogger(__name__)


class Confiner(Protocol):
    """Where a helper that runs a user's own code goes before it is let go (confine.py's
    Confiner on the system daemon): a scope of its own under the user's slice."""

    async def enter(self, owner: Owner, pid: int, what: str, timeout: float) -> str: ...
    async def leave(self, unit: str) -> None: ...


DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# Exit codes of the cwd check, run as the owner.
_CWD_CHECK = '[ -e "$1" ] || exit 2; [ -d "$1" ] || exit 3; cd -- "$1" 2>/dev/null || exit 4'
CWD_PROBLEMS = {
    2: "does not exist (or is not reachable by the owner)",
    3: "is not a directory",
    4: "is not accessible to the owner",
}


def passwd_env(owner: Owner) -> dict[str, str]:
    """What a login gets from passwd, and a fixed PATH and LANG."""
    return {
        "HOME": owner.home,
        "USER": owner.name,
        "LOGNAME": owner.name,
        "SHELL": owner.shell,
        "PATH": DEFAULT_PATH,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }


def build_env(
    owner: Owner, preset_env: dict[str, str], caller_env: dict[str, str], system: bool
) -> dict[str, str]:
    """passwd first, then the preset, then the caller: each later layer wins. The owner's
    XDG_RUNTIME_DIR is set when it exists (the system daemon's is not the owner's)."""
    runtime_dir = f"/run/user/{owner.uid}" if system else os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and not os.path.isdir(runtime_dir):
        runtime_dir = None
    env = {**passwd_env(owner), "TERM": "tmux-256color"}
    if runtime_dir:
        env["XDG_RUNTIME_DIR"] = runtime_dir
    env.update(preset_env)
    env.update(caller_env)
    return env


# util-linux's setpriv, which switches to the owner in the child once it is exec'd. Given the
# uid, gid and groups itself (subprocess's user=, group=, extra_groups=), Python starts the
# child with fork() rather than vfork(), and fork() copies the daemon's page tables on its
# one thread: 5 ms at 90 MB resident, against a quarter of a millisecond, for every helper; a
# sandbox made in such a fork would be a third way to start a session that nothing else
# takes. So setpriv is required (util-linux is essential on Debian; the RPM requires it), and
# the system daemon refuses to start without it (main.py).
SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin")
NO_SETPRIV = "setpriv (util-linux) is not installed; install it"


def as_owner(owner: Owner, argv: list[str], setpriv: str | None = SETPRIV) -> list[str]:
    """argv run as owner: unchanged when we already are the owner, else through setpriv.
    OSError when setpriv is missing."""
    if os.geteuid() == owner.uid:
        return argv
    if setpriv is None:
        raise OSError(errno.ENOENT, NO_SETPRIV)
    groups = f"--groups={','.join(map(str, owner.groups))}" if owner.groups else "--clear-groups"
    return [setpriv, f"--reuid={owner.uid}", f"--regid={owner.gid}", groups, "--", *argv]


MAX_HELPERS_PER_OWNER = 16  # helper processes running as one user at once
MAX_HELPERS = 128  # as anyone


MAX_OUTPUT = 64 << 20  # what the daemon reads of one helper's output; past it, OutputTooLarge
# ... of a helper whose output is a few lines (a login shell's answer, a --version), so that a
# login shell that prints without end costs the daemon little.
USER_CODE_OUTPUT = 1 << 20


class OutputTooLarge(Exception):
    """A helper printed more than the daemon reads (a user can make tmux print anything)."""


class Helpers:
    """The daemon's one set of means to run a process for a user, made once by the server (and
    by each test that runs helpers), whose parts bind to the event loop that first uses them:

    - the forker (forking.py), which starts sessions' first processes and the clients run
      inside a session;
    - the bounds on helper processes, per owner and in all, which every helper waits for: a
      user whose tmux server is stopped can make her own helpers wait, never spawn hundreds,
      and never take another's slots;
    - the confiner, which puts a user's own code (a login shell, git) in a scope of hers before
      it runs (the system daemon's; none elsewhere);
    - what the owners' login shells found lately (agents.py)."""

    def __init__(self, confiner: Confiner | None = None) -> None:
        self.forker = Forker()
        self.total = asyncio.Semaphore(MAX_HELPERS)
        self.owners: dict[int, asyncio.Semaphore] = {}
        self.confiner = confiner
        self.found: dict[tuple[int, str], tuple[float, Any]] = {}  # agents.look_up's

    def slot(self, uid: int) -> asyncio.Semaphore:
        """uid's own bound; a helper holds it and then one of total."""
        slot = self.owners.get(uid)
        if slot is None:
            slot = self.owners[uid] = asyncio.Semaphore(MAX_HELPERS_PER_OWNER)
        return slot

    async def run(
        self,
        owner: Owner,
        argv: list[str],
        timeout: float = 10.0,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
        runs_user_code: str = "",
        limit: int = 0,
        stdout: int = -1,
    ) -> tuple[int, bytes, bytes] | None:
        """Exit code, stdout and stderr of argv run as owner with a fixed environment (nothing
        of the daemon's, no caller's PATH; or env, a session's own), fed stdin; None when it
        did not finish within timeout, waiting for a free helper slot included (then it is
        killed). OutputTooLarge past limit bytes of output (MAX_OUTPUT unless given). With
        stdout (a descriptor) the helper writes its output there, and the stdout returned is
        empty.

        runs_user_code says what it is ("login shell") when argv runs the owner's own code:
        then, where a confiner is set, it runs in a scope of its own (confine.py) and takes no
        stdin."""
        limit = limit or MAX_OUTPUT
        confiner = self.confiner if runs_user_code else None
        try:
            async with asyncio.timeout(timeout), self.slot(owner.uid), self.total:
                if confiner is not None:
                    return await _run_confined(
                        confiner, owner, argv, env, runs_user_code, timeout, limit
                    )
                return await _run_helper(owner, argv, stdin, env, limit, stdout=stdout)
        except TimeoutError:
            return None


class _Helper(asyncio.SubprocessProtocol):
    """One helper's output, kept up to a limit, and the moment all of it has arrived."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.output: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self.too_large = False
        self.done = asyncio.get_running_loop().create_future()  # exited, output all read
        self.exited = asyncio.get_running_loop().create_future()
        self.transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        buffer = self.output[fd]
        buffer += data
        if len(buffer) > self.limit and not self.too_large:
            self.too_large = True
            assert self.transport is not None
            self.transport.close()

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


# A held process (a session's first one, heldchild.py, or a helper that runs a user's code):
# it runs as the owner and waits for a line on stdin before it execs its arguments (with stdin
# from /dev/null); the pipe closed without one makes it exit with SHIM_CANCELLED instead.
SHIM_CANCELLED = 126
HELD_EXEC = f'read -r go || exit {SHIM_CANCELLED}; exec "$@" </dev/null'


async def _run_confined(
    confiner: Confiner,
    owner: Owner,
    argv: list[str],
    env: dict[str, str] | None,
    what: str,
    timeout: float,
    limit: int,
) -> tuple[int, bytes, bytes]:
    """_run_helper's work for a helper that runs the user's code: held until it is in a scope
    of its own, and that scope stopped once it is done, with anything it left behind."""
    held, go = os.pipe()
    unit = ""

    async def let_go(pid: int) -> None:
        nonlocal unit
        try:
            unit = await confiner.enter(owner, pid, what, timeout)
        except (SystemdError, ProcessLookupError) as e:
            log.warning("%s's %s could not get a scope of its own: %s", owner.name, what, e)
            raise TimeoutError from None  # as a helper that never answered
        os.write(go, b"go\n")

    try:
        return await _run_helper(
            owner,
            ["/bin/sh", "-c", HELD_EXEC, "hostagent-helper", *argv],
            None,
            env,
            limit,
            held=held,
            started=let_go,
        )
    finally:
        os.close(go)
        if unit:
            await confiner.leave(unit)


async def _run_helper(
    owner: Owner,
    argv: list[str],
    stdin: bytes | None,
    env: dict[str, str] | None = None,
    limit: int = MAX_OUTPUT,
    held: int = -1,
    started: Callable[[int], Awaitable[None]] | None = None,
    stdout: int = -1,
) -> tuple[int, bytes, bytes]:
    """Run argv, feed it stdin, and wait until it has exited and closed its output.

    The transport is closed (the helper killed, our ends of its pipes closed) on any way out.
    Waiting for the process alone is not enough: a tmux client hands its stdio to the server
    it talks to, and while that server is stopped the descriptors stay in flight in its
    socket, so the pipes would never report their end (and asyncio's wait() waits for them).
    """
    loop = asyncio.get_running_loop()
    argv = as_owner(owner, argv)
    starting = loop.create_task(
        loop.subprocess_exec(
            lambda: _Helper(limit),
            *argv,
            cwd="/",
            env=env or {"PATH": DEFAULT_PATH, "HOME": owner.home, "LANG": "C.UTF-8"},
            stdin=held
            if held >= 0
            else asyncio.subprocess.DEVNULL
            if stdin is None
            else asyncio.subprocess.PIPE,
            stdout=stdout if stdout >= 0 else asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    )
    try:
        # Never cut short half-way: cancelled while it connects the pipes, asyncio closes the
        # transport before they exist, then waits for pipes it has opened since to end, which
        # they never do while a stopped tmux server holds the helper's stdio.
        transport, helper = await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await _end_helper(*await starting)
        raise
    finally:
        if held >= 0:
            os.close(held)  # the child has its copy
    try:
        if started is not None:
            await started(transport.get_pid())
        pipe = transport.get_pipe_transport(0)
        if stdin is not None and isinstance(pipe, asyncio.WriteTransport):
            pipe.write(stdin)
            pipe.write_eof()  # closes once written
        await helper.done
    finally:
        await _end_helper(transport, helper)
    if helper.too_large:
        raise OutputTooLarge(f"more than {limit} bytes")
    return transport.get_returncode() or 0, bytes(helper.output[1]), bytes(helper.output[2])


async def _end_helper(transport: asyncio.SubprocessTransport, helper: _Helper) -> None:
    """Kill the helper if it still runs and close our ends of its pipes; reap it (briefly)
    so no zombie or stray Popen is left."""
    transport.close()
    if not helper.exited.done():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(helper.exited), 2)


async def run_as_owner(
    helpers: Helpers, owner: Owner, argv: list[str], timeout: float = 10.0
) -> tuple[int, str]:
    """Exit code and stdout of argv run as owner: paths a user controls are looked at with the
    user's rights, never root's (docs/security.md). -1 when it timed out."""
    result = await helpers.run(owner, argv, timeout)
    if result is None:
        return -1, ""
    return result[0], result[1].decode(errors="replace")


async def sh_as_owner(helpers: Helpers, owner: Owner, script: str, *args: str) -> int:
    """Exit code of a tiny sh script run as owner."""
    return (await run_as_owner(helpers, owner, ["/bin/sh", "-c", script, "sh", *args]))[0]


def _cwd_code(cwd: str) -> int:
    """_CWD_CHECK's exit code, computed here; only for a caller that is the owner."""
    if not os.path.exists(cwd):
        return 2
    if not os.path.isdir(cwd):
        return 3
    return 0 if os.access(cwd, os.X_OK) else 4


async def check_cwd(helpers: Helpers, owner: Owner, cwd: str) -> str | None:
    """Why the owner cannot use cwd, checked as the owner, or None. When the daemon runs as
    the owner already (user mode, or root's own sessions), no helper process is needed."""
    if os.geteuid() == owner.uid:
        code = _cwd_code(cwd)
    else:
        code = await sh_as_owner(helpers, owner, _CWD_CHECK, cwd)
    return None if code == 0 else CWD_PROBLEMS.get(code, f"cannot be checked (exit {code})")


REALPATH = shutil.which("realpath", path="/usr/bin:/bin") or "/usr/bin/realpath"


async def resolve_paths(helpers: Helpers, owner: Owner, paths: list[str]) -> dict[str, str] | None:
    """Each path as the owner resolves it (realpath, missing parts allowed), or None when it
    cannot be said: a link the owner made is followed with her rights, never root's."""
    if not paths:
        return {}
    if os.geteuid() == owner.uid:
        return {p: os.path.realpath(p) for p in paths}
    result = await helpers.run(owner, [REALPATH, "-m", "-z", "--", *paths], 10.0)
    if result is None or result[0] != 0:
        return None
    found = [p.decode(errors="surrogateescape") for p in result[1].split(b"\0")[:-1]]
    return dict(zip(paths, found, strict=True)) if len(found) == len(paths) else None


_FIND_PROGRAM = 'PATH="$2"; command -v -- "$1" >/dev/null 2>&1 && [ ! -d "$(command -v -- "$1")" ]'


async def program_problem(helpers: Helpers, owner: Owner, program: str, path: str) -> str | None:
    """Why owner cannot run program (looked up in path, as the agent's exec will), or None."""
    if os.geteuid() == owner.uid:
        found = shutil.which(program, path=path) is not None
    else:
        found = await sh_as_owner(helpers, owner, _FIND_PROGRAM, program, path) == 0
    if found:
        return None
    where = "" if "/" in program else f" in PATH ({path})"
    return f"program '{program}' is not installed or not executable{where}"
