"""Starting a session's scope, for a create and for a resume.

What a start needs around the scope itself (the runtime directory, the hooks, the environment,
the terminal's watch) and what it leaves in the record: running with the scope's ids, or
failed with a LastError that says why. The lifecycle calls it under the session's lock, with
the record already saying starting, or, for a new session, with the step that writes the first
record, which runs while systemd starts the scope (Scopes.start's meanwhile).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NoReturn

from hostagent import sandbox
from hostagent.daemon.follow.agenthooks import AgentHooks
from hostagent.daemon.follow.terminal import Terminal
from hostagent.daemon.host import checkpoint, sandboxing
from hostagent.daemon.host.ports import OwnerPort, ScopeRunner
from hostagent.daemon.host.scope import Step
from hostagent.daemon.ops.ending import Endings
from hostagent.daemon.ops.reconcile import Reconciler
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.errors import ResumeFailed, SpawnFailed, StorageFull
from hostagent.permissions import capped
from hostagent.presets import Preset
from hostagent.session import DormantReason, Event, Limits

log = logging.getLogger(__name__)


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
            # On the system daemon each user's sessions share a slice carrying their caps.
            caps = self.settings.config.users.limits if capped(owner.uid) else Limits()
            output = self.terminal.prepare(session)
            state, resolved = await self.cli_state(session, preset)
            trusted = cli_trusted(session, preset)
            if created:
                await checkpoint.reached(checkpoint.CREATE_MADE, session.name)
            started = await self.scopes.start(
                record,
                owner,
                paths,
                env,
                record.limits if exempt else record.limits.within(self.settings.config.limits),
                self.settings.config.stop_timeout_sec,
                output,
                caps if self.registry.system else None,
                first,
                program_found=created,
                state=state,
                resolved=resolved,
                trusted=trusted,
            )
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
            writes = f"; its CLI's state writable: {' '.join(state)}" if state else ""
            writes += f"; its CLI's trusted files not: {' '.join(trusted)}" if trusted else ""
            log.info(
                "session '%s': started confined: %s%s", session.name, " ".join(confined), writes
            )
        self.endings.follow(session, started.pane_pid)
        if not record.leader_pid:
            # tmux was already gone from the scope: the agent exited at once. A server that
            # was found running will be followed by the unit's own signals.
            self.reconciler.queue(session)

    async def cli_state(
        self, session: Session, preset: Preset | None
    ) -> tuple[list[str], dict[str, str]]:
        """Where a sandboxed session's CLI keeps its own state (its preset's paths, from the
        preset and the owner's passwd entry alone, never a creator's environment), with each
        directory of them made first, as the owner: under a read-only home the CLI could not
        make it itself; and every path its sandbox names, as the owner resolves it, so that no
        link carries a mount elsewhere. Nothing for a session with no sandbox."""
        record, owner = session.record, session.owner
        if not sandbox.read(record.properties).confined:
            return [], {}
        try:
            state = sandboxing.cli_state(preset, owner, record.cwd)
            wanted = sandboxing.to_resolve(record.properties, owner, record.cwd, record.repo, state)
        except sandbox.SandboxProblem as e:
            raise SpawnFailed(
                f"Session '{record.name}': its sandbox cannot be made: {e}."
            ) from None
        resolved = await self.owners.resolve(owner, wanted)
        if resolved is None:
            raise SpawnFailed(
                f"Session '{record.name}': its sandbox's paths cannot be resolved as its owner; "
                "check that each is reachable by them."
            )
        directories = [p for p in state if p.endswith("/")]
        if directories:
            made = await self.owners.run(owner, ["/bin/mkdir", "-p", "--", *directories])
            if made is None or made[0] != 0:
                log.warning("session '%s': could not make %s", session.name, " ".join(directories))
        return state, resolved

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


def cli_trusted(session: Session, preset: Preset | None) -> list[str]:
    """The files of a sandboxed session's CLI that name commands it runs (sandboxing's
    cli_trusted): read-only in its sandbox. Nothing for a session with no sandbox, or when its
    preset's are not paths in the home (then its state could not be made either)."""
    record = session.record
    if not sandbox.read(record.properties).confined:
        return []
    try:
        return sandboxing.cli_trusted(preset, session.owner, record.cwd)
    except sandbox.SandboxProblem:
        return []


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
