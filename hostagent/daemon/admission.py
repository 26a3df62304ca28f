"""What a create must pass before anything of the session exists, and its first record.

Every create-time rule about the request itself lives here: the owner exists, the cwd is
absolute and usable *as the owner*, the command line and environment fit the exec limits, and
the caller's limits are laid over the configured ones. The lifecycle calls it with the name
already checked and reserved, and writes the record it returns before starting anything.
"""

from __future__ import annotations

import os
import secrets
import uuid

from hostagent import launch
from hostagent.config import Config
from hostagent.daemon.conversation import Conversations
from hostagent.daemon.owner import Owner, check_cwd
from hostagent.daemon.registry import SessionPaths
from hostagent.daemon.scope import now_usec
from hostagent.errors import InvalidArgs, InvalidCwd, quote
from hostagent.options import CreateRequest, size_problem
from hostagent.presets import Preset
from hostagent.session import SessionRecord, State, unit_name


async def first_record(
    owner_uid: int,
    name: str,
    preset: Preset,
    cwd: str,
    req: CreateRequest,
    config: Config,
    paths: SessionPaths,
    boot_id: str,
) -> tuple[SessionRecord, Owner]:
    """The record of a new session, state starting, and its owner; a named error for the
    first thing wrong with the request."""
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
        preset, Conversations.command_with_hooks(preset, command, paths), req.args, agent_id
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
        limits=req.limits.merged_over(config.limits),
        columns=req.columns or config.columns,
        rows=req.rows or config.rows,
        agent_session=agent_id,
        agent_session_source=("assigned" if agent_id else ""),
        unit=unit_name(name),
        boot_id=boot_id,
        created_at=now_usec(),
        state=State.STARTING,
        hook_token=secrets.token_hex(16),
    )
    return record, owner
