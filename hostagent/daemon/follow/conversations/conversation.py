"""Keeping each session's agent conversation id current.

An id is assigned up front where the CLI takes one (``launch``). Otherwise it is learned from
the CLI's lifecycle hooks (agenthooks.py hands their ids here), which also report rotations
such as Claude's ``/clear``, or found on disk (``discovery``): while the session runs, each
time it goes idle without an id (a turn ended, or the agent's first prompt) and a few seconds
after a line is sent into it, after each run's end (off the lock), and before a resume. Whatever the source,
the newest id wins and the ones it replaced are kept in the record's history, so a resume
continues the conversation the user last saw. A CLI whose resume goes on in a copy under a new
id (Continue's ``--fork``, ``resume.forks``) is looked for the same way until the copy is found.
"""

from __future__ import annotations

import logging

from hostagent.daemon.follow.conversations import discovery, transcript
from hostagent.daemon.host.ports import OwnerPort
from hostagent.daemon.state.background import Background
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.session import (
    LIVE_STATES,
    Activity,
    RecordChange,
    SessionRecord,
    State,
    boot_usec,
    now_usec,
)

log = logging.getLogger(__name__)

HISTORY = 16  # earlier conversation ids kept per session
# The source of an id a run was resumed from where the CLI goes on in a copy of it under a new
# id (``resume.forks``): until discovery finds the copy, it is looked for as if there were none.
FORKED = "forked"


def looking(record: SessionRecord) -> bool:
    """Whether a running session's conversation is still to be found on disk."""
    return not record.agent_session or record.agent_session_source == FORKED


class Conversations:
    def __init__(
        self, registry: Registry, settings: Settings, background: Background, owners: OwnerPort
    ) -> None:
        self.registry = registry
        self.owners = owners
        self.settings = settings
        self.background = background
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
        if now is Activity.IDLE and before is not Activity.IDLE:
            self.look_soon(session)

    def look_soon(self, session: Session) -> None:
        """Look for the conversation of a running session that has none yet, off the lock:
        at each change into idle, and a few seconds after a line was sent into it (a turn too
        quick to be seen working never changes into idle; usage/__init__.py's timer calls this)."""
        record = session.record
        if (
            session.removed
            or record.state is not State.RUNNING
            or not looking(record)
            or session.name in self._looking
        ):
            return
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
                if not session.removed and record.state is State.RUNNING and looking(record):
                    self.set_id(session, found, "discovered", "")
        finally:
            self._looking.discard(session.name)

    def set_id(
        self, session: Session, agent_id: str, how: str, why: str, flood: bool = False
    ) -> None:
        """Make agent_id the session's conversation; the caller holds the session lock. In a
        flood of hooks (hookflow.py) it is neither logged nor written at once: the newest id
        of each second is (Registry.change_soon)."""
        fields = self.id_fields(session, agent_id, how, why, quiet=flood)
        if fields and flood:
            self.registry.change_soon(session, **fields)
        elif fields:
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
        env = self.owners.environment(session.owner, preset.env, record.launch_env())
        looked = (self.owners, preset.discover, session.owner, record.cwd, since, claimed, env)
        if preset.discover.command or preset.discover.database:
            command = (
                transcript.with_program(list(preset.discover.command), preset, record.command[0])
                if preset.discover.command
                else discovery.database_listing(
                    preset.discover, session.owner.home, record.cwd, env
                )
            )
            found = await discovery.discover_listed(*looked, command, until_usec)
        else:
            found = await discovery.discover(*looked, until_usec)
        return found or ""


def ended_run(session: Session, run: int) -> bool:
    """Whether session is still as the end of its run (stop time run) left it: not removed,
    not started again."""
    record = session.record
    return not session.removed and record.state not in LIVE_STATES and record.stopped_at == run
