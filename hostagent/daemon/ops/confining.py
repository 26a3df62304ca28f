"""What a create does for the agent profile (profile.py): the profile's words laid under the
ones asked for, asking for less refused or said, and, before a confined session's first
start, its caches made and its CLI's settings file moved where it can save them, as the owner.

The words become the record's, so every later start (a resume, a reboot's, ``auto``
recovery) makes the same sandbox from the record alone, whatever the profile says by then.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
from collections.abc import Iterable

from hostagent import profile, sandbox, sandboxpaths
from hostagent.daemon.host import procfs
from hostagent.daemon.host.owner import passwd_env
from hostagent.daemon.host.ports import OwnerPort
from hostagent.errors import AccessDenied, InvalidArgs
from hostagent.identity import Owner
from hostagent.options import CreateRequest
from hostagent.presets import Preset
from hostagent.profile import AgentProfile

log = logging.getLogger(__name__)

MKDIR = "/bin/mkdir"
MV = "/bin/mv"


def profile_words(
    agents: AgentProfile,
    preset: Preset,
    presets: Iterable[Preset],
    owner: Owner,
    req: CreateRequest,
) -> list[str]:
    """The words a new session of preset's starts from (none for a preset that is not an
    agent's, or a profile the admin emptied for owner), pinned to its maker's tree when it is
    made inside a confined session, as the maker's own words are. Another CLI's state that the
    create names writable (a planner given its children's) is not hidden."""
    if not preset.confined:
        return []
    own = [profile.state_word(t, preset.env) for t in preset.state]
    with contextlib.suppress(sandbox.SandboxProblem):  # said by name where it is planned
        own += [p.removeprefix("-") for p in sandbox.read(req.properties).read_write]
    others = [
        profile.state_word(t, p.env) for p in presets if p.name != preset.name for t in p.state
    ]
    words = profile.words_for(agents, owner.name, own, others)
    maker = req.maker
    if maker is not None and sandbox.read(maker.words).confined:
        words = [sandbox.pinned(w, maker.cwd, maker.repo) for w in words]
    return words


def asked_less(agents: AgentProfile, words: list[str], req: CreateRequest, name: str) -> list[str]:
    """The words by which a create asks for less than its profile's words; AccessDenied where
    that may not be asked: from inside a session, or where the admin's policy says so."""
    asked = req.asked if req.asked is not None else req.properties
    less = profile.loosening(words, asked) if words else []
    if not less:
        return []
    shown = " ".join(less)
    if req.maker is not None:
        raise AccessDenied(
            f"Session '{name}' asks for less than the agent profile ({shown}) from inside "
            f"session '{req.maker.name}', which no session may; create it from outside every "
            "session."
        )
    if not agents.loosen:
        raise AccessDenied(
            f"Session '{name}' asks for less than the agent profile ({shown}), which this "
            "host's policy refuses (sandbox.agents.loosen in hostagent.yaml); leave those "
            "words out."
        )
    return less


def wide_cwd(properties: list[str], cwd: str, owner: Owner) -> str:
    """Why an agent's session under the profile may not run in cwd, "" when it may: the
    profile makes its working directory writable, and one that holds the owner's whole home
    (the home itself, /home, /) would make her rc files and every other program's
    configuration the agent's to write, unless her words leave the home writable anyway."""
    box = sandbox.read(properties)
    if box.protect_home == "no" or "%{cwd}" not in box.read_write:
        return ""
    home = owner.home.rstrip("/")
    if cwd.rstrip("/") != home and not home.startswith(cwd.rstrip("/") + "/"):
        return ""
    return (
        f"an agent's session writes its working directory, and {cwd} holds your whole home; "
        "create it in a project directory (--cwd DIR), or ask for that (-p ProtectHome=no)"
    )


async def prepare(
    name: str,
    properties: list[str],
    preset: Preset,
    owner: Owner,
    agents: AgentProfile,
    owners: OwnerPort,
) -> None:
    """Before a confined session's first start: the profile's caches it may write made as the
    owner where missing, and its CLI's file moved where a confined session saves it (the
    preset's ``relocate:``); InvalidArgs naming the command to run where it cannot be moved."""
    box = sandbox.read(properties)
    if not box.confined:
        return
    named = {p.lstrip("-") for p in box.read_write}
    caches = [c for c in agents.caches if c in named]
    missing = [p for p in profile.caches_to_make(caches, owner.home) if not os.path.lexists(p)]
    if missing:  # a cache that cannot be made is left out: its word is optional
        await owners.run(owner, [MKDIR, "-p", "--", *missing])
    for source, target in _moves(preset, owner, box):
        await _relocate(name, preset, owner, agents, owners, source, target)


def told(
    agents: AgentProfile, preset: Preset, presets: Iterable[Preset], owner: Owner
) -> tuple[list[str], list[str]]:
    """What a create of preset's by owner, from outside every session, would start from, and
    what it would do first (a file of her CLI's moved) or could not be asked: for doctor."""
    words = profile_words(agents, preset, presets, owner, CreateRequest())
    notes = []
    for source, target in _moves(preset, owner, sandbox.read(words)):
        how = "moved" if agents.relocate else "not moved (sandbox.agents.relocate is off): move"
        notes.append(
            f"{_home_path(source, owner)} is {how} into {_home_path(target, owner)} at your "
            f"first confined {preset.name} session, with every {preset.name} of yours quit"
        )
    if words and not agents.loosen:
        notes.append("this host refuses a create that asks for less (sandbox.agents.loosen)")
    return words, notes


def _moves(preset: Preset, owner: Owner, box: sandbox.Sandbox) -> list[tuple[str, str]]:
    """The preset's files to move for a session confined by box: those that exist, where the
    place they go does not, and where the home is read-only (else the file is saved in place)."""
    if not preset.relocate or box.protect_home == "no":
        return []
    env = {**passwd_env(owner), **preset.env}
    out = []
    for source, target in preset.relocate:
        ends = sandboxpaths.state_paths([source, target], owner.home, owner.home, env)
        if os.path.isfile(ends[0]) and not os.path.islink(ends[0]) and not os.path.lexists(ends[1]):
            out.append((ends[0], ends[1]))
    return out


async def _relocate(
    name: str,
    preset: Preset,
    owner: Owner,
    agents: AgentProfile,
    owners: OwnerPort,
    source: str,
    target: str,
) -> None:
    """source renamed to target as the owner (one rename in her home, nothing copied), while
    no process of her CLI runs: one that runs would save the file where it was."""
    program = posixpath.basename(preset.command[0]) if preset.command else preset.name
    command = f"mv {_home_path(source, owner)} {_home_path(target, owner)}"
    if not agents.relocate:
        why = "this host does not move it (sandbox.agents.relocate in hostagent.yaml)"
    elif procfs.runs(owner.uid, program):
        why = f"a {program} of {owner.name}'s runs, and would save it where it is"
    else:
        why = ""
        await owners.run(owner, [MKDIR, "-p", "--", posixpath.dirname(target)])
        result = await owners.run(owner, [MV, "-T", "-n", "--", source, target])
        if result is not None and result[0] == 0 and not os.path.lexists(source):
            said = "where %s reads it first and a confined session can save it"
            log.info(f"session '%s': moved %s to %s, {said}", name, source, target, program)
            return
        why = "the move failed"
    raise InvalidArgs(
        f"Session '{name}': {program} keeps its settings in {source}, which a confined session "
        f"cannot save, and {why}; quit every {program} and run '{command}', or create with "
        "--unconfined."
    )


def _home_path(path: str, owner: Owner) -> str:
    return "~" + path[len(owner.home) :] if path.startswith(owner.home + "/") else path
