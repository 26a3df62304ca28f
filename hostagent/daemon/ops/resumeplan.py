"""What a resume runs: the program found again if it moved, the conversation's state found as
the owner, then launch's pure decision (launch.resume_launch has the table)."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

from hostagent import launch
from hostagent.daemon.follow.conversations import transcript
from hostagent.daemon.follow.conversations.conversation import Conversations
from hostagent.daemon.follow.hooks.agenthooks import command_with_hooks, mcp_server
from hostagent.daemon.host import agents
from hostagent.daemon.host.ports import OwnerPort
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.errors import AgentNotFound
from hostagent.identity import Owner
from hostagent.presets import Preset
from hostagent.session import DormantReason

log = logging.getLogger(__name__)


FindProgram = Callable[[Owner, str], Awaitable[agents.Found]]
ManagerStarted = Callable[[], Awaitable[int]]


async def plan(
    session: Session,
    preset: Preset,
    conversations: Conversations,
    owners: OwnerPort,
    manager_started: ManagerStarted,
) -> launch.Launch:
    """The resume's command line; the caller holds the session's lock. An assigned id the CLI
    will not take again is replaced here (the old one kept in the record's history)."""
    record = session.record
    owner = session.owner
    if record.dormant_reason is DormantReason.REBOOT:
        # The end of each run follows its rotations; a run a reboot ended had no end. Its last
        # conversation is the newest it wrote before this boot: what came after is not its.
        await conversations.discover(session, await manager_started())
    elif not record.agent_session or session.settling:
        # Otherwise only an id never learned is looked for, or the last run's, when the
        # lookup that follows its end has not been recorded yet: a newer conversation in the
        # same cwd may be another session's.
        await conversations.discover(session)
    command = await program_again(session, owners.find_program, conversations.registry)
    env = owners.environment(owner, preset.env, record.launch_env())
    state = await transcript.conversation_state(
        owners, preset, owner, record.cwd, env, command[0], record.agent_session
    )
    result = launch.resume_launch(
        preset,
        command_with_hooks(
            preset, command, session.paths, mcp_server(record, conversations.registry.system)
        ),
        record.args,
        record.agent_session,
        state,
    )
    if result.agent_session and result.agent_session != record.agent_session:
        conversations.set_id(
            session, result.agent_session, "assigned", f"the old one is {state.value}"
        )
    return result


async def program_again(session: Session, find: FindProgram, registry: Registry) -> list[str]:
    """The recorded command, with its program looked up again when it is gone from where it
    was found (an nvm or npm upgrade moves it); unchanged when it is not found at all, so the
    start fails in words."""
    command = list(session.record.command)
    if not command or os.access(command[0], os.X_OK):
        return command
    try:
        found = await find(session.owner, os.path.basename(command[0]))
    except AgentNotFound:
        return command
    if found.program:
        log.info("session '%s': %s is now %s", session.name, command[0], found.program)
        command[0] = found.program
        registry.change(session, command=command)
    return command
