"""The daemon's edges as the core sees them: the systemd client, tmux, the scope runner, running
things as a session's owner, the journal, and the exporter, each as a Protocol.

The core (lifecycle, reconcile, recovery, ending, terminal, containment, the bus objects) is
typed against these and nothing more, so the real edges (systemd.py, tmux.py, scope.py,
host/owners.py, bus/export.py) and the fast layer's fakes (tests/unit/fakes.py) are two implementations that
mypy checks alike, as httpx's transports are. A method the core starts to use is added here
first, and then both implementations must have it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from dbus_fast import Variant

from hostagent.daemon.host.agents import Found
from hostagent.daemon.host.procfs import Process
from hostagent.daemon.host.scope import Started, Step
from hostagent.daemon.host.systemd import UnitInfo
from hostagent.daemon.host.worktree import Worktree
from hostagent.daemon.state.paths import SessionPaths
from hostagent.identity import Owner
from hostagent.session import Limits, SessionRecord


class SystemdPort(Protocol):
    """What the core asks the service manager, beside starting and stopping scopes; and
    whom it tells of a scope's state and Result as they change (core.py wires them)."""

    on_unit: Callable[[str, str], None]
    on_result: Callable[[str, str], None]

    async def active_state(self, unit: str) -> str: ...
    async def list_units(self, pattern: str) -> list[UnitInfo]: ...
    async def invocation_id(self, unit: str) -> str: ...
    async def unit_pids(self, unit: str) -> list[int]: ...
    async def stop_unit(self, unit: str) -> str | None: ...
    async def unit_property(self, unit: str, interface: str, name: str) -> Any: ...
    async def shutting_down(self) -> bool: ...
    async def started_usec(self) -> int: ...


class TmuxPort(Protocol):
    """A session's terminal: every call runs as the owner, on the session's socket."""

    async def server_pid(self, owner: Owner, sock: Path) -> int: ...
    async def pane_pid(self, owner: Owner, sock: Path) -> int: ...
    async def pane_end(self, owner: Owner, sock: Path) -> tuple[bool, int | None, int | None]: ...
    async def capture(self, owner: Owner, sock: Path, scrollback: int, limit: int = 0) -> str: ...
    async def capture_to(self, owner: Owner, sock: Path, scrollback: int, fd: int) -> None: ...
    async def screen_and_title(self, owner: Owner, sock: Path) -> tuple[str, str, str]: ...
    async def pipe_output(self, owner: Owner, sock: Path, fifo: Path) -> tuple[str, str, str]: ...
    async def send_text(self, owner: Owner, sock: Path, text: str, enter: bool) -> None: ...


class ScopeRunner(Protocol):
    """Sessions' scopes and their processes: start, stop, signal, and what /proc says."""

    @property
    def systemd(self) -> SystemdPort: ...
    @property
    def tmux(self) -> TmuxPort: ...

    async def capped_slice(self, uid: int, caps: Limits) -> str: ...

    async def start(
        self,
        record: SessionRecord,
        owner: Owner,
        paths: SessionPaths,
        env: dict[str, str],
        limits: Limits,
        stop_timeout: int,
        output: Path | None = None,
        user_caps: Limits | None = None,
        meanwhile: Step | None = None,
        program_found: bool = False,
        state: list[str] | None = None,
        resolved: dict[str, str] | None = None,
        trusted: list[str] | None = None,
    ) -> Started: ...
    async def stop(self, unit: str, timeout: float) -> None: ...
    async def kill(
        self, record: SessionRecord, owner: Owner, sock: Path, whom: str, signal: int
    ) -> None: ...
    def unit_of_pid(self, pid: int) -> str | None: ...
    def leader_alive_in(self, unit: str, pid: int) -> bool: ...
    def process(self, pid: int) -> Process | None: ...
    def follow_process(
        self, pid: int, on_exit: Callable[[], None]
    ) -> Callable[[], None] | None: ...
    def exit_status_of(self, pid: int) -> int | None: ...


class OwnerPort(Protocol):
    """Running things as a session's owner, with the owner's rights and never the daemon's:
    the environment a session's processes get, the owner's runtime directory (where its
    sockets and FIFOs go), whether the owner can use a working directory, where the owner's
    login shell finds a program, and a helper program's run."""

    def environment(
        self, owner: Owner, preset_env: dict[str, str], caller_env: dict[str, str]
    ) -> dict[str, str]: ...
    def prepare_runtime_dir(self, paths: SessionPaths, name: str, owner: Owner) -> None: ...
    async def check_cwd(self, owner: Owner, cwd: str) -> str | None: ...
    async def resolve(self, owner: Owner, paths: list[str]) -> dict[str, str] | None: ...
    async def find_program(self, owner: Owner, program: str) -> Found: ...
    async def installed(
        self, owner: Owner, programs: dict[str, str]
    ) -> dict[str, tuple[str, str, str]]: ...
    async def run(
        self,
        owner: Owner,
        argv: list[str],
        timeout: float = 10.0,
        env: dict[str, str] | None = None,
        runs_user_code: str = "",
        limit: int = 0,
    ) -> tuple[int, bytes, bytes] | None: ...


class WorktreePort(Protocol):
    """A session's own git worktree, made, diffed and removed as its owner (worktree.py)."""

    async def plan(
        self, owner: Owner, cwd: str, name: str, branch: str, base: str, directory: str
    ) -> Worktree: ...
    async def make(self, owner: Owner, tree: Worktree, setup: str) -> None: ...
    def attached(self, record: SessionRecord, tree: Worktree) -> SessionRecord: ...
    async def discard(self, owner: Owner, tree: Worktree) -> None: ...
    async def remove_of(self, owner: Owner, record: SessionRecord, force: bool) -> str: ...
    async def diff(self, owner: Owner, repo: str, path: str, base_ref: str, stat: bool) -> str: ...


class JournalPort(Protocol):
    """A session's lines in the daemon's journal, for its owner (host/journal.py)."""

    async def open(self, uid: int, name: str, since_usec: int, lines: int, follow: bool) -> int: ...


class Emitter(Protocol):
    """Where the bus objects are exported and their signals sent."""

    def export(self, path: str, interface: Any, target: Any) -> None: ...
    def unexport(self, path: str) -> None: ...
    def emit(
        self, path: str, interface: str, member: str, signature: str, body: list[Any]
    ) -> None: ...
    def emit_changed(self, path: str, interface: str, changed: dict[str, Variant]) -> None: ...
