"""The registry of sessions: the runtime ``Session`` objects, lookup, creation, and the one
place a record is persisted and announced (``commit``).

The manager never imports dbus-fast: the bus layer listens through ``Listener``. What happens
to a session after it exists lives beside it, each part by role: ``lifecycle`` (start, stop,
resume, kill, remove, reconcile), ``terminal`` (watching, screen, typing, waiting) and
``conversation`` (the agent's conversation id).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from . import checkpoint, hooks, launch, scope, tmux
from .activity import Verdict
from .config import Config
from .conversation import Conversations
from .errors import (
    InvalidArgs,
    InvalidCwd,
    InvalidName,
    LimitsExceeded,
    NoSessionForPID,
    NoSuchPreset,
    NoSuchSession,
    SessionExists,
    SpawnFailed,
    quote,
)
from .lifecycle import Lifecycle
from .options import CreateRequest
from .panewatch import PaneWatch
from .presets import Preset
from .session import (
    LIVE_STATES,
    Activity,
    Event,
    SessionRecord,
    State,
    generate_name,
    name_problem,
    transition,
    unit_name,
)
from .spawn import Owner, check_cwd, size_problem
from .store import SidecarStore
from .systemd import Systemd
from .terminal import Terminal

log = logging.getLogger(__name__)

MAX_OPERATIONS = 256  # calls waiting for a systemd job at once; past it, LimitsExceeded


class Listener(Protocol):
    def session_added(self, session: Session) -> None: ...
    def session_removed(self, session: Session) -> None: ...
    def session_changed(self, session: Session) -> None: ...


class Session:
    """A record plus what only lives while the daemon runs: its lock, activity and waiters."""

    def __init__(self, record: SessionRecord) -> None:
        self.record = record
        self.lock = asyncio.Lock()
        self.removed = False
        self.stop_requested = False
        self.reconcile_queued = False
        self.owner: Owner | None = None
        self.waiters: list[tuple[frozenset[str], asyncio.Future[str]]] = []
        self.last_hook: hooks.HookReport | None = None
        self.watch: PaneWatch | None = None

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def verdict(self) -> Verdict:
        """What the session is doing, and why we think so."""
        state = self.record.state
        if state is State.RUNNING and self.watch is not None and self.watch.verdict is not None:
            return self.watch.verdict
        if state in LIVE_STATES:
            return Verdict(Activity.UNKNOWN, "lifecycle", "not read yet", state.value)
        return Verdict(Activity.EXITED, "lifecycle", "not running", state.value)

    @property
    def activity(self) -> Activity:
        return self.verdict.activity


class Manager:
    def __init__(
        self,
        *,
        system: bool,
        systemd: Systemd,
        store: SidecarStore,
        config: Config,
        presets: dict[str, Preset],
        boot_id: str,
        runtime_root: Path,
    ) -> None:
        self.system = system
        self.systemd = systemd
        self.store = store
        self.config = config
        self.presets = presets
        self.boot_id = boot_id
        self.runtime_root = runtime_root
        self.sessions: dict[str, Session] = {}
        self.listener: Listener | None = None
        self._reserved: set[str] = set()
        self._operations = 0
        self.changed = asyncio.Event()  # set on every commit; the daemon refreshes STATUS=
        self.recovering = True  # unit signals wait until recovery has looked at every unit
        self.conversations = Conversations(self)
        self.terminal = Terminal(self)
        self.lifecycle = Lifecycle(self)

    # ---- lookup -------------------------------------------------------------------------

    def get(self, name: str) -> Session:
        session = self.sessions.get(name)
        if session is None or session.removed:
            raise NoSuchSession(f"No session {quote(name)} known; 'hostagentctl list' shows them.")
        return session

    def by_pid(self, pid: int) -> Session:
        unit = scope.unit_of_pid(pid)
        for session in self.sessions.values():
            if unit and session.record.unit == unit and not session.removed:
                return session
        raise NoSessionForPID(f"PID {pid} does not belong to any session.")

    def owner_of(self, session: Session) -> Owner:
        if session.owner is None:
            session.owner = Owner.from_uid(session.record.owner)
        return session.owner

    def socket_of(self, session: Session) -> Path:
        return tmux.socket_path(self.runtime_dir(session.record.owner), session.name)

    def runtime_dir(self, uid: int) -> Path:
        return self.runtime_root / str(uid) if self.system else self.runtime_root

    def status_line(self) -> str:
        counts: dict[str, int] = {}
        for s in self.sessions.values():
            counts[s.record.state.value] = counts.get(s.record.state.value, 0) + 1
        if not counts:
            return "No sessions."
        return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))

    # ---- bookkeeping --------------------------------------------------------------------

    def commit(self, session: Session, rebuildable: bool = False) -> None:
        """Persist the record, then tell the bus layer and anyone waiting. A rebuildable state
        (one recovery reconstructs from systemd and tmux) is written just after the reply."""
        if rebuildable:
            self.store.save_soon(session.record)
        else:
            self.store.save(session.record)
        if session.record.state is not State.RUNNING:
            self.terminal.unwatch(session)
        self.changed.set()
        self.announce(session)

    def announce(self, session: Session) -> None:
        if self.listener:
            self.listener.session_changed(session)
        self.terminal.wake(session)

    def apply(self, session: Session, event: Event) -> None:
        old = session.record.state
        session.record.state = transition(old, event)
        if old != session.record.state:
            log.info("session '%s': %s -> %s", session.name, old.value, session.record.state.value)

    def forget(self, session: Session) -> None:
        self.terminal.unwatch(session)
        session.removed = True
        self.sessions.pop(session.name, None)
        self.store.delete(session.name)
        tmux.remove_socket(self.socket_of(session))
        self.changed.set()
        if self.listener:
            self.listener.session_removed(session)
        for _, fut in session.waiters:
            if not fut.done():
                fut.set_result(Activity.EXITED.value)
        log.info("session '%s': removed", session.name)

    @contextlib.contextmanager
    def operation(self) -> Iterator[None]:
        """One call that waits on systemd; past MAX_OPERATIONS of them, LimitsExceeded."""
        if self._operations >= MAX_OPERATIONS:
            raise LimitsExceeded(
                f"{MAX_OPERATIONS} operations are already in flight; retry in a moment."
            )
        self._operations += 1
        try:
            yield
        finally:
            self._operations -= 1

    # ---- create -------------------------------------------------------------------------

    async def create(
        self, caller_uid: int, name: str, preset_name: str, cwd: str, req: CreateRequest
    ) -> Session:
        preset = self.presets.get(preset_name or "shell")
        if preset is None:
            raise NoSuchPreset(
                f"No preset '{preset_name}' known; 'hostagentctl presets' lists them."
            )
        name = name or generate_name(preset.name, set(self.sessions) | self._reserved)
        problem = name_problem(name)
        if problem:
            raise InvalidName(f"Session name {quote(name)} {problem}.")
        self._check_free(name)
        with self.operation():
            self._reserved.add(name)
            try:
                record, owner = await self._new_record(caller_uid, name, preset, cwd, req)
                session = Session(record)
                session.owner = owner  # looked up once: NSS can cost a round trip
                self.sessions[name] = session
            finally:
                self._reserved.discard(name)
            async with session.lock:
                try:
                    self.store.save(record)
                except OSError as e:
                    del self.sessions[name]
                    raise SpawnFailed(
                        f"Session '{name}' was not created: its record cannot be written "
                        f"({e.strerror}); check {self.store.sessions_dir}."
                    ) from None
                await checkpoint.reached(checkpoint.CREATE_RECORDED)
                log.info(
                    "session '%s': created (uuid %s, preset %s, owner %d)",
                    name,
                    record.uuid,
                    preset.name,
                    record.owner,
                )
                if self.listener:
                    self.listener.session_added(session)
                await self.lifecycle.spawn(session)
        return session

    def _check_free(self, name: str) -> None:
        existing = self.sessions.get(name)
        if existing is not None:
            state = existing.record.state.value
            raise SessionExists(
                f"Session '{name}' already exists and is {state}; "
                f"resume it with 'hostagentctl resume {name}' or remove it with "
                f"'hostagentctl rm {name}'."
            )
        if name in self._reserved:
            raise SessionExists(f"Session '{name}' is being created right now; pick another name.")

    async def _new_record(
        self, caller_uid: int, name: str, preset: Preset, cwd: str, req: CreateRequest
    ) -> tuple[SessionRecord, Owner]:
        owner_uid = caller_uid if self.system else os.getuid()
        if req.user is not None and req.user != owner_uid:
            if caller_uid != 0 or not self.system:
                raise InvalidArgs("Only root may create a session for another user ('user').")
            owner_uid = req.user
        try:
            owner = Owner.from_uid(owner_uid)
        except KeyError:
            raise InvalidArgs(f"User {owner_uid} does not exist.") from None
        cwd = cwd or owner.home
        if not os.path.isabs(cwd):
            raise InvalidCwd(f"Working directory {quote(cwd)} must be an absolute path.")
        problem = await check_cwd(owner, cwd)
        if problem:
            raise InvalidCwd(f"Working directory {quote(cwd)} {problem}.")
        command = req.command if req.command is not None else (preset.command or [owner.shell])
        agent_id = req.agent_session or launch.new_agent_id(preset)
        first = launch.first_launch(
            preset,
            self.conversations.command_with_hooks(preset, command, owner.uid, name),
            req.args,
            agent_id,
        )
        problem = size_problem(first.argv, {**preset.env, **req.env})
        if problem:
            raise InvalidArgs(f"Session '{name}': {problem}.")
        record = SessionRecord(
            name=name,
            uuid=str(uuid.uuid4()),
            owner=owner_uid,
            preset=preset.name,
            cwd=os.path.normpath(cwd),
            command=list(command),
            args=list(req.args),
            argv=first.argv,
            last_argv=first.argv,
            env=dict(req.env),
            limits=req.limits.merged_over(self.config.limits),
            columns=req.columns or self.config.columns,
            rows=req.rows or self.config.rows,
            agent_session=agent_id,
            agent_session_source=("assigned" if agent_id else ""),
            unit=unit_name(name),
            boot_id=self.boot_id,
            created_at=scope.now_usec(),
            state=State.STARTING,
        )
        return record, owner

    # ---- configuration ------------------------------------------------------------------

    def reload(self, config: Config, presets: dict[str, Preset]) -> None:
        self.config = config
        self.presets = presets
        log.info("Reloaded configuration from %s and %d presets", config.source, len(presets))
