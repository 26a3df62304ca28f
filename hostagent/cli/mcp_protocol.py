"""The Model Context Protocol as hostagentctl mcp speaks it: JSON-RPC 2.0 messages, one per
line on stdin and stdout (MCP's stdio transport), and the tools capability alone. Two eras are
served (mcp_envelope.py): revisions 2025-03-26 to 2025-11-25, with the initialize handshake,
and revision 2026-07-28, stateless, each request with its envelope and server/discover.

What a message is answered with is decided here, apart from any bus: ``Server.answer`` takes a
line and gives the line to write back (None for a notification), calling the tools it was
given. A broken line gets a JSON-RPC error and the server reads on. A tool that fails says so
in its result (``isError``), with a message that says what to do, as the specification asks,
so that the agent can act on it; only a call that names no tool, or gives arguments its schema
refuses, is a protocol error.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from hostagent.cli.mcp_envelope import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    NO_METHOD,
    PARSE_ERROR,
    Era,
    discovered,
    modern_result,
    opening_era,
    refusal,
)

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_LINE",
    "NO_METHOD",
    "PARSE_ERROR",
    "REVISIONS",
    "Server",
    "Tool",
    "ToolError",
    "check",
    "error_line",
]

# The handshake's revisions, newest first; a client asking for another revision is answered with the first (the
# specification's negotiation: it then decides whether it can go on).
REVISIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
MAX_LINE = 8 << 20  # a message longer than this is not read whole (a parse error)


class ToolError(Exception):
    """A tool could not do what it was asked: its message is for the agent, and says what to
    do instead."""


@dataclass(frozen=True)
class Tool:
    """One tool: its name, what it does (for the agent that picks it), the JSON Schema of its
    arguments, and run(arguments) -> (text, structured content)."""

    name: str
    description: str
    schema: dict[str, Any]
    run: Callable[[dict[str, Any]], Awaitable[tuple[str, dict[str, Any]]]]
    title: str = ""

    def listed(self) -> dict[str, Any]:
        shown = {"name": self.name, "description": self.description, "inputSchema": self.schema}
        return {**shown, "title": self.title} if self.title else shown


@dataclass
class Server:
    """The protocol's state: the tools, the connection's era (decided by its first request),
    and on a legacy connection the revision agreed on (none before initialize)."""

    tools: list[Tool]
    name: str = "hostagent"
    version: str = ""
    instructions: str = ""
    revision: str = ""
    era: Era = ""
    _by_name: dict[str, Tool] = field(init=False)

    def __post_init__(self) -> None:
        self._by_name = {t.name: t for t in self.tools}

    async def answer(self, line: bytes) -> bytes | None:
        """The line to write back for line (without its newline); None for a notification."""
        try:
            message = json.loads(line)
        except (ValueError, UnicodeDecodeError) as e:
            return error_line(None, PARSE_ERROR, f"not JSON: {e}")
        if isinstance(message, list):
            return error_line(
                None, INVALID_REQUEST, "batches are not taken; send one message a line"
            )
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return error_line(
                None, INVALID_REQUEST, 'a message is a JSON object with "jsonrpc": "2.0"'
            )
        ident = message.get("id")
        method = message.get("method")
        if not isinstance(method, str):
            # A response to a request of ours (we send none), or nonsense: nothing to answer.
            return (
                None
                if "result" in message or "error" in message
                else error_line(ident, INVALID_REQUEST, "a request names its method")
            )
        notification = "id" not in message
        if not (ident is None or isinstance(ident, str | int)) or (
            ident is None and not notification
        ):
            return error_line(None, INVALID_REQUEST, "a request's id is a string or an integer")
        params = message.get("params", {})
        if not isinstance(params, dict):
            return (
                None if notification else error_line(ident, INVALID_PARAMS, "params is an object")
            )
        if notification:
            return None  # notifications/initialized, cancelled, ...: nothing is owed
        # Decided before the first await: serve() starts a task a line, in the order read, so
        # the first request read is the one that opens the era.
        self.era = self.era or opening_era(method, params)
        refused = refusal(self.era, method, params)
        if refused:
            return error_line(ident, refused.code, refused.message, refused.data)
        try:
            if self.era == "modern":
                result = modern_result(method, await self._modern(method, params), self._info())
            else:
                result = await self._call(method, params)
        except _Refused as e:
            return error_line(ident, e.code, str(e))
        return _line({"jsonrpc": "2.0", "id": ident, "result": result})

    def _info(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version}

    async def _modern(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A 2026-07-28 request, its envelope checked: no handshake and no ping there."""
        if method == "server/discover":
            return discovered(_CAPABILITIES, self.instructions)
        if method in ("tools/list", "tools/call"):
            return await self._call(method, params)
        raise _Refused(
            NO_METHOD,
            f"no method {method!r} in revision 2026-07-28; this server offers server/discover, "
            "tools/list and tools/call",
        )

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            asked = params.get("protocolVersion")
            if not isinstance(asked, str):
                raise _Refused(INVALID_PARAMS, "initialize names the protocolVersion it speaks")
            self.revision = asked if asked in REVISIONS else REVISIONS[0]
            result: dict[str, Any] = {
                "protocolVersion": self.revision,
                "capabilities": _CAPABILITIES,
                "serverInfo": self._info(),
            }
            return {**result, "instructions": self.instructions} if self.instructions else result
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [t.listed() for t in self.tools]}
        if method == "tools/call":
            return await self._tool(params)
        raise _Refused(NO_METHOD, f"no method {method!r}; this server offers tools alone")

    async def _tool(self, params: dict[str, Any]) -> dict[str, Any]:
        tool = self._by_name.get(params.get("name"))  # type: ignore[arg-type]
        if tool is None:
            known = ", ".join(self._by_name)
            raise _Refused(INVALID_PARAMS, f"no tool {params.get('name')!r}; the tools: {known}")
        arguments = params.get("arguments", {})
        problem = check(tool.schema, arguments)
        if problem:
            raise _Refused(INVALID_PARAMS, f"{tool.name}: {problem}")
        try:
            text, structured = await tool.run(arguments)
        except ToolError as e:
            return {"content": [{"type": "text", "text": str(e)}], "isError": True}
        return {
            "content": [{"type": "text", "text": text}],
            "structuredContent": structured,
            "isError": False,
        }


_CAPABILITIES = {"tools": {"listChanged": False}}


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def error_line(ident: object, code: int, message: str, data: object = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _line({"jsonrpc": "2.0", "id": ident, "error": error})


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def check(schema: dict[str, Any], arguments: object) -> str:
    """What is wrong with arguments for schema ("" when nothing is): the subset of JSON Schema
    the tools use (an object's properties, required, types, an array's items, an object's
    string values, enum, minimum)."""
    if not isinstance(arguments, dict):
        return "arguments are an object"
    properties: dict[str, Any] = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in arguments:
            return f"{key!r} is required"
    for key, value in arguments.items():
        spec = properties.get(key)
        if spec is None:
            return f"no argument {key!r}; it takes {', '.join(properties) or 'none'}"
        problem = _check_value(spec, value)
        if problem:
            return f"{key!r} {problem}"
    return ""


def _check_value(spec: dict[str, Any], value: object) -> str:
    kind = spec.get("type", "")
    wanted = _TYPES.get(kind, (object,))
    if not isinstance(value, wanted) or (isinstance(value, bool) and kind in ("integer", "number")):
        return f"must be of type {kind}"
    if "enum" in spec and value not in spec["enum"]:
        return f"must be one of {', '.join(map(str, spec['enum']))}"
    if "minimum" in spec and isinstance(value, int | float) and value < spec["minimum"]:
        return f"must be at least {spec['minimum']}"
    if kind == "array":
        assert isinstance(value, list)
        for item in value:
            problem = _check_value(spec.get("items", {}), item)
            if problem:
                return f"holds an item that {problem}"
    if kind == "object" and "additionalProperties" in spec:
        assert isinstance(value, dict)
        for item in value.values():
            problem = _check_value(spec["additionalProperties"], item)
            if problem:
                return f"holds a value that {problem}"
    return ""
