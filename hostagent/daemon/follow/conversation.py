"""Keeping each session's agent conversation id current.

An id is assigned up front where the CLI takes one (``launch``). Otherwise it is learned from
the CLI's lifecycle hooks, which also report rotations such as Claude's ``/clear``, or found on
disk (``discovery``): while the session runs, each time it goes idle without an id (a turn
ended, or the agent's first prompt), and again when it ends or resumes. Whatever the source,
the newest id wins and the ones it replaced are kept in the record's history, so a resume
continues the conversation the user last saw.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from hostagent import activity
from hostagent.daemon.follow import discovery, hookpipe, hooks, transcript
from hostagent.daemon.follow.hookflow import HookFlow
from hostagent.daemon.host.owner import build_env
from hostagent.daemon.state.background import Background
from hostagent.daemon.state.paths import PANE_DIED, SessionPaths
from hostagent.daemon.state.registry import Registry, Session
from hostagent.daemon.state.settings import Settings
from hostagent.permissions import TOKEN_ENV, token_matches
from hostagent.presets import Preset
from hostagent.session import LIVE_STATES, Activity, RecordChange, State, boot_usec, now_usec

log = logging.getLogger(__name__)

HISTORY = 16  # earlier conversation ids kept per session


class Conversations:
    def __init__(self, registry: Registry, settings: Settings, background: Background) -> None:
        self.registry = registry
        self.settings = settings
        self.background = background
        self.pipes: dict[int, hookpipe.HookPipe] = {}
        self.flow = HookFlow(self.report_hook, background)
        # Told when a line says a session's pane died (tmux's hook; ending.py verifies it).
        self.on_pane_died: Callable[[Session], None] = lambda session: None
        self._activity: dict[str, Activity] = {}  # as last announced, to see a turn end
        self._looking: set[str] = set()  # sessions whose id is being looked for on disk

    # ---- Listener: an id learned while the session runs ---------------------------------

    def session_added(self, session: Session) -> None:
        pass

    def session_removed(self, session: Session) -> None:
        self._activity.pop(session.name, None)

    def session_changed(self, session: Session) -> None:
        now, before = session.activity, self._activity.get(session.name)
        self._activity[session.name] = now
        record = session.record
        if (
            now is Activity.IDLE
            and before is not Activity.IDLE
            and record.state is State.RUNNING
            and not record.agent_session
            and session.name not in self._looking
        ):
            preset = self.settings.preset(record.preset)
            if preset is not None and preset.discover is not None:
                self._looking.add(session.name)
                self.background.start(
                    self._learn(session), f"look for session '{session.name}''s conversation"
                )

    async def _learn(self, session: Session) -> None:
        """Look on disk, without the session's lock (a CLI's own listing can take a while),
        and take what was found under it, unless the session has since changed course."""
        try:
            found = await self.find(session)
            if not found:
                return
            async with session.lock:
                record = session.record
                if (
                    not session.removed
                    and record.state is State.RUNNING
                    and not record.agent_session
                ):
                    self.set_id(session, found, "discovered", "")
        finally:
            self._looking.discard(session.name)

    @staticmethod
    def command_with_hooks(preset: Preset, command: list[str], paths: SessionPaths) -> list[str]:
        """The command with the preset's hook arguments, which name the session's hooks file."""
        path = str(paths.hooks_file)
        return list(command) + [a.replace("{hooks_file}", path) for a in preset.hooks_args]

    def hooks_path(self, preset: Preset, session: Session) -> Path | None:
        """Where the session's hooks file goes; None when the CLI would not read it.

        Gemini CLI reads a system-defaults file only when it and every directory above it
        belong to root and nobody else may write them, so its file goes to a root-owned
        directory of the system daemon's; a user's daemon cannot make one, and Gemini's
        sessions there are read from the screen alone."""
        if preset.hooks_format not in hooks.ROOT_OWNED_FORMATS:
            return session.paths.hooks_file
        if not self.registry.system or os.geteuid() != 0:
            return None
        return hooks.root_hooks_file(self.registry.runtime_root, session.name)

    def hook_env(self, preset: Preset | None, session: Session) -> dict[str, str]:
        """Environment that points the CLI at the session's hooks file (Gemini, Qwen), and
        the secret its hooks' reports carry (tmux's pane-died hook carries it too)."""
        path = preset and preset.hooks_format and self.hooks_path(preset, session)
        if preset is None or not path:
            return {TOKEN_ENV: session.record.hook_token}
        env = {k: v.replace("{hooks_file}", str(path)) for k, v in preset.hooks_env.items()}
        return {**env, TOKEN_ENV: session.record.hook_token}

    def write_hooks(self, session: Session, preset: Preset | None) -> None:
        """(Re)write the session's hooks file before each start; /run does not survive a boot.
        The owner's FIFO is read for every session: tmux reports a pane's end through it."""
        self.open_pipe(session)
        path = preset and preset.hooks_format and self.hooks_path(preset, session)
        if preset is None or not path:
            return
        command = hookpipe.hook_command(
            session.paths.runtime_dir, session.name, self.registry.system
        )
        hooks.write_settings(
            path,
            hooks.settings(preset.hooks_format, command, _admin_defaults(preset.hooks_defaults)),
        )

    def remove_hooks(self, session: Session) -> None:
        self.flow.forget(session.name)
        root_owned = hooks.ROOT_HOOKS_DIR + "/" + session.name + ".json"
        for path in (session.paths.hooks_file, self.registry.runtime_root / root_owned):
            with contextlib.suppress(OSError):
                os.unlink(path)

    # ---- the hooks FIFO -----------------------------------------------------------------

    def open_pipe(self, session: Session) -> None:
        """Read the hooks FIFO of the session's owner (once per owner; made again when it
        was removed or replaced since)."""
        uid = session.record.owner
        if uid in self.pipes:
            if self.pipes[uid].intact():
                return
            log.warning("The hooks FIFO of user %d was removed or replaced; making it again", uid)
            self.pipes.pop(uid).close()
        pipe = hookpipe.HookPipe(session.owner, session.paths.runtime_dir, self._on_line)
        pipe.open()
        self.pipes[uid] = pipe

    def open_pipes(self) -> None:
        """After recovery: the FIFOs of every owner with running sessions."""
        for session in list(self.registry.sessions.values()):
            if session.record.state is State.RUNNING:
                try:
                    self.open_pipe(session)
                except (OSError, KeyError) as e:
                    log.warning("session '%s': cannot read its hooks: %s", session.name, e)

    def _on_line(self, uid: int, fields: list[str]) -> None:
        """A line from uid's FIFO: believed only with the session's own token."""
        name, token, event, agent_id, source, subtype = fields
        session = self.registry.sessions.get(name)
        if (
            session is None
            or session.removed
            or session.record.owner != uid
            or not token_matches(token, session.record.hook_token)
            or hooks.event_problem(event)
        ):
            log.debug("Ignoring a hook line for %r from uid %d", name, uid)
            return
        if event == PANE_DIED:
            self.on_pane_died(session)
            return
        data: dict[str, object] = {
            "session_id": agent_id,
            "source": source,
            "notification_type": subtype,
        }
        self.flow.offer(session, event, data)

    async def report_hook(
        self, session: Session, event: str, data: dict[str, object], flood: bool = False
    ) -> None:
        """A hook of the agent reports event (from inside the session: auth checked that).
        In a flood (hookflow.py) a new conversation id is not logged: the flood was, once."""
        report = hooks.read_report(event, data)
        async with session.lock:
            if session.removed:
                return
            self.registry.heard(session, report)
            if report.agent_session:
                self.set_id(session, report.agent_session, "hook", report.source, quiet=flood)
            preset = self.settings.preset(session.record.preset)
            verdict = preset and activity.hook_verdict(preset.activity, event, report.subtype)
            if verdict and session.watch is not None:
                session.watch.report_hook(verdict)
            # Heard even when the activity it reports is the one shown: a turn too quick to be
            # seen working still ended (follow/usage.py reads its usage then).
            self.registry.announce(session)

    def set_id(
        self, session: Session, agent_id: str, how: str, why: str, quiet: bool = False
    ) -> None:
        """Make agent_id the session's conversation; the caller holds the session lock."""
        fields = self.id_fields(session, agent_id, how, why, quiet)
        if fields:
            self.registry.change(session, **fields)

    def id_fields(
        self, session: Session, agent_id: str, how: str, why: str, quiet: bool = False
    ) -> RecordChange:
        """The record's fields that make agent_id the session's conversation, the one it
        replaces kept in the history; {} when it is the conversation already."""
        record = session.record
        if not agent_id or agent_id == record.agent_session:
            return {}
        history = record.agent_session_history
        say = log.debug if quiet else log.info
        if record.agent_session:
            history = [*history[-(HISTORY - 1) :], record.agent_session]
            say(
                "session '%s': conversation %s -> %s (%s%s)",
                session.name,
                record.agent_session,
                agent_id,
                how,
                f", {why}" if why else "",
            )
        else:
            say("session '%s': conversation %s (%s)", session.name, agent_id, how)
        return {
            "agent_session": agent_id,
            "agent_session_source": how,
            "agent_session_history": history,
        }

    async def discover(self, session: Session, until_usec: int = 0) -> None:
        """Look on disk for the conversation of a preset whose CLI cannot be told an id, and
        make it the session's; the caller holds the session lock."""
        self.set_id(session, await self.find(session, until_usec), "discovered", "")

    async def after_end(self, session: Session, run: int) -> None:
        """A run's end (its stop time run), recorded already: the conversation it ended in,
        looked up off the lock (the end of each run follows the CLI's rotations), taken under
        it unless the session has moved on meanwhile. follow/usage.py does the same with the
        run's usage, in the same change, for a preset that keeps one."""
        found = await self.find(session)
        async with session.lock:
            if ended_run(session, run):
                self.registry.settling(session, False)
                self.set_id(session, found, "discovered", "")

    async def find(self, session: Session, until_usec: int = 0) -> str:
        """The conversation on disk of a preset whose CLI cannot be told an id: the newest
        written since the session's last start, and not after until_usec if set; "" if none."""
        record = session.record
        preset = self.settings.preset(record.preset)
        if preset is None or preset.discover is None:
            return ""
        # A run of this boot is dated on the steady clock too; one a reboot ended is not.
        since = (
            record.started_at
            if until_usec
            else discovery.run_began(
                record.started_at, record.started_boottime, now_usec(), boot_usec()
            )
        )
        claimed = {
            s.record.agent_session
            for s in self.registry.sessions.values()
            if s is not session and s.record.agent_session
        }
        if preset.discover.command:
            env = build_env(session.owner, preset.env, record.launch_env(), self.registry.system)
            command = transcript.with_program(
                list(preset.discover.command), preset, record.command[0]
            )
            found = await discovery.discover_listed(
                preset.discover, session.owner, record.cwd, since, claimed, env, command,
                until_usec,
            )  # fmt: skip
        else:
            found = await discovery.discover(
                preset.discover, session.owner, record.cwd, since, claimed, until_usec
            )
        return found or ""


def _admin_defaults(path: str) -> dict[str, object]:
    """The admin's settings file that ours replaces (a path from the preset, under /etc)."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("Ignoring %s: %s", path, e)
        return {}
    return data if isinstance(data, dict) else {}


def ended_run(session: Session, run: int) -> bool:
    """Whether session is still as the end of its run (stop time run) left it: not removed,
    not started again."""
    record = session.record
    return not session.removed and record.state not in LIVE_STATES and record.stopped_at == run
