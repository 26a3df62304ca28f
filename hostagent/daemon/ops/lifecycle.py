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
from typing import Unpack

from hostagent.daemon.follow.conversations.conversation import FORKED, Conversations
from hostagent.daemon.follow.hooks.agenthooks import AgentHooks
from hostagent.daemon.follow.terminal import Terminal
from hostagent.daemon.host import checkpoint
from hostagent.daemon.host.ports import OwnerPort, ScopeRunner, WorktreePort
from hostagent.daemon.host.runtimedir import remove_session_dir
from hostagent.daemon.host.systemd import SystemdError
from hostagent.daemon.host.tmux import remove_socket
from hostagent.daemon.host.worktree import Worktree
from hostagent.daemon.ops import resumeplan
from hostagent.daemon.ops.admission import (
    Admission,
    admit,
    check_budget,
    check_free,
    check_not_stopping,
    check_resumable,
    first_record,
)
from hostagent.daemon.ops.ending import Endings
from hostagent.daemon.ops.reconcile import GONE_STATES, Reconciler
from hostagent.daemon.ops.spawn import Spawner, look_last
from hostagent.daemon.state.creates import PendingCreate, PendingCreates
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.errors import (
    LimitsExceeded,
    NoSuchSession,
    NotRunning,
    StopFailed,
    StorageFull,
    WorktreeFailed,
)
from hostagent.identity import Owner
from hostagent.options import CreateRequest
from hostagent.permissions import capped, exempt_from_caps
from hostagent.presets import Preset
from hostagent.session import (
    LIVE_STATES,
    DormantReason,
    Event,
    Limits,
    RecordChange,
    SessionRecord,
    State,
)

log = logging.getLogger(__name__)


class Lifecycle:
    def __init__(
        self,
        registry: Registry,
        scopes: ScopeRunner,
        owners: OwnerPort,
        worktrees: WorktreePort,
        terminal: Terminal,
        conversations: Conversations,
        hooks: AgentHooks,
        endings: Endings,
        reconciler: Reconciler,
        settings: Settings,
        pending: PendingCreates,
        boot_id: str,
        over_budget: Callable[[int, Session | None], str],
    ) -> None:
        """over_budget: why a budget keeps an owner (or the session, when given) from
        starting today, or "" (follow/usage.py's)."""
        self.registry = registry
        self.pending = pending
        self.scopes = scopes
        self.owners = owners
        self.worktrees = worktrees
        self.terminal = terminal
        self.conversations = conversations
        self.hooks = hooks
        self.endings = endings
        self.reconciler = reconciler
        self.settings = settings
        self.boot_id = boot_id
        self.spawner = Spawner(
            registry, scopes, owners, terminal, hooks, endings, reconciler, settings
        )
        self.over_budget = over_budget

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

    def admit(
        self, owner_uid: int, name: str, preset_name: str, limits: Limits, exempt: bool = False
    ) -> Admission:
        """A create's admission (admission.admit), for owner_uid, whom the caller may create
        for (auth decided); exempt when the caller may go past the admin's caps."""
        return admit(self.registry, self.settings, owner_uid, name, preset_name, limits, exempt)

    async def create(self, admission: Admission, cwd: str, req: CreateRequest) -> Session:
        """A new session, as admitted."""
        owner_uid, name, preset = admission.owner, admission.name, admission.preset
        if admission.over_caps and not admission.exempt:
            raise LimitsExceeded(f"Session '{name}' was not created: {admission.over_caps}.")
        check_budget(self.over_budget(owner_uid, None), f"Session '{name}' was not created")
        req.mcp_server = self.hooks.mcp_server_for(preset, req)
        with self.registry.operation(owner_uid):
            # Reserved from here until the session is registered. A polkit prompt since the
            # admission may have let another create take the name.
            check_free(self.registry, name, owner_uid)
            self.registry.reserved[name] = owner_uid
            try:
                record, owner = await first_record(
                    owner_uid,
                    name,
                    preset,
                    cwd,
                    req,
                    self.settings,
                    self.registry.paths(owner_uid, name),
                    self.boot_id,
                    self.owners,
                )
                tree = None
                if req.worktree is not None:
                    tree = await self._worktree(record, owner, req, preset)
                    record = self.worktrees.attached(record, tree)
                # The owner was looked up once for the checks: NSS can cost a round trip.
                session = self.registry.new_session(record, owner)
                try:
                    async with session.lock:
                        await self.spawner.spawn(
                            session, admission.exempt, lambda: self._record_new(session, preset)
                        )
                except BaseException:
                    if name not in self.registry.sessions:  # never recorded: nothing of it stays
                        self.terminal.unwatch(session)
                        self.hooks.remove_hooks(session)
                        if tree is not None:
                            await self.worktrees.discard(owner, tree)
                            self.pending.done(name)
                    raise
            finally:
                self.registry.reserved.pop(name, None)
        return session

    async def _record_new(self, session: Session, preset: Preset) -> None:
        """The new session's first record written (state starting), then the session
        registered and announced: while systemd starts its scope, and before anything of the
        session runs, so nothing runs that the disk does not know of."""
        record = session.record
        self.registry.enroll(session)
        if record.worktree:
            self.pending.done(record.name)  # the record names the worktree from here on
        log.info(
            "session '%s': created (uuid %s, preset %s, owner %d)",
            record.name,
            record.uuid,
            preset.name,
            record.owner,
        )
        await checkpoint.reached(checkpoint.CREATE_RECORDED, record.name)

    async def _worktree(
        self, record: SessionRecord, owner: Owner, req: CreateRequest, preset: Preset
    ) -> Worktree:
        """The new session's worktree, made; noted on disk before anything of it is, so that
        a crash from here to the first record leaves nothing the next start cannot collect
        (state/creates.py)."""
        config = self.settings.config
        assert req.worktree is not None
        tree = await self.worktrees.plan(
            owner, record.cwd, record.name, req.worktree, req.base, config.worktrees_dir
        )
        pending = PendingCreate(
            record.name,
            owner.uid,
            tree.path,
            tree.repo,
            tree.branch,
            tree.base_ref,
            tree.new_branch,
        )
        try:
            await self.pending.note(pending)
        except OSError as e:
            raise StorageFull(
                f"Session '{record.name}' was not created: its worktree cannot be noted in "
                f"the state directory ({e.strerror}); {self.registry.store.remedy(e.errno)}, "
                "then try again."
            ) from None
        try:
            await self.worktrees.make(owner, tree, preset.worktree_setup or config.worktrees_setup)
        except BaseException:
            self.pending.done(record.name)  # make undid itself
            raise
        return tree

    async def owner_slice(self, uid: int) -> str:
        """On the system daemon, the slice a user's sessions and helpers go into, with the
        admin's caps of today (root's carries none)."""
        caps = self.settings.config.users.limits if capped(uid) else Limits()
        return await self.scopes.capped_slice(uid, caps)

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

    async def _stop_locked(self, session: Session, **why: Unpack[RecordChange]) -> None:
        """The stop, under the lock: stopping written (with why, a budget's), the scope
        stopped, the end recorded."""
        before: RecordChange = {
            "dormant_reason": session.record.dormant_reason,
            "last_error": session.record.last_error,
        }
        self.registry.change(session, Event.STOP, **why)
        await checkpoint.reached(checkpoint.STOP_RECORDED, session.name)
        try:
            await self.spawner.stop_scope(session)
        except StopFailed:
            if await self._unit_alive(session):
                # The session is what systemd says: still running, as it was.
                self.registry.change(session, Event.ADOPT, **(before if why else {}))
                raise
        await checkpoint.reached(checkpoint.STOP_DONE, session.name)
        await self.endings.finish(session)

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
            # The intent is written with the stop: whatever ends it (this stop, or recovery
            # after a crash), a clean end leaves it dormant for the budget (Endings.finish).
            await self._stop_locked(
                session,
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
            self.owners,
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
            # A CLI that resumes into a copy under a new id: the id is looked for again.
            agent_session_source=(
                FORKED if preset.resume_forks and not plan.fresh else record.agent_session_source
            ),
        )
        await checkpoint.reached(checkpoint.RESUME_RECORDED, session.name)
        problem = await self.owners.check_cwd(owner, record.cwd)
        if problem:
            self.spawner.fail(
                session,
                f"Working directory '{record.cwd}' {problem}; "
                f"create it, or remove the session with 'hostagentctl rm {session.name}'",
            )
        await self.spawner.spawn(session, exempt)

    async def kill(self, session: Session, whom: str, signal: int) -> None:
        # whom and signal were checked by the caller (check_signal), as every argument is
        # checked once, where the call is read.
        async with self._locked(session):
            if session.record.state not in LIVE_STATES:
                raise NotRunning(
                    f"Session '{session.name}' is {session.record.state.value}, not running."
                )
            if whom == "all":
                await look_last(session)
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
            return await self.forget(session, force)

    async def forget(self, session: Session, force: bool = False) -> str:
        """The tail of every removal (a Remove, recovery's prune): the record and the screen,
        the socket and the hooks file go, and the worktree when it is clean (or force). A note
        when something was kept. The caller holds the lock, or is recovery."""
        self.registry.forget(session)
        self.registry.store.delete_screen(session.name)
        remove_socket(session.paths.socket)
        self.hooks.remove_hooks(session)
        remove_session_dir(session.paths, session.name)
        try:
            note = await self.worktrees.remove_of(session.owner, session.record, force)
        except KeyError:  # the owner no longer exists: nobody to run git as
            note = f"its worktree {session.record.worktree} was kept: its owner no longer exists"
        if note:
            log.info("session '%s': %s", session.name, note)
        return note

    async def diff(self, session: Session, stat: bool) -> str:
        if session.removed:
            raise NoSuchSession(f"Session '{session.name}' was removed meanwhile.")
        record = session.record
        if not record.worktree:
            raise WorktreeFailed(f"Session '{session.name}' has no worktree of its own to diff.")
        return await self.worktrees.diff(
            session.owner, record.repo, record.worktree, record.base_ref, stat
        )
