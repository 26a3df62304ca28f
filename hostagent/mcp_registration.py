"""How each agent CLI is given hostagent's MCP server for one session only. Pure.

A session that asks for the tools (``hostagentctl new --mcp``, a preset's or the host's
default) gets ``hostagentctl mcp`` registered the way its CLI takes a server for one run, so
that the user's own configuration is neither read nor written (docs/agent-clis.md, "MCP"):

| format   | how                                                                       |
|----------|---------------------------------------------------------------------------|
| claude   | ``--mcp-config=FILE`` (adds to the user's servers; FILE in the session's dir) |
| copilot  | ``--additional-mcp-config @FILE``                                         |
| codex    | ``-c mcp_servers.hostagent.command=…`` and ``….args=[…]`` (TOML values)   |
| opencode | ``OPENCODE_CONFIG_CONTENT``, a config merged over the user's               |
| kilo     | ``KILO_CONFIG_CONTENT``, the same for OpenCode's fork                      |
| gemini   | ``mcpServers`` in the session's system-defaults file (its hooks file)     |
| qwen     | the same, in Qwen Code's                                                   |
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hostagent.errors import InvalidArgs

SERVER = "hostagent"  # the server's name in every CLI: its tools are mcp__hostagent__… in Claude


@dataclass(frozen=True)
class Registration:
    """What a start adds for the server: arguments, environment, the file named by the
    arguments (its text; "" for none), and the entries merged into the hooks settings."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    file_text: str = ""
    settings: dict[str, Any] = field(default_factory=dict)


Builder = Callable[[str, list[str], str], Registration]


def wanted(asked: bool | None, fmt: str, default: bool, preset: str, why_not: str) -> bool:
    """Whether a new session gets the server: as asked, else by default (the preset's or the
    host's). fmt: how its preset's CLI takes one ("" for not at all); why_not: why it cannot
    here ("" when it can). Asked for where it cannot be, InvalidArgs says why."""
    if not (default if asked is None else asked):
        return False
    problem = why_not or ("" if fmt else f"preset '{preset}' names no way to give its CLI one")
    if problem and asked:
        raise InvalidArgs(
            f"This session cannot have hostagent's MCP server: {problem}; leave 'mcp' out."
        )
    return not problem


def server_command(ctl: str, system: bool) -> list[str]:
    """The server's command line: hostagentctl on the daemon's own bus."""
    return [ctl, "--system" if system else "--user", "mcp"]


def _claude(program: str, args: list[str], file: str) -> Registration:
    entry = {"type": "stdio", "command": program, "args": args}
    # One word: --mcp-config takes any number of values, and would take a prompt after it.
    return Registration([f"--mcp-config={file}"], file_text=_servers(entry))


def _copilot(program: str, args: list[str], file: str) -> Registration:
    entry = {"type": "local", "command": program, "args": args, "tools": ["*"]}
    return Registration(["--additional-mcp-config", "@" + file], file_text=_servers(entry))


def _codex(program: str, args: list[str], file: str) -> Registration:
    # Codex reads each -c value as TOML; a JSON string or list of strings is one.
    key = f"mcp_servers.{SERVER}"
    return Registration(
        ["-c", f"{key}.command={json.dumps(program)}", "-c", f"{key}.args={json.dumps(args)}"]
    )


def _config_content(variable: str) -> Builder:
    """OpenCode's way, and its fork's: a config in variable, merged over the user's."""

    def build(program: str, args: list[str], file: str) -> Registration:
        server = {"type": "local", "command": [program, *args], "enabled": True}
        return Registration(env={variable: json.dumps({"mcp": {SERVER: server}})})

    return build


def _in_settings(program: str, args: list[str], file: str) -> Registration:
    return Registration(settings={"mcpServers": {SERVER: {"command": program, "args": args}}})


# Each format and how it is given the server: (its program, its arguments, the session's own
# server file) -> what a start adds. A CLI that takes a server as one of these does is a
# preset naming the format; a new way is one builder and its line here.
BUILDERS: dict[str, Builder] = {
    "claude": _claude,
    "codex": _codex,
    "copilot": _copilot,
    "gemini": _in_settings,
    "kilo": _config_content("KILO_CONFIG_CONTENT"),
    "opencode": _config_content("OPENCODE_CONFIG_CONTENT"),
    "qwen": _in_settings,
}
FORMATS = tuple(BUILDERS)
# The formats whose server goes into the session's hooks settings file: the preset must have
# hooks of the same CLI.
IN_SETTINGS = tuple(f for f, build in BUILDERS.items() if build is _in_settings)


def registration(fmt: str, server: list[str], file: str) -> Registration:
    """How a CLI of format fmt is given the server whose command line is server; file is
    where the session's own server file goes, for the formats that read one."""
    build = BUILDERS.get(fmt)
    if build is None:
        raise ValueError(f"unknown MCP format {fmt!r}")
    return build(server[0], server[1:], file)


def with_settings(settings: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """A settings file's content with our server added to the servers it names already."""
    theirs = settings.get("mcpServers")
    servers = {**(theirs if isinstance(theirs, dict) else {}), **ours.get("mcpServers", {})}
    return {**settings, "mcpServers": servers} if servers else settings


def _servers(entry: dict[str, Any]) -> str:
    return json.dumps({"mcpServers": {SERVER: entry}}, indent=1)
