"""What a create must pass before anything of the session exists, and its first record.

Every create-time rule lives here, each checked once. ``admit`` takes those that need no I/O
(the preset is known, the name is valid and free, the request is within the admin's caps or
the caller may go past them) and answers with an ``Admission``; the bus handler asks it
before polkit could prompt anyone, and the lifecycle creates from that value. ``first_record``
then checks, as the owner, what needs the host (the owner exists, the cwd is absolute and
usable, the program is found, the command line and environment fit the exec limits) and lays
the caller's limits over the configured ones; the lifecycle writes the record it returns
before starting anything.
"""

from __future__ import annotations

import logging
import os
import secrets
import uuid
from dataclasses import dataclass, replace

from hostagent import launch
from hostagent.config import Config, over_caps
from hostagent.daemon.follow.hooks.agenthooks import command_with_hooks
from hostagent.daemon.host import sandboxing
from hostagent.daemon.host.ports import OwnerPort
from hostagent.daemon.ops.confining import asked_less, prepare, profile_words, wide_cwd
from hostagent.daemon.ops.sandboxstart import SandboxRefused, sandbox_start
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.paths import SessionPaths
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.errors import (
    AlreadyRunning,
    BudgetExceeded,
    Busy,
    InvalidArgs,
    InvalidCwd,
    InvalidName,
    NoSuchPreset,
    SessionExists,
    quote,
)
from hostagent.identity import Owner
from hostagent.options import CreateRequest, cwd_problem, size_problem
from hostagent.permissions import capped, sandbox_defaults
from hostagent.presets import Preset
from hostagent.session import (
    Limits,
    SessionRecord,
    State,
    generate_name,
    name_problem,
    now_usec,
    unit_name,
)

log = logging.getLogger(__name__)

IP_WORDS = ("IPAddressAllow", "IPAddressDeny")  # systemd enforces them with cgroup BPF


async def first_record(
    owner_uid: int,
    name: str,
    preset: Preset,
    cwd: str,
    req: CreateRequest,
    settings: Settings,
    paths: SessionPaths,
    boot_id: str,
    owners: OwnerPort,
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
    if too_long := cwd_problem(cwd):
        raise InvalidCwd(too_long)
    problem = await owners.check_cwd(owner, cwd)
    if problem:
        raise InvalidCwd(f"Working directory {quote(cwd)} {problem}.")
    # As the owner resolves it: %{cwd} and a worktree's place follow no link of hers.
    real = await owners.resolve(owner, [cwd])
    if real is None:
        raise InvalidCwd(f"Working directory {quote(cwd)} cannot be resolved as its owner.")
    cwd = real[cwd]
    if req.prompt and not preset.prompt_args:
        raise InvalidArgs(
            f"Preset '{preset.name}' takes no first prompt; type it into the session instead."
        )
    command = req.command if req.command is not None else (preset.command or [owner.shell])
    # The program as the owner's own terminal finds it; its PATH goes with the session, so
    # an npm CLI's "#!/usr/bin/env node" finds the owner's node (nvm, a user prefix) too.
    found = await owners.find_program(owner, command[0])
    command = [found.program, *command[1:]]
    config = settings.config
    agents = config.sandbox.agents
    words = profile_words(agents, preset, settings.presets.values(), owner, req)
    loosened = asked_less(agents, words, req, name)
    agent_id = req.agent_session or launch.new_agent_id(preset)
    first = launch.first_launch(
        preset,
        command_with_hooks(preset, command, paths, req.mcp_server),
        req.args,
        agent_id,
        req.prompt,
    )
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
        path=found.path,
        limits=req.limits.merged_over(config.limits),
        properties=sandbox_defaults(
            config.sandbox.of(owner.name), [*words, *req.properties], owner.name, req.maker
        ),
        columns=req.columns or config.columns,
        rows=req.rows or config.rows,
        agent_session=agent_id,
        agent_session_source=("assigned" if agent_id else ""),
        unit=unit_name(name),
        boot_id=boot_id,
        created_at=now_usec(),
        state=State.STARTING,
        hook_token=secrets.token_hex(16),
        parent=req.parent,
        mcp=bool(req.mcp_server),
        profile="agent" if words else "",
        loosened=loosened,
    )
    if words and (wide := wide_cwd(record.properties, record.cwd, owner)):
        raise InvalidCwd(f"Session '{name}': {wide}.")
    problem = size_problem(first.argv, {**preset.env, **record.launch_env()})
    if problem:
        raise InvalidArgs(f"Session '{name}': {problem}.")
    walls = [w for w in record.properties if w.partition("=")[0] in IP_WORDS]
    problem = sandboxing.ip_problem(os.geteuid() == 0) if walls else ""
    if problem:
        word = walls[0].partition("=")[0]
        raise InvalidArgs(
            f"Session '{name}': {word}= cannot be enforced here: {problem}; leave it out."
        )
    # A sandbox that cannot be made here is refused before anything of the session exists;
    # each start plans it again, and says so if it no longer can.
    try:
        await sandbox_start(record, owner, preset, paths, owners, req.maker)
    except SandboxRefused as e:
        raise InvalidArgs(e.message) from None
    if loosened:
        less = " ".join(loosened)
        log.info("session '%s': asks for less than the agent profile: %s", name, less)
    await prepare(name, record.properties, preset, owner, agents, owners)
    return record, owner


@dataclass(frozen=True)
class Admission:
    """A create that passed the checks needing no I/O: whose it is, its name (made up when
    none was given) and preset, why it goes past the admin's caps ("" when it does not), and
    whether the caller may go past them."""

    owner: int
    name: str
    preset: Preset
    over_caps: str = ""
    exempt: bool = False

    def exempted(self) -> Admission:
        """The same create, by a caller who may go past the caps (polkit said so)."""
        return replace(self, exempt=True)


def admit(
    registry: Registry,
    settings: Settings,
    owner_uid: int,
    name: str,
    preset_name: str,
    limits: Limits,
    exempt: bool,
) -> Admission:
    """The create's admission; the named error for the first rule it breaks. Cheap and
    without I/O, so the bus asks it before polkit could prompt anyone. exempt: the caller may
    go past the admin's caps (root, or an admin the config allows)."""
    preset = settings.preset(preset_name or "shell")
    if preset is None:
        raise NoSuchPreset(
            f"No preset {quote(preset_name)} known; 'hostagentctl presets' lists them."
        )
    name = name or generate_name(preset.name, registry.taken())
    problem = name_problem(name)
    if problem:
        raise InvalidName(f"Session name {quote(name)} {problem}.")
    check_free(registry, name, owner_uid)
    over = "" if exempt else quota_problem(registry, settings.config, owner_uid, limits) or ""
    return Admission(owner_uid, name, preset, over, exempt)


def check_free(registry: Registry, name: str, owner_uid: int) -> None:
    """SessionExists when name is in use; what to do about it is said only to its owner."""
    existing = registry.sessions.get(name)
    if existing is not None and existing.record.owner != owner_uid:
        # Another user's session: its state and what to do with it are not the caller's.
        raise SessionExists(f"Session name '{name}' is taken; pick another name.")
    if existing is not None:
        state = existing.record.state.value
        raise SessionExists(
            f"Session '{name}' already exists and is {state}; "
            f"resume it with 'hostagentctl resume {name}' or remove it with "
            f"'hostagentctl rm {name}'."
        )
    if name in registry.reserved:
        raise SessionExists(f"Session '{name}' is being created right now; pick another name.")


def quota_problem(registry: Registry, config: Config, owner_uid: int, asked: Limits) -> str | None:
    """Why a create for owner_uid with the limits asked for goes past the admin's maxima, or
    None. Root's own sessions are not counted; the caller decides who is exempt."""
    problem = over_caps(asked, config.limits)
    if problem:
        return problem
    cap = config.users.sessions
    if cap and capped(owner_uid):
        mine = sum(1 for s in registry.sessions.values() if s.record.owner == owner_uid)
        mine += sum(1 for uid in registry.reserved.values() if uid == owner_uid)
        if mine >= cap:
            return (
                f"this user already has {mine} sessions, the most this host allows "
                "(users.sessions in hostagent.yaml); remove one with 'hostagentctl rm'"
            )
    return None


def check_not_stopping(session: Session) -> None:
    if session.lock.locked() and session.record.state is State.STOPPING:
        raise Busy(f"Session '{session.name}' is stopping; wait for it, then try again.")


def check_resumable(session: Session) -> None:
    state = session.record.state
    if state in (State.STARTING, State.RUNNING):
        raise AlreadyRunning(f"Session '{session.name}' is already {state.value}.")
    if state is State.STOPPING:
        raise Busy(f"Session '{session.name}' is stopping; wait for it, then resume.")


def check_budget(why: str, what: str) -> None:
    """BudgetExceeded when a budget says why what may not start (budgets.py)."""
    if why:
        raise BudgetExceeded(
            f"{what}: {why}; it can start tomorrow, or once an admin lifts the budget "
            "('hostagentctl budget lift USER')."
        )
