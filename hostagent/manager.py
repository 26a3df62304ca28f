"""The registry of sessions and every operation on them, each under its session's lock.

The manager owns the records and the runtime ``Session`` objects. It never imports dbus-fast:
the bus layer listens through ``Listener`` and turns calls into these methods. Unit signals only
queue a reconcile; one reconcile pass, under the session lock, asks systemd for the truth and
decides (DESIGN §4, STYLE rule 9).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import NoReturn, Protocol

from . import checkpoint, hooks, launch, scope, tmux
from .activity import Verdict
from .config import Config
from .conversation import Conversations
from .errors import (
    AlreadyRunning,
    Busy,
    InvalidArgs,
    InvalidCwd,
    InvalidName,
    LimitsExceeded,
    NoSessionForPID,
    NoSuchPreset,
    NoSuchSession,
    NotRunning,
    SessionExists,
    SpawnFailed,
    quote,
)
from .options import CreateRequest
from .panewatch import PaneWatch
from .presets import Preset
from .session import (
    LIVE_STATES,
    Activity,
    DormantReason,
    Event,
    SessionRecord,
    State,
    generate_name,
    name_from_unit,
    name_problem,
    transition,
    unit_name,
)
from .spawn import Owner, build_env, check_cwd, exists_as_owner, size_problem
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

    def commit(self, session: Session) -> None:
        """Persist the record, then tell the bus layer and anyone waiting."""
        self.store.save(session.record)
        if session.record.state is not State.RUNNING:
            self.terminal.unwatch(session)
        self.changed.set()
        self.announce(session)

    def announce(self, session: Session) -> None:
        if self.listener:
            self.listener.session_changed(session)
        self.terminal.wake(session)

    def _apply(self, session: Session, event: Event) -> None:
        old = session.record.state
        session.record.state = transition(old, event)
        if old != session.record.state:
            log.info("session '%s': %s -> %s", session.name, old.value, session.record.state.value)

    def _forget(self, session: Session) -> None:
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

    class _Operation:
        """Counts calls that wait on systemd, and refuses past MAX_OPERATIONS."""

        def __init__(self, manager: Manager) -> None:
            self.manager = manager

        def __enter__(self) -> None:
            if self.manager._operations >= MAX_OPERATIONS:
                raise LimitsExceeded(
                    f"{MAX_OPERATIONS} operations are already in flight; retry in a moment."
                )
            self.manager._operations += 1

        def __exit__(self, *exc: object) -> None:
            self.manager._operations -= 1

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
        with self._Operation(self):
            self._reserved.add(name)
            try:
                record = await self._new_record(caller_uid, name, preset, cwd, req)
                session = Session(record)
                self.sessions[name] = session
            finally:
                self._reserved.discard(name)
            async with session.lock:
                self.store.save(record)
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
                await self._spawn(session)
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
    ) -> SessionRecord:
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
        return SessionRecord(
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

    # ---- spawn, stop, resume, kill, remove ----------------------------------------------

    @contextlib.asynccontextmanager
    async def _locked(self, session: Session) -> AsyncIterator[None]:
        """The session's lock for one whole operation; the waiting is a checkpoint for tests."""
        if session.lock.locked():
            await checkpoint.reached(checkpoint.LOCK_WAIT)
        async with session.lock:
            self._check_alive(session)
            yield

    async def _spawn(self, session: Session) -> None:
        """Start the scope for record.last_argv; the caller holds the lock, state is starting."""
        record = session.record
        owner = self.owner_of(session)
        preset = self.presets.get(record.preset)
        session.stop_requested = False
        try:
            scope.prepare_runtime_dir(self.runtime_dir(owner.uid), owner)
            self.conversations.write_hooks(session, preset)
            xdg = f"/run/user/{owner.uid}" if self.system else os.environ.get("XDG_RUNTIME_DIR")
            env = build_env(
                owner,
                {
                    **(preset.env if preset else {}),
                    **self.conversations.hook_env(preset, owner.uid, session.name),
                },
                record.env,
                xdg if xdg and os.path.isdir(xdg) else None,
            )
            started = await scope.start(
                self.systemd,
                record,
                owner,
                self.socket_of(session),
                env,
                record.limits,
                self.config.stop_timeout_sec,
                self.terminal.prepare(session),
            )
            await checkpoint.reached(checkpoint.SPAWN_STARTED)
        except (SpawnFailed, OSError) as e:
            self._fail(
                session, e.message if isinstance(e, SpawnFailed) else f"Failed to spawn: {e}"
            )
        record.leader_pid = started.leader_pid
        record.invocation_id = started.invocation_id
        record.started_at = started.started_at
        record.boot_id = self.boot_id
        record.dormant_reason = DormantReason.NONE
        record.last_error = ""
        self._apply(session, Event.STARTED)
        self.commit(session)
        self.queue_reconcile(session)  # the agent may already have exited

    def _fail(self, session: Session, error: str) -> NoReturn:
        """A start failed: the session is failed with LastError; its ids are kept."""
        record = session.record
        record.last_error = error
        record.stopped_at = scope.now_usec()
        self._apply(session, Event.START_FAILED)
        self.commit(session)
        log.error("session '%s': %s", session.name, error)
        raise SpawnFailed(f"Session '{session.name}' failed to start: {error}")

    def _live_session(self, name: str) -> Session:
        session = self.get(name)
        if session.lock.locked() and session.record.state is State.STOPPING:
            raise Busy(f"Session '{name}' is stopping; wait for it, then try again.")
        return session

    async def stop(self, name: str) -> None:
        session = self._live_session(name)
        with self._Operation(self):
            async with self._locked(session):
                if session.record.state not in (State.RUNNING, State.STARTING):
                    raise NotRunning(
                        f"Session '{name}' is {session.record.state.value}, not running."
                    )
                await self._stop_locked(session)

    async def _stop_locked(self, session: Session) -> None:
        session.stop_requested = True
        self._apply(session, Event.STOP)
        self.commit(session)
        await checkpoint.reached(checkpoint.STOP_RECORDED)
        await scope.stop(self.systemd, session.record.unit, self.config.stop_timeout_sec + 30)
        await checkpoint.reached(checkpoint.STOP_DONE)
        session.record.stopped_at = scope.now_usec()
        self._apply(session, Event.UNIT_GONE)
        self.commit(session)
        tmux.remove_socket(self.socket_of(session))
        await self.conversations.discover(session)

    def _check_alive(self, session: Session) -> None:
        if session.removed:
            raise NoSuchSession(f"Session '{session.name}' was removed meanwhile.")

    async def resume(self, name: str) -> Session:
        session = self._live_session(name)
        # Answered before waiting for the lock: a resume that is under way has already
        # committed starting, so a second one fails at once instead of queueing behind it.
        self._check_resumable(session)
        with self._Operation(self):
            async with self._locked(session):
                self._check_resumable(session)
                await self._resume_locked(session)
        return session

    @staticmethod
    def _check_resumable(session: Session) -> None:
        state = session.record.state
        if state in (State.STARTING, State.RUNNING):
            raise AlreadyRunning(f"Session '{session.name}' is already {state.value}.")
        if state is State.STOPPING:
            raise Busy(f"Session '{session.name}' is stopping; wait for it, then resume.")

    async def _resume_locked(self, session: Session) -> None:
        record = session.record
        preset = self.presets.get(record.preset) or Preset(name=record.preset)
        owner = self.owner_of(session)
        await self.conversations.discover(session)
        path = launch.conversation_path(preset, record.agent_session, owner.home, record.cwd)
        exists = bool(record.agent_session) and (path is None or await exists_as_owner(owner, path))
        plan = launch.resume_launch(
            preset,
            self.conversations.command_with_hooks(preset, record.command, owner.uid, session.name),
            record.args,
            record.agent_session,
            exists,
        )
        record.last_argv = plan.argv
        record.resume_count += 1
        log.info(
            "session '%s': resuming (%s)",
            session.name,
            "fresh conversation" if plan.fresh else f"conversation {plan.agent_session}",
        )
        record.boot_id = self.boot_id
        self._apply(session, Event.START)
        self.commit(session)
        await checkpoint.reached(checkpoint.RESUME_RECORDED)
        problem = await check_cwd(owner, record.cwd)
        if problem:
            self._fail(
                session,
                f"Working directory '{record.cwd}' {problem}; "
                f"create it, or remove the session with 'hostagentctl rm {session.name}'",
            )
        await self._spawn(session)

    async def kill(self, name: str, whom: str, signal: int) -> None:
        scope.check_signal(whom, signal)
        session = self.get(name)
        async with self._locked(session):
            if session.record.state not in LIVE_STATES:
                raise NotRunning(f"Session '{name}' is {session.record.state.value}, not running.")
            await scope.kill(
                self.systemd,
                session.record,
                self.owner_of(session),
                self.socket_of(session),
                whom,
                signal,
            )

    async def remove(self, name: str) -> None:
        session = self.get(name)
        with self._Operation(self):
            async with self._locked(session):
                if session.record.state in LIVE_STATES:
                    await self._stop_locked(session)
                    await checkpoint.reached(checkpoint.REMOVE_STOPPED)
                self._forget(session)

    # ---- watching units -----------------------------------------------------------------

    def on_unit(self, unit: str, active_state: str) -> None:
        """A unit signal: only queue a reconcile of the session it belongs to."""
        name = name_from_unit(unit)
        session = self.sessions.get(name) if name else None
        if self.recovering or session is None or session.removed or session.record.unit != unit:
            return
        if active_state in ("inactive", "failed", ""):
            self.queue_reconcile(session)

    def queue_reconcile(self, session: Session) -> None:
        if not session.reconcile_queued:
            session.reconcile_queued = True
            asyncio.get_running_loop().create_task(self._reconcile(session))

    async def _reconcile(self, session: Session) -> None:
        async with session.lock:
            session.reconcile_queued = False
            if session.removed or session.record.state not in (State.RUNNING, State.STARTING):
                return
            state = await self.systemd.active_state(session.record.unit)
            if state not in ("inactive", "failed", ""):
                return
            record = session.record
            if scope.leader_alive_in(record.unit, record.leader_pid):
                log.warning(
                    "session '%s': %s reported %s while tmux server %d still runs in it, ignoring",
                    session.name,
                    record.unit,
                    state or "gone",
                    record.leader_pid,
                )
                return
            record.stopped_at = scope.now_usec()
            if not session.stop_requested:
                record.last_error = "" if state != "failed" else f"unit {record.unit} failed"
                log.info("session '%s': the agent exited", session.name)
            self._apply(session, Event.UNIT_GONE)
            self.commit(session)
            tmux.remove_socket(self.socket_of(session))
            await self.conversations.discover(session)

    # ---- configuration ------------------------------------------------------------------

    def reload(self, config: Config, presets: dict[str, Preset]) -> None:
        self.config = config
        self.presets = presets
        log.info("Reloaded configuration from %s and %d presets", config.source, len(presets))
