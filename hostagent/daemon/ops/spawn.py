"""Starting a session's scope, for a create and for a resume.

What a start needs around the scope itself (the runtime directory, the hooks, the environment,
the terminal's watch) and what it leaves in the record: running with the scope's ids, or
failed with a LastError that says why. The lifecycle calls it under the session's lock, with
the record already saying starting, or, for a new session, with the step that writes the first
record, which runs while systemd starts the scope: between Scopes.begin and Scopes.release.
Everything the start is given is decided here, in one StartPlan.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn

from hostagent import sandbox
from hostagent.daemon.follow.hooks.agenthooks import AgentHooks
from hostagent.daemon.follow.terminal import Terminal
from hostagent.daemon.host import checkpoint
from hostagent.daemon.host.owner import DEFAULT_PATH
from hostagent.daemon.host.ports import OwnerPort, ScopeRunner
from hostagent.daemon.host.scope import SLICE, StartPlan
from hostagent.daemon.ops.ending import Endings
from hostagent.daemon.ops.reconcile import Reconciler
from hostagent.daemon.ops.sandboxstart import (
    SandboxRefused,
    SandboxStart,
    make_state,
    sandbox_start,
)
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.paths import SessionPaths
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.errors import ResumeFailed, SpawnFailed, StorageFull
from hostagent.identity import Owner
from hostagent.permissions import capped
from hostagent.presets import Preset
from hostagent.session import DormantReason, Event, Limits

log = logging.getLogger(__name__)

Step = Callable[[], Awaitable[None]]  # a new session's record, written while its scope starts


@dataclass
class Spawner:
    """A start's steps, over the lifecycle's own collaborators."""

    registry: Registry
    scopes: ScopeRunner
    owners: OwnerPort
    terminal: Terminal
    hooks: AgentHooks
    endings: Endings
    reconciler: Reconciler
    settings: Settings

    async def spawn(
        self,
        session: Session,
        exempt: bool,
        first: Step | None = None,
    ) -> None:
        """Start the scope for record.last_argv; the caller holds the lock, state is starting.
        exempt: whoever starts it may go past the admin's caps (see Lifecycle.resume).
        first: a new session's record step (Lifecycle._record_new), run once, while systemd
        starts the scope, or before a failure to start is recorded."""
        created = first is not None  # a create's admission found the program just now
        first = _once(first)
        record = session.record
        preset = self.settings.preset(record.preset)
        self.registry.forget_end_causes(session)
        self.registry.settling(session, False)  # a resume looked its conversation up
        self.registry.store.delete_screen(session.name)
        try:
            owner = session.owner
            paths = self.registry.start_paths(session)
            self.owners.prepare_runtime_dir(paths, session.name, owner)
            self.hooks.write_hooks(session, preset)
            env = self.owners.environment(
                owner,
                {**(preset.env if preset else {}), **self.hooks.hook_env(preset, session)},
                record.launch_env(),
            )
            if not created:  # a create's admission found the program just now
                await self.check_program(session, env)
            output = self.terminal.prepare(session)
            boxed = await self.sandbox(session, preset, paths)
            plan = StartPlan(
                env,
                record.limits if exempt else record.limits.within(self.settings.config.limits),
                self.settings.config.stop_timeout_sec,
                await self.slice(owner),
                output,
                boxed.plan,
            )
            if created:
                await checkpoint.reached(checkpoint.CREATE_MADE, session.name)
            begun = await self.scopes.begin(record, owner, paths, plan)
            try:
                await first()  # while systemd starts the scope, before anything of it runs
            except BaseException:
                await self.scopes.abandon(begun)
                raise
            started = await self.scopes.release(record, begun)
            await checkpoint.reached(checkpoint.SPAWN_STARTED, session.name)
        except (SpawnFailed, OSError) as e:
            await first()  # a failed create is a failed session, with its LastError
            self.fail(session, e.message if isinstance(e, SpawnFailed) else f"Failed to spawn: {e}")
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
            # disk does not know of. The caller hears why once: the record could not be written.
            await self.stop_scope(session)
            log.error("session '%s': %s", session.name, e.message)
            self.registry.change(
                session, Event.START_FAILED, last_error=e.message, result="resources"
            )
            raise
        confined = sandbox.read(record.properties).shown()
        if confined:
            state, trusted = " ".join(boxed.state), " ".join(boxed.trusted)
            writes = f"; its CLI's state writable: {state}" if state else ""
            writes += f"; its CLI's trusted files not: {trusted}" if trusted else ""
            log.info(
                "session '%s': started confined: %s%s", session.name, " ".join(confined), writes
            )
        self.endings.follow(session, started.pane_pid)
        if not record.leader_pid:
            # tmux was already gone from the scope: the agent exited at once. A server that
            # was found running will be followed by the unit's own signals.
            self.reconciler.queue(session)

    async def check_program(self, session: Session, env: dict[str, str]) -> None:
        """A missing program is said before anything starts, in words, not as a pane that
        dies: it may have gone since the session was created."""
        program = session.record.last_argv[0]
        path = env.get("PATH", DEFAULT_PATH)
        problem = await self.owners.program_problem(session.owner, program, path)
        if problem:
            raise SpawnFailed(f"{problem}; install it, or change the preset's command")

    async def sandbox(
        self, session: Session, preset: Preset | None, paths: SessionPaths
    ) -> SandboxStart:
        """The sandbox this start makes (sandboxstart.py), its CLI's state made first."""
        record, owner = session.record, session.owner
        try:
            boxed = await sandbox_start(record, owner, preset, paths, self.owners)
        except SandboxRefused as e:
            raise SpawnFailed(e.message) from None
        await make_state(session.name, owner, boxed, self.owners)
        return boxed

    async def slice(self, owner: Owner) -> str:
        """On the system daemon each user's sessions share a slice carrying their caps."""
        if not self.registry.system:
            return SLICE
        caps = self.settings.config.users.limits if capped(owner.uid) else Limits()
        return await self.scopes.capped_slice(owner.uid, caps)

    def fail(self, session: Session, error: str) -> NoReturn:
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

    async def stop_scope(self, session: Session) -> None:
        await look_last(session)
        await self.scopes.stop(session.record.unit, self.settings.config.stop_timeout_sec + 30)


async def look_last(session: Session) -> None:
    """The screen as it is before a stop or kill takes the terminal with it: the one the
    ended session shows (ending.py keeps it)."""
    if session.watch is not None:
        await session.watch.look_now()


def _once(step: Step | None) -> Step:
    """step, to be awaited at most once whoever asks (none: nothing to do)."""
    pending = [step] if step is not None else []

    async def run() -> None:
        if pending:
            await pending.pop()()

    return run
