"""What happens to one session over its life: spawn, stop, resume, kill, remove, and the
reconcile that follows systemd's word about its unit. Each operation holds the session's lock
from start to end (DESIGN §4), so a Kill or a Remove never interleaves with a Resume.

Unit signals only queue a reconcile; one reconcile pass, under the session lock, asks systemd
for the truth and decides (STYLE rule 9).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, NoReturn

from . import checkpoint, launch, scope, tmux
from .errors import AlreadyRunning, Busy, NoSuchSession, NotRunning, SpawnFailed
from .presets import Preset
from .session import LIVE_STATES, DormantReason, Event, State, name_from_unit
from .spawn import build_env, check_cwd, exists_as_owner

if TYPE_CHECKING:
    from .manager import Manager, Session

log = logging.getLogger(__name__)


class Lifecycle:
    def __init__(self, manager: Manager) -> None:
        self.manager = manager

    @contextlib.asynccontextmanager
    async def _locked(self, session: Session) -> AsyncIterator[None]:
        """The session's lock for one whole operation; the waiting is a checkpoint for tests."""
        if session.lock.locked():
            await checkpoint.reached(checkpoint.LOCK_WAIT)
        async with session.lock:
            self._check_alive(session)
            yield

    async def spawn(self, session: Session) -> None:
        """Start the scope for record.last_argv; the caller holds the lock, state is starting."""
        record = session.record
        owner = self.manager.owner_of(session)
        preset = self.manager.presets.get(record.preset)
        session.stop_requested = False
        try:
            scope.prepare_runtime_dir(self.manager.runtime_dir(owner.uid), owner)
            self.manager.conversations.write_hooks(session, preset)
            xdg = (
                f"/run/user/{owner.uid}"
                if self.manager.system
                else os.environ.get("XDG_RUNTIME_DIR")
            )
            env = build_env(
                owner,
                {
                    **(preset.env if preset else {}),
                    **self.manager.conversations.hook_env(preset, owner.uid, session.name),
                },
                record.env,
                xdg if xdg and os.path.isdir(xdg) else None,
            )
            started = await scope.start(
                self.manager.systemd,
                record,
                owner,
                self.manager.socket_of(session),
                env,
                record.limits,
                self.manager.config.stop_timeout_sec,
                self.manager.terminal.prepare(session),
            )
            await checkpoint.reached(checkpoint.SPAWN_STARTED)
        except (SpawnFailed, OSError) as e:
            self._fail(
                session, e.message if isinstance(e, SpawnFailed) else f"Failed to spawn: {e}"
            )
        record.leader_pid = started.leader_pid
        record.invocation_id = started.invocation_id
        record.started_at = started.started_at
        record.dormant_reason = DormantReason.NONE
        record.last_error = ""
        self.manager.apply(session, Event.STARTED)
        # On disk the record says starting until just after the reply; a daemon that dies in
        # between adopts the running unit and reads leader and invocation back (startup.py).
        self.manager.commit(session, rebuildable=True)
        if not record.leader_pid:
            # tmux was already gone from the scope: the agent exited at once. A server that
            # was found running will be followed by the unit's own signals.
            self.queue_reconcile(session)

    def _fail(self, session: Session, error: str) -> NoReturn:
        """A start failed: the session is failed with LastError; its ids are kept."""
        record = session.record
        record.last_error = error
        record.stopped_at = scope.now_usec()
        self.manager.apply(session, Event.START_FAILED)
        self.manager.commit(session)
        log.error("session '%s': %s", session.name, error)
        raise SpawnFailed(f"Session '{session.name}' failed to start: {error}")

    def _live_session(self, name: str) -> Session:
        session = self.manager.get(name)
        if session.lock.locked() and session.record.state is State.STOPPING:
            raise Busy(f"Session '{name}' is stopping; wait for it, then try again.")
        return session

    async def stop(self, name: str) -> None:
        session = self._live_session(name)
        with self.manager.operation():
            async with self._locked(session):
                if session.record.state not in (State.RUNNING, State.STARTING):
                    raise NotRunning(
                        f"Session '{name}' is {session.record.state.value}, not running."
                    )
                await self._stop_locked(session)

    async def _stop_locked(self, session: Session) -> None:
        session.stop_requested = True
        self.manager.apply(session, Event.STOP)
        self.manager.commit(session)
        await checkpoint.reached(checkpoint.STOP_RECORDED)
        await scope.stop(
            self.manager.systemd, session.record.unit, self.manager.config.stop_timeout_sec + 30
        )
        await checkpoint.reached(checkpoint.STOP_DONE)
        session.record.stopped_at = scope.now_usec()
        self.manager.apply(session, Event.UNIT_GONE)
        self.manager.commit(session)
        tmux.remove_socket(self.manager.socket_of(session))
        await self.manager.conversations.discover(session)

    def _check_alive(self, session: Session) -> None:
        if session.removed:
            raise NoSuchSession(f"Session '{session.name}' was removed meanwhile.")

    async def resume(self, name: str) -> Session:
        session = self._live_session(name)
        # Answered before waiting for the lock: a resume that is under way has already
        # committed starting, so a second one fails at once instead of queueing behind it.
        self._check_resumable(session)
        with self.manager.operation():
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
        preset = self.manager.presets.get(record.preset) or Preset(name=record.preset)
        owner = self.manager.owner_of(session)
        await self.manager.conversations.discover(session)
        path = launch.conversation_path(preset, record.agent_session, owner.home, record.cwd)
        exists = bool(record.agent_session) and (path is None or await exists_as_owner(owner, path))
        plan = launch.resume_launch(
            preset,
            self.manager.conversations.command_with_hooks(
                preset, record.command, owner.uid, session.name
            ),
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
        record.boot_id = self.manager.boot_id
        self.manager.apply(session, Event.START)
        self.manager.commit(session)
        await checkpoint.reached(checkpoint.RESUME_RECORDED)
        problem = await check_cwd(owner, record.cwd)
        if problem:
            self._fail(
                session,
                f"Working directory '{record.cwd}' {problem}; "
                f"create it, or remove the session with 'hostagentctl rm {session.name}'",
            )
        await self.spawn(session)

    async def kill(self, name: str, whom: str, signal: int) -> None:
        scope.check_signal(whom, signal)
        session = self.manager.get(name)
        async with self._locked(session):
            if session.record.state not in LIVE_STATES:
                raise NotRunning(f"Session '{name}' is {session.record.state.value}, not running.")
            await scope.kill(
                self.manager.systemd,
                session.record,
                self.manager.owner_of(session),
                self.manager.socket_of(session),
                whom,
                signal,
            )

    async def remove(self, name: str) -> None:
        session = self.manager.get(name)
        with self.manager.operation():
            async with self._locked(session):
                if session.record.state in LIVE_STATES:
                    await self._stop_locked(session)
                    await checkpoint.reached(checkpoint.REMOVE_STOPPED)
                self.manager.forget(session)

    # ---- watching units -------------------------------------------------------------------

    def on_unit(self, unit: str, active_state: str) -> None:
        """A unit signal: only queue a reconcile of the session it belongs to."""
        name = name_from_unit(unit)
        session = self.manager.sessions.get(name) if name else None
        if (
            self.manager.recovering
            or session is None
            or session.removed
            or session.record.unit != unit
        ):
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
            state = await self.manager.systemd.active_state(session.record.unit)
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
            self.manager.apply(session, Event.UNIT_GONE)
            self.manager.commit(session)
            tmux.remove_socket(self.manager.socket_of(session))
            await self.manager.conversations.discover(session)
