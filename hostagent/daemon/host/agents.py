"""Finding an agent's program as its owner would, and which agents the owner has installed.

Agent CLIs install where their users put them: Claude's native installer in ~/.local/bin, npm
under a user prefix or nvm, Cursor's ``agent``, Grok in ~/.grok/bin. A fixed PATH finds none of
those, so the program is looked up the way the owner's own terminal would: by the owner's login
shell (interactive for bash and zsh, where nvm and friends set PATH), run as the owner. The
absolute path and that PATH are recorded with the session, so every resume runs the same
program in the same environment, and a program that is missing fails the create in words.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import cast

from hostagent.daemon.host.owner import (
    DEFAULT_PATH,
    USER_CODE_OUTPUT,
    Helpers,
    OutputTooLarge,
    passwd_env,
)
from hostagent.errors import AgentNotFound
from hostagent.identity import Owner

log = logging.getLogger(__name__)

# Where packages put hostagent's own helper programs, out of users' PATH (the bundled stand-in
# agent): Debian's and Arch's place, and Fedora's. A program the login shell does not find is
# looked for here too.
HELPERS = ("/usr/lib/hostagent", "/usr/libexec/hostagent")
LOGIN_TIMEOUT = 10.0  # a login shell that takes longer is broken; the session is not started
VERSION_TIMEOUT = 20.0
CACHE_SEC = 30.0  # a burst of creates pays for one login shell per owner
_MARK_PATH, _MARK_PROGRAM = "__hostagent_path=", "__hostagent_program="
# Markers, because a profile may print anything (a motd, nvm's notices) around what we ask.
_PROBE = (
    f'printf "\\n%s%s\\n" "{_MARK_PATH}" "$PATH"; '
    f'p=$(command -v -- "$1") && printf "%s%s\\n" "{_MARK_PROGRAM}" "$p"; exit 0'
)
_INTERACTIVE = {"bash", "zsh"}
_POSIX = {"bash", "zsh", "sh", "dash", "ksh", "mksh", "yash"}


@dataclass(frozen=True)
class Found:
    program: str  # absolute, or "" when not found
    path: str  # the PATH it was looked up in


def login_argv(shell: str, program: str) -> list[str]:
    """How to ask the owner's login shell; a shell that is not POSIX (fish) or not a shell
    at all (nologin) is replaced by /bin/sh, which still reads /etc/profile and ~/.profile."""
    name = os.path.basename(shell)
    if name not in _POSIX:
        shell, name = "/bin/sh", "sh"
    flags = "-lic" if name in _INTERACTIVE else "-lc"
    return [shell, flags, _PROBE, "hostagent", program]


def helper(program: str, helpers: tuple[str, ...] = HELPERS) -> str:
    """hostagent's own helper of that bare name, or "" when there is none."""
    if "/" in program:
        return ""
    for directory in helpers:
        path = os.path.join(directory, program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return ""


def parse_probe(output: str) -> Found:
    path, program = DEFAULT_PATH, ""
    for line in output.splitlines():
        if line.startswith(_MARK_PATH):
            path = line[len(_MARK_PATH) :] or DEFAULT_PATH
        elif line.startswith(_MARK_PROGRAM):
            program = line[len(_MARK_PROGRAM) :]
    if not os.path.isabs(program):
        program = ""  # an alias or a shell function: not something we can exec
    return Found(program, path)


async def look_up(helpers: Helpers, owner: Owner, program: str, fresh: bool = False) -> Found:
    """Where the owner's login shell finds program (absolute programs are taken as they are).
    fresh: ask the shell even when a recent answer is cached (helpers.found), and cache the
    new one."""
    key = (owner.uid, program)
    cached = helpers.found.get(key)
    if cached and not fresh and time.monotonic() - cached[0] < CACHE_SEC:
        return cast(Found, cached[1])  # only this function writes there
    env = {**passwd_env(owner), "TERM": "dumb"}
    try:
        result = await helpers.run(
            owner,
            login_argv(owner.shell, program),
            LOGIN_TIMEOUT,
            env=env,
            runs_user_code="login shell lookup",
            limit=USER_CODE_OUTPUT,
        )
    except OutputTooLarge:
        log.warning("%s's login shell printed more than %d bytes", owner.name, USER_CODE_OUTPUT)
        return Found("", DEFAULT_PATH)
    if result is None:
        log.warning("%s's login shell did not answer within %.0f s", owner.name, LOGIN_TIMEOUT)
        return Found("", DEFAULT_PATH)
    found = parse_probe(result[1].decode(errors="replace"))
    if found.program and os.path.isabs(program):
        found = Found(program, found.path)
    elif not found.program and (own := helper(program)):
        found = Found(own, found.path)
    if found.program:
        helpers.found[key] = (time.monotonic(), found)
    return found


async def resolve(helpers: Helpers, owner: Owner, program: str) -> Found:
    """The program's absolute path and the login PATH, or AgentNotFound in words."""
    found = await look_up(helpers, owner, program)
    if not found.program:
        raise AgentNotFound(
            f"Agent program '{program}' is not installed for {owner.name}: not found in "
            f"{owner.name}'s login PATH ({found.path}); install it, or change the preset's "
            "command."
        )
    return found


async def version(helpers: Helpers, owner: Owner, program: str, env: dict[str, str]) -> str:
    """The first line the program's --version prints, run as the owner; "" if none."""
    try:
        result = await helpers.run(
            owner,
            [program, "--version"],
            VERSION_TIMEOUT,
            env=env,
            runs_user_code=f"{os.path.basename(program)} --version",
            limit=USER_CODE_OUTPUT,
        )
    except OutputTooLarge:
        return ""
    if result is None or result[0] != 0:
        return ""
    lines = [line.strip() for line in result[1].decode(errors="replace").splitlines()]
    return next((line for line in lines if line), "")[:80]


async def installed(
    helpers: Helpers, owner: Owner, programs: dict[str, str], env: dict[str, str]
) -> dict[str, tuple[str, str, str]]:
    """For each preset name -> program: (absolute path, version, problem), as the owner.
    Always asked afresh: a user who has just installed an agent looks here, and the creates
    that follow then find it too."""
    limit = asyncio.Semaphore(4)

    async def one(program: str) -> tuple[str, str, str]:
        async with limit:
            found = await look_up(helpers, owner, program, fresh=True)
            if not found.program:
                return "", "", f"not found in the login PATH ({found.path})"
            ver = await version(helpers, owner, found.program, {**env, "PATH": found.path})
            return found.program, ver, "" if ver else "installed; --version printed nothing"

    names = list(programs)
    results = await asyncio.gather(*(one(programs[n]) for n in names))
    return dict(zip(names, results, strict=True))
