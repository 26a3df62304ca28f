"""The sandbox one start of a session makes, planned in one place for a create's check and
for every start.

A create plans it before anything of the session exists, so that a sandbox that cannot be
made here is refused with nothing to undo (admission.py); each start plans it again from the
record (spawn.py), since what the paths resolve to may have changed since: the create itself
moves a CLI's file into place between the two (confining.prepare), and a resume may come
weeks later. Both read the same function, and its plan goes down to the held child whole
(host/scope.py's StartPlan), never made again below.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hostagent import sandbox, sandboxpaths
from hostagent.daemon.host import namespace, sandboxing
from hostagent.daemon.host.ports import OwnerPort
from hostagent.daemon.state.paths import SessionPaths
from hostagent.identity import Owner
from hostagent.options import Maker
from hostagent.permissions import state_from_inside
from hostagent.presets import Preset
from hostagent.sandbox import SandboxProblem
from hostagent.session import SessionRecord

log = logging.getLogger(__name__)

MKDIR = "/bin/mkdir"


class SandboxRefused(Exception):
    """The session's sandbox cannot be made here; its words say why, whole. The caller names
    the error: a create's InvalidArgs, a start's SpawnFailed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class SandboxStart:
    """A start's sandbox: the held child's plan (None for none), where its CLI keeps its own
    state (writable in it) and the CLI's files that name commands (read-only in it)."""

    plan: namespace.Plan | None
    state: list[str] = field(default_factory=list)
    trusted: list[str] = field(default_factory=list)


async def sandbox_start(
    record: SessionRecord,
    owner: Owner,
    preset: Preset | None,
    paths: SessionPaths,
    owners: OwnerPort,
    maker: Maker | None = None,
) -> SandboxStart:
    """The sandbox record's words make at a start, with its CLI's state and trusted files
    (from the preset and the owner's passwd entry alone, never a creator's environment) and
    every path resolved as the owner, so that no link carries a mount elsewhere (a writable one
    that resolves to what a word hides is refused). SandboxRefused when it cannot be made here;
    AccessDenied when, made from inside the sandbox of maker, its state is not its maker's."""
    name = record.name
    box = sandbox.read(record.properties)
    ctx = sandboxing.context(owner, record.cwd, record.repo)
    try:
        state = sandboxing.cli_state(preset, owner, record.cwd) if box.confined else []
        wanted = sandboxpaths.to_resolve(box, ctx, state) if box.confined else []
    except SandboxProblem as e:
        raise SandboxRefused(f"Session '{name}': its sandbox cannot be made: {e}.") from None
    if maker is not None:
        state_from_inside(maker, state, ctx)
    resolved = await owners.resolve(owner, wanted)
    if resolved is None:
        raise SandboxRefused(
            f"Session '{name}': its sandbox's paths cannot be resolved as its owner; "
            "check that each is reachable by them."
        )
    trusted = _trusted(preset, owner, record.cwd) if box.confined else []
    try:
        plan = sandboxing.session_plan(
            box, ctx, owner, record.repo, paths, state, resolved, trusted
        )
    except (SandboxProblem, OSError) as e:
        why = sandboxing.why(e)
        raise SandboxRefused(f"Session '{name}': its sandbox cannot be made: {why}.") from None
    return SandboxStart(plan, state, trusted)


def _trusted(preset: Preset | None, owner: Owner, cwd: str) -> list[str]:
    """The CLI's files that name commands it runs (sandboxing.cli_trusted); none when its
    preset's are not paths in the home (then its state could not be made either)."""
    try:
        return sandboxing.cli_trusted(preset, owner, cwd)
    except SandboxProblem:
        return []


async def make_state(name: str, owner: Owner, started: SandboxStart, owners: OwnerPort) -> None:
    """The CLI's state directories made as the owner before a start: under a read-only home
    the CLI could not make them itself. One that cannot be made is said, not fatal: the CLI
    says what it lacks."""
    directories = [p for p in started.state if p.endswith("/")]
    if directories:
        made = await owners.run(owner, [MKDIR, "-p", "--", *directories])
        if made is None or made[0] != 0:
            log.warning("session '%s': could not make %s", name, " ".join(directories))
