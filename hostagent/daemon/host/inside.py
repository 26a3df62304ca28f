"""The daemon's tmux clients run inside their sessions (enclosure.py says why): which session a
socket is, which of its processes to enter, and one client run there through the forker.

The forker (forker.py) forks each client, as it forks a session's first process: its child
enters the session between fork and exec at the cost of a few system calls, and the daemon's
thread only sends a request. The process entered is the session's tmux server as the record
has it, else one that systemd lists in the session's scope; either is looked at again (its
cgroup, through a pidfd) in the child that enters it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from hostagent.daemon.host import procfs
from hostagent.daemon.host.enclosure import Enclosure, in_unit
from hostagent.daemon.host.forker import Request
from hostagent.daemon.host.forking import Forked, Forker
from hostagent.daemon.host.namespace import landlock_abi
from hostagent.daemon.host.owner import (
    DEFAULT_PATH,
    MAX_OUTPUT,
    Helpers,
    OutputTooLarge,
    as_owner,
)
from hostagent.daemon.host.systemd import Systemd, SystemdError
from hostagent.identity import Owner
from hostagent.session import name_problem, unit_name


class NoEnclosure(Exception):
    """The session has no process left to run a client in: it is not running."""


def session_of_socket(sock: Path) -> str | None:
    """The session whose tmux socket sock is (NAME.d/tmux.sock, or a legacy session's
    NAME.sock), or None."""
    if sock.name == "tmux.sock" and sock.parent.name.endswith(".d"):
        name = sock.parent.name[: -len(".d")]
    elif sock.name.endswith(".sock"):
        name = sock.name[: -len(".sock")]
    else:
        return None
    return name if name and name_problem(name) is None else None


class Insides:
    """Finds the process to enter for a session's socket: the record's tmux server, else the
    first process systemd lists in its scope; remembered while it stays in the scope."""

    def __init__(
        self, systemd: Systemd, leader_of: Callable[[str], tuple[str, int] | None]
    ) -> None:
        """leader_of(name): the session's unit and tmux server as its record says, None for
        no such session."""
        self.systemd = systemd
        self.leader_of = leader_of
        self._known: dict[str, int] = {}

    async def locate(self, sock: Path) -> Enclosure:
        name = session_of_socket(sock)
        if name is None:
            raise NoEnclosure(f"{sock} is no session's tmux socket")
        unit, leader = self.leader_of(name) or (unit_name(name), 0)
        pid = self._known.get(unit, 0)
        if not _alive_in(unit, pid):
            pid = leader
            if not _alive_in(unit, pid):
                try:
                    pids = await self.systemd.unit_pids(unit)
                except SystemdError:
                    pids = []
                pid = next((p for p in sorted(pids) if _alive_in(unit, p)), 0)
            if not pid:
                self._known.pop(unit, None)
                raise NoEnclosure(f"session '{name}' has no process in {unit}")
            self._known[unit] = pid
        return Enclosure(pid, unit, landlock_abi(), str(sock))


def _alive_in(unit: str, pid: int) -> bool:
    return pid > 0 and in_unit(procfs.cgroup_of(pid), unit)


async def exec_inside(
    helpers: Helpers,
    owner: Owner,
    argv: list[str],
    inside: Enclosure,
    timeout: float,
    stdin: bytes | None,
    *,
    limit: int = 0,
    stdout: int = -1,
) -> tuple[int, bytes, bytes] | None:
    """Helpers.run's answer for argv run as owner inside the session: exit code,
    stdout and stderr, or None past the timeout (then it is killed); OutputTooLarge past
    limit bytes. With stdout (a descriptor), the output goes there instead."""
    try:
        async with asyncio.timeout(timeout), helpers.slot(owner.uid), helpers.total:
            return await _run(
                helpers.forker, owner, argv, inside, stdin, limit or MAX_OUTPUT, stdout
            )
    except TimeoutError:
        return None


async def _run(
    forker: Forker,
    owner: Owner,
    argv: list[str],
    inside: Enclosure,
    stdin: bytes | None,
    limit: int,
    stdout: int,
) -> tuple[int, bytes, bytes]:
    argv = as_owner(owner, argv)
    env = {"PATH": DEFAULT_PATH, "HOME": owner.home, "LANG": "C.UTF-8"}
    # The input in a file of its own: the client reads it whole, and nothing waits to write it.
    source = (
        os.memfd_create("hostagent-stdin", os.MFD_CLOEXEC)
        if stdin
        else os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    )
    try:
        if stdin:
            os.write(source, stdin)
            os.lseek(source, 0, os.SEEK_SET)
        forked = await forker.fork(Request(argv, env, "/", None, inside), source, stdout)
    finally:
        os.close(source)
    try:
        return await _collect(forked, limit)
    finally:
        if forked.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                forked.kill()
            asyncio.get_running_loop().create_task(forked.wait())  # closes its pidfd
        forked.stdout.close()
        forked.stderr.close()


async def _collect(forked: Forked, limit: int) -> tuple[int, bytes, bytes]:
    """The client's exit status and output. Its end is its exit, not its pipes' end: a tmux
    client hands its stdio to the server, which may hold it after the client has gone."""
    loop = asyncio.get_running_loop()
    output = {forked.stdout.fileno(): bytearray(), forked.stderr.fileno(): bytearray()}
    too_large = False

    def readable(fd: int) -> None:
        nonlocal too_large
        while not too_large:
            try:
                data = os.read(fd, 1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                loop.remove_reader(fd)
                return
            output[fd] += data
            if len(output[fd]) > limit:
                too_large = True
                with contextlib.suppress(ProcessLookupError):
                    forked.kill()

    for fd in output:
        os.set_blocking(fd, False)
        loop.add_reader(fd, readable, fd)
    try:
        code = await forked.wait()
        for fd in output:
            readable(fd)
    finally:
        for fd in output:
            loop.remove_reader(fd)
    if too_large:
        raise OutputTooLarge(f"more than {limit} bytes")
    out, err = (bytes(b) for b in output.values())
    return code, out, err
