"""CreateSession's ``a{sv}`` options, checked for key, type and value. Pure.

The bus layer hands over each option as (signature, value); everything that is wrong becomes
InvalidArgs with a message naming the option, so nothing half-valid reaches the lifecycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hostagent import resources, sandbox, shellwords
from hostagent.config import COLUMNS_BOUNDS, LIMIT_BOUNDS, ROWS_BOUNDS, limit_problem
from hostagent.errors import InvalidArgs, quote
from hostagent.session import Limits

AGENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_ENV_ENTRIES = 256
MAX_ENV_BYTES = 64 * 1024
MAX_ARGV_ENTRIES = 1024
MAX_ARGV_BYTES = 128 * 1024
# All of option 'properties' together, in UTF-8 bytes (a newline between two): the words of a
# sandbox and a resource setting or two take a few hundred; this bounds what parsing them costs.
MAX_PROPERTIES_BYTES = sandbox.MAX_LINE

# The most a valid CreateSession's arguments take on the bus, in bytes: each cap above at its
# largest, with what the wire adds to each string (length, NUL, padding: 8 bytes at most) and
# dict entry (24), a cwd of PATH_MAX, and room for the rest (the names and the small options).
# A call over it cannot be valid, so it is refused from its header, its body never unmarshalled.
CREATE_ARGS_MAX = (
    (MAX_ARGV_BYTES + 8 * MAX_ARGV_ENTRIES)  # command, args and prompt share one command line
    + (MAX_ENV_BYTES + 24 * MAX_ENV_ENTRIES)
    + (MAX_PROPERTIES_BYTES + 8 * resources.MAX_PROPERTIES)
    + sandbox.PATH_MAX
    + 16 * 1024
)

# option key -> D-Bus signature
OPTION_TYPES: dict[str, str] = {
    "command": "as",
    "args": "as",
    "prompt": "s",  # the first message, given on the first launch only (never on a resume)
    "env": "a{ss}",
    "agent_session": "s",
    "user": "u",
    "columns": "q",
    "rows": "q",
    "worktree": "s",  # a git worktree on this branch ("" for hostagent/NAME)
    "base": "s",  # what a new worktree branch starts from (default: HEAD)
    "mcp": "b",  # hostagent's MCP server registered in its CLI (else the preset's default)
    "properties": "as",  # systemd resource-control assignments, NAME=VALUE (resources.py)
    **{k: "t" for k in LIMIT_BOUNDS},
}
BRANCH_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


@dataclass
class Maker:
    """The session a create came from inside, as its checks need it: its name, its tree (where
    its %{cwd} and %{gitdir} are pinned), its sandbox words (pinned) and its CLI's state."""

    name: str
    cwd: str
    repo: str
    words: list[str]
    state: list[str]


@dataclass
class CreateRequest:
    command: list[str] | None = None
    args: list[str] = field(default_factory=list)
    prompt: str = ""
    env: dict[str, str] = field(default_factory=dict)
    agent_session: str = ""
    user: int | None = None
    parent: str = ""  # set by the daemon: the session the create came from inside
    maker: Maker | None = None  # set by the daemon: that session, for the create's checks
    columns: int | None = None
    rows: int | None = None
    limits: Limits = field(default_factory=Limits)
    worktree: str | None = None  # None: no worktree; "": one on the default branch
    base: str = ""
    properties: list[str] = field(default_factory=list)
    asked: list[str] | None = None  # set by the daemon from inside: the words asked, no maker's
    mcp: bool | None = None  # None: the preset's default, else the host's
    mcp_server: list[str] = field(default_factory=list)  # set by the daemon from mcp


def parse_options(options: dict[str, tuple[str, Any]]) -> CreateRequest:
    req = CreateRequest()
    for key, (signature, value) in options.items():
        expected = OPTION_TYPES.get(key)
        if expected is None:
            known = ", ".join(sorted(OPTION_TYPES))
            raise InvalidArgs(f"Unknown option {quote(key)}; known options are: {known}.")
        if signature != expected:
            raise InvalidArgs(
                f"Option '{key}' must have type '{expected}', not {quote(signature)}."
            )
        _apply(req, key, value)
    if req.base and req.worktree is None:
        raise InvalidArgs("Option 'base' says where a new worktree starts; give 'worktree' too.")
    return req


def _apply(req: CreateRequest, key: str, value: Any) -> None:
    if key == "command":
        if len(value) > MAX_ARGV_ENTRIES:
            raise InvalidArgs(f"Option 'command' may hold at most {MAX_ARGV_ENTRIES} arguments.")
        if not value or not value[0]:
            raise InvalidArgs("Option 'command' must name a program; omit it to use the preset's.")
        req.command = list(value)
    elif key == "args":
        if len(value) > MAX_ARGV_ENTRIES:
            raise InvalidArgs(f"Option 'args' may hold at most {MAX_ARGV_ENTRIES} arguments.")
        req.args = list(value)
    elif key == "prompt":
        if "\0" in value:
            raise InvalidArgs("Option 'prompt' must not contain NUL.")
        req.prompt = value
    elif key == "env":
        # Counted before each entry is looked at: a huge dict is refused at once.
        if len(value) > MAX_ENV_ENTRIES:
            raise InvalidArgs(f"Option 'env' may hold at most {MAX_ENV_ENTRIES} entries.")
        for k, v in value.items():
            problem = env_problem(k, v)
            if problem:
                raise InvalidArgs(f"Option 'env': {problem}.")
        req.env = dict(value)
    elif key == "agent_session":
        if not AGENT_ID_RE.fullmatch(value):
            raise InvalidArgs("Option 'agent_session' must be 1-128 of [A-Za-z0-9._:-].")
        req.agent_session = value
    elif key == "user":
        req.user = int(value)
    elif key == "mcp":
        req.mcp = bool(value)
    elif key in ("worktree", "base"):
        if value and (
            not BRANCH_RE.fullmatch(value) or ".." in value or value.endswith((".", "/"))
        ):
            raise InvalidArgs(
                f"Option '{key}' must be a git branch or revision name, not {quote(value)}."
            )
        setattr(req, key, value)
    elif key == "properties":
        req.properties = check_properties(value)
    elif key in ("columns", "rows"):
        lo, hi = COLUMNS_BOUNDS if key == "columns" else ROWS_BOUNDS
        if not lo <= value <= hi:
            raise InvalidArgs(f"Option '{key}' must be between {lo} and {hi}.")
        setattr(req, key, int(value))
    else:
        problem = limit_problem(key, value)
        if problem:
            raise InvalidArgs(f"Option '{key}' {problem}.")
        setattr(req.limits, key, int(value))


def check_properties(assigned: list[str]) -> list[str]:
    """The resource-control assignments of option 'properties', each read as systemd reads
    it and written back in systemd's words; InvalidArgs for one systemd would refuse."""
    if len(assigned) > resources.MAX_PROPERTIES:
        raise InvalidArgs(
            f"Option 'properties' may hold at most {resources.MAX_PROPERTIES} assignments."
        )
    # Their size first, before any is parsed: a huge one costs nothing but this.
    if too_long := shellwords.too_long("\n".join(assigned), MAX_PROPERTIES_BYTES):
        raise InvalidArgs(f"Option 'properties' {too_long}.")
    shown = []
    for text in assigned:
        if sandbox.is_word(text.partition("=")[0]):
            try:
                shown.append(sandbox.check(text))
            except sandbox.SandboxProblem as e:
                raise InvalidArgs(f"Option 'properties': {e}.") from None
            continue
        try:
            # A percentage is of the memory of the host the scope starts on; any will do here.
            name, wire = resources.assignment(text, physical=1 << 30)
        except resources.ResourceProblem as e:
            known = ", ".join([*resources.PROPERTIES, *sandbox.WORDS])
            raise InvalidArgs(f"Option 'properties': {e}; hostagent sets {known}.") from None
        shown.append(f"{name}={wire.shown}")
    return shown


def cwd_problem(cwd: str) -> str | None:
    """What is wrong with a working directory's length: PATH_MAX counts its NUL. Said with its
    size, never the path; asked before anything else of a create, so a huge one is cheap."""
    if not shellwords.too_long(cwd, sandbox.PATH_MAX - 1):
        return None
    size = len(cwd.encode(errors="surrogateescape"))
    return (
        f"Working directory must be shorter than {sandbox.PATH_MAX} bytes; this one takes {size}."
    )


def env_problem(key: str, value: str) -> str | None:
    if not ENV_KEY_RE.fullmatch(key):
        return f"environment key {quote(key)} is not a valid name"
    if "\0" in value:
        return f"environment value of {quote(key)} contains NUL"
    return None


def _bytes(text: str) -> int:
    """What a string costs the kernel's exec limits: its UTF-8 bytes, not its characters."""
    return len(text.encode(errors="surrogateescape"))


def size_problem(argv: list[str], env: dict[str, str]) -> str | None:
    if len(argv) > MAX_ARGV_ENTRIES or sum(_bytes(a) + 1 for a in argv) > MAX_ARGV_BYTES:
        return f"the command line exceeds {MAX_ARGV_ENTRIES} arguments or {MAX_ARGV_BYTES} bytes"
    if any("\0" in a for a in argv):
        return "an argument contains NUL"
    size = sum(_bytes(k) + _bytes(v) + 2 for k, v in env.items())
    if len(env) > MAX_ENV_ENTRIES or size > MAX_ENV_BYTES:
        return f"the environment exceeds {MAX_ENV_ENTRIES} entries or {MAX_ENV_BYTES} bytes"
    return None
