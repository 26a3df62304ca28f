"""What happens to one session over its life: create, spawn, stop, resume, kill and remove.

Each operation holds the session's lock from start to end, the wait for systemd's job
included, so a Kill or a Remove never interleaves with a Resume: the second caller sees the
state the first one committed and gets a named error, never a tmux failure or a ghost record.
Every change goes through ``Registry.change`` (the state machine, the write, the listeners),
and every end of a run through ``Endings.finish``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from typing import NoReturn

from hostagent.daemon.follow.conversation import Conversations
from hostagent.daemon.follow.terminal import Terminal
from hostagent.daemon.host import checkpoint, worktree
from hostagent.daemon.host.owner import build_env, check_cwd
from hostagent.daemon.host.ports import ScopeRunner
from hostagent.daemon.host.runtimedir import prepare_runtime_dir
from hostagent.daemon.host.systemd import SystemdError
from hostagent.daemon.host.tmux import remove_socket
from hostagent.daemon.ops import resumeplan
from hostagent.daemon.ops.admission import (
    check_budget,
    check_not_stopping,
    check_request,
    check_resumable,
    first_record,
    quota_problem,
)
from hostagent.daemon.ops.reconcile import GONE_STATES, Reconciler
from hostagent.daemon.state.registry import Registry, Session
from hostagent.daemon.state.settings import Settings
from hostagent.errors import (
    LimitsExceeded,
    NoSuchSession,
    NotRunning,
    ResumeFailed,
    SpawnFailed,
    StopFailed,
    StorageFull,
    WorktreeFailed,
)
from hostagent.options import CreateRequest
from hostagent.permissions import capped, exempt_from_caps
from hostagent.presets import Preset
from hostagent.session import (
    LIVE_STATES,
    DormantReason,
    Event,
    Limits,
    State,
)

log = logging.getLogger(__name__)


class Lifecycle:
    def __init__(
        self,
        registry: Registry,
        scopes: ScopeRunner,
        terminal: Terminal,
        conversations: Conversations,
        reconciler: Reconciler,
        settings: Settings,
        boot_id: str,
    ) -> None:
        self.registry = registry
        self.scopes = scopes
        self.terminal = terminal
        self.conversations = conversations
        self.reconciler = reconciler
        self.settings = settings
        self.boot_id = boot_id
        # Why a budget keeps owner (or the session, when given) from starting today, or ""
        # (follow/usage.py sets it; a core without usage follows no budget).
        self.over_budget: Callable[[int, Session | None], str] = lambda uid, session: ""

    @contextlib.asynccontextmanager
    async def _locked(self, session: Session) -> AsyncIterator[None]:
        """The session's lock for one whole operation; the waiting is a checkpoint for tests."""
        if session.lock.locked():
            await checkpoint.reached(checkpoint.LOCK_WAIT, session.name)
        async with session.lock:
            if session.removed:
                raise NoSuchSession(f"Session '{session.name}' was removed meanwhile.")
            yield

    @contextlib.asynccontextmanager
    async def _operation(self, session: Session) -> AsyncIterator[None]:
        """The session's lock, then one of its owner's operation slots: calls queued on one
        session's lock hold no slot, so nobody can use up a user's slots by parking them there,
        and one user's slots are not another's (Registry.operation)."""
        async with self._locked(session):
            with self.registry.operation(session.record.owner):
                yield

    # ---- create -------------------------------------------------------------------------

    async def create(
        self,
        owner_uid: int,
        name: str,
        preset_name: str,
        cwd: str,
        req: CreateRequest,
        exempt: bool = False,
    ) -> Session:
        """A new session of owner_uid's (whom the caller may create for, auth decided); exempt
        when the caller may go past the admin's caps (root, or an admin the config allows)."""
        preset, name = check_request(self.registry, self.settings, owner_uid, name, preset_name)
        problem = (
            None
            if exempt
            else quota_problem(self.registry, self.settings.config, owner_uid, req.limits)
        )
        if problem:
            raise LimitsExceeded(f"Session '{name}' was not created: {problem}.")
        check_budget(self.over_budget(owner_uid, None), f"Session '{name}' was not created")
        with self.registry.operation(owner_uid):
            self.registry.reserved[name] = owner_uid
            try:
                record, owner = await first_record(
                    owner_uid, name, preset, cwd, req, self.settings.config,
                    self.registry.paths(owner_uid, name), self.boot_id,
                    self.scopes.find_program,
                )  # fmt: skip
                new_branch = False
                if req.worktree is not None:
                    setup = preset.worktree_setup or self.settings.config.worktrees_setup
                    record, new_branch = await worktree.attach(
                        record, owner, req.worktree, req.base,
                        self.settings.config.worktrees_dir, setup,
                    )  # fmt: skip
                # The owner was looked up once for the checks: NSS can cost a round trip.
                session = self.registry.add(record, owner)
            finally:
                self.registry.reserved.pop(name, None)
            async with session.lock:
                try:
                    self.registry.store.save(record)
                except OSError as e:
                    del self.registry.sessions[name]
                    await worktree.detach(record, owner, new_branch)
                    raise StorageFull(
                        f"Session '{name}' was not created: its record cannot be written "
                        f"({e.strerror}); {self.registry.store.remedy(e.errno)}, then try again."
                    ) from None
                await checkpoint.reached(checkpoint.CREATE_RECORDED, name)
                log.info("session '%s': created (uuid %s, preset %s, owner %d)",
                         name, record.uuid, preset.name, record.owner)  # fmt: skip
                self.registry.announce_new(session)
                await self._spawn(session, exempt)
        return session

    # ---- spawn --------------------------------------------------------------------------

    async def owner_slice(self, uid: int) -> str:
        """On the system daemon, the slice a user's sessions and helpers go into, with the
        admin's caps of today (root's carries none)."""
        caps = self.settings.config.users.limits if capped(uid) else Limits()
        return await self.scopes.capped_slice(uid, caps)

    async def _spawn(self, session: Session, exempt: bool) -> None:
        """Start the scope for record.last_argv; the caller holds the lock, state is starting.
        exempt: whoever starts it may go past the admin's caps (see _limits_today)."""
        record = session.record
        preset = self.settings.preset(record.preset)
        self.registry.forget_end_causes(session)
        self.registry.store.delete_screen(session.name)
        try:
            owner = session.owner
            prepare_runtime_dir(session.paths.runtime_dir, owner)
            self.conversations.write_hooks(session, preset)
            env = build_env(
                owner,
                {
                    **(preset.env if preset else {}),
                    **self.conversations.hook_env(preset, session),
                },
                record.launch_env(),
                self.registry.system,
            )
            # On the system daemon each user's sessions share a slice carrying their caps.
            caps = self.settings.config.users.limits if capped(owner.uid) else Limits()
            started = await self.scopes.start(
                record,
                owner,
                session.paths.socket,
                env,
                record.limits if exempt else record.limits.within(self.settings.config.limits),
                self.settings.config.stop_timeout_sec,
                self.terminal.prepare(session),
                caps if self.registry.system else None,
            )
            await checkpoint.reached(checkpoint.SPAWN_STARTED, session.name)
        except (SpawnFailed, OSError) as e:
            self._fail(
                session, e.message if isinstance(e, SpawnFailed) else f"Failed to spawn: {e}"
            )
        try:
            self.registry.change(
                session,
                Event.STARTED,
                leader_pid=started.leader_pid,
                invocation_id=started.invocation_id,
                started_at=started.started_at,
                started_boottime=started.started_boottime,
                dormant_reason=DormantReason.NONE,
                last_error="",
                result="",
                exit_status=0,
                exit_signal=0,
                containment="",
            )
        except StorageFull as e:
            # A create is not reported done before its record is: nothing may run that the
            # disk does not know of.
            await self._stop_scope(session)
            self._fail(session, e.message)
        self.reconciler.endings.follow(session, started.pane_pid)
        if not record.leader_pid:
            # tmux was already gone from the scope: the agent exited at once. A server that
            # was found running will be followed by the unit's own signals.
            self.reconciler.queue(session)

    def _fail(self, session: Session, error: str) -> NoReturn:
        """A start failed: the session is failed with LastError; its ids are kept. The caller
        gets SpawnFailed (ResumeFailed for a resume), or StorageFull when even that cannot be
        written."""
        log.error("session '%s': %s", session.name, error)
        # "resources": systemd's word for a start that could not be set up.
        if not self.registry.change(
            session, Event.START_FAILED, last_error=error, result="resources"
        ):
            raise StorageFull(
                f"Session '{session.name}' failed to start ({error}), and its record cannot "
                f"be written; {self.registry.store.remedy()}, then try again."
            )
        # A resume's failure has a name of its own, so a client can tell the two apart.
        failed = ResumeFailed if session.record.resume_count else SpawnFailed
        raise failed(f"Session '{session.name}' failed to start: {error}")

    # ---- stop, resume, kill, remove -----------------------------------------------------

    # Each takes the Session the caller was authorized for, never a name to look up again.

    async def stop(self, session: Session) -> None:
        check_not_stopping(session)
        async with self._operation(session):
            if session.record.state not in (State.RUNNING, State.STARTING):
                raise NotRunning(
                    f"Session '{session.name}' is {session.record.state.value}, not running."
                )
            await self._stop_locked(session)

    async def _stop_locked(self, session: Session) -> None:
        self.registry.change(session, Event.STOP)
        await checkpoint.reached(checkpoint.STOP_RECORDED, session.name)
        try:
            await self._stop_scope(session)
        except StopFailed:
            if await self._unit_alive(session):
                # The session is what systemd says: still running.
                self.registry.change(session, Event.ADOPT)
                raise
        await checkpoint.reached(checkpoint.STOP_DONE, session.name)
        await self.reconciler.endings.finish(session)

    async def _stop_scope(self, session: Session) -> None:
        await self._look_last(session)
        await self.scopes.stop(session.record.unit, self.settings.config.stop_timeout_sec + 30)

    @staticmethod
    async def _look_last(session: Session) -> None:
        """The screen as it is before a stop or kill takes the terminal with it: the one the
        ended session shows (ending.py keeps it)."""
        if session.watch is not None:
            await session.watch.look_now()

    async def _unit_alive(self, session: Session) -> bool:
        """Whether systemd still has the session's unit; when systemd cannot say, assume so
        and reconcile once it can."""
        try:
            return await self.scopes.systemd.active_state(session.record.unit) not in GONE_STATES
        except SystemdError:
            self.reconciler.queue(session)
            return True

    async def resume(self, session: Session, exempt: bool | None = None) -> None:
        """Start a stopped session again. Every start gets the admin's caps of today (a
        session made before they were lowered gets the lower ones; its record keeps what it
        asked, so caps raised again give it back), unless exempt: the caller may go past them.
        With no caller (an automatic resume), the owner's standing decides."""
        if exempt is None:
            exempt = exempt_from_caps(session.record.owner, self.registry.system)
        check_not_stopping(session)
        # Answered before waiting for the lock: a resume that is under way has already
        # committed starting, so a second one fails at once instead of queueing behind it.
        check_resumable(session)
        async with self._operation(session):
            check_resumable(session)
            check_budget(
                self.over_budget(session.record.owner, session), f"Session '{session.name}'"
            )
            await self._resume_locked(session, exempt)

    async def stop_for_budget(self, session: Session, why: str) -> None:
        """Stop a session whose turn ended over a budget: dormant, reason budget (budgets.py)."""
        async with self._operation(session):
            if session.record.state is not State.RUNNING:
                return
            log.info("session '%s': stopped at its turn's end: %s", session.name, why)
            await self._stop_locked(session)
            if session.record.state.value == State.STOPPED.value:  # not failed on the way
                self.registry.change(
                    session,
                    Event.OVER_BUDGET,
                    dormant_reason=DormantReason.BUDGET,
                    last_error=f"Stopped at its turn's end: {why}.",
                )

    async def _resume_locked(self, session: Session, exempt: bool) -> None:
        record = session.record
        preset = self.settings.preset(record.preset) or Preset(name=record.preset)
        owner = session.owner
        plan = await resumeplan.plan(
            session,
            preset,
            self.conversations,
            self.scopes.find_program,
            self.scopes.systemd.started_usec,
        )
        log.info(
            "session '%s': resuming (%s)",
            session.name,
            "fresh conversation" if plan.fresh else f"conversation {plan.agent_session}",
        )
        self.registry.change(
            session,
            Event.START,
            last_argv=plan.argv,
            resume_count=record.resume_count + 1,
            boot_id=self.boot_id,
            auto_resume=False,
            hook_token=secrets.token_hex(16),
        )
        await checkpoint.reached(checkpoint.RESUME_RECORDED, session.name)
        problem = await check_cwd(owner, record.cwd)
        if problem:
            self._fail(
                session,
                f"Working directory '{record.cwd}' {problem}; "
                f"create it, or remove the session with 'hostagentctl rm {session.name}'",
            )
        await self._spawn(session, exempt)

    async def kill(self, session: Session, whom: str, signal: int) -> None:
        # whom and signal were checked by the caller (check_signal), as every argument is
        # checked once, where the call is read.
        async with self._locked(session):
            if session.record.state not in LIVE_STATES:
                raise NotRunning(
                    f"Session '{session.name}' is {session.record.state.value}, not running."
                )
            if whom == "all":
                await self._look_last(session)
                self.registry.killed(session, signal)
            await self.scopes.kill(
                session.record, session.owner, session.paths.socket, whom, signal
            )

    async def remove(self, session: Session, force: bool = False) -> str:
        """Stop and forget the session; its worktree goes too when it is clean (or force).
        A note for the caller when something was kept."""
        async with self._operation(session):
            if session.record.state in LIVE_STATES:
                await self._stop_locked(session)
                await checkpoint.reached(checkpoint.REMOVE_STOPPED, session.name)
            self.registry.forget(session)
            self.registry.store.delete_screen(session.name)
            remove_socket(session.paths.socket)
            self.conversations.remove_hooks(session)
            note = await worktree.remove_of(session.owner, session.record, force)
            if note:
                log.info("session '%s': %s", session.name, note)
            return note

    async def diff(self, session: Session, stat: bool) -> str:
        if session.removed:
            raise NoSuchSession(f"Session '{session.name}' was removed meanwhile.")
        record = session.record
        if not record.worktree:
            raise WorktreeFailed(f"Session '{session.name}' has no worktree of its own to diff.")
        return await worktree.diff(session.owner, record.worktree, record.base_ref, stat)
