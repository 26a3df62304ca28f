"""The two eras of the Model Context Protocol that hostagentctl mcp serves, and which one a
request is of.

Revisions 2025-03-26 to 2025-11-25 open with the initialize handshake and agree one revision
for the connection. Revision 2026-07-28 has neither handshake nor session: each request
carries its revision and the client's capabilities in ``params._meta`` (the keys below), the
server answers ``server/discover`` with what it serves, and every result says its
``resultType``. A client's first request decides the connection's era, once, as the official
SDK's dual-era server does: a request with the 2026 envelope (other than initialize, which
that revision does not have) opens a modern connection, anything else a legacy one. A later
request of the other era is refused: initialize on a modern connection with the revision's
unsupported-version error, naming what is served, and an enveloped request on a legacy one as
an invalid request.

Pure: these functions decide, mcp_protocol.py answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Era = Literal["", "legacy", "modern"]  # "" until the first request
MODERN_REVISIONS = ("2026-07-28",)  # newest first, as REVISIONS
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
# JSON-RPC's error codes, and the 2026 revision's UnsupportedProtocolVersionError.
PARSE_ERROR, INVALID_REQUEST, NO_METHOD, INVALID_PARAMS = -32700, -32600, -32601, -32602
UNSUPPORTED_VERSION = -32022
# How long a client may keep tools/list and server/discover (the revision requires the hint).
# 0, immediately stale: one client reads one stdio server, so a longer one gains nothing, and
# "private" keeps the answer to whoever asked.
TTL_MS, CACHE_SCOPE = 0, "private"


@dataclass(frozen=True)
class Refusal:
    """A request the envelope rules refuse: the JSON-RPC error it is answered with."""

    code: int
    message: str
    data: dict[str, Any] | None = None


def claims_modern(method: str, params: dict[str, Any]) -> bool:
    """Whether a request claims the 2026 era: its _meta names a protocol version. The key's
    prefix is reserved, so no older client writes it (a bare _meta is no claim: older requests
    carry a progressToken there); initialize never claims it, as that revision has none."""
    meta = params.get("_meta")
    return method != "initialize" and isinstance(meta, dict) and VERSION_KEY in meta


def opening_era(method: str, params: dict[str, Any]) -> Era:
    """The era a connection's first request opens."""
    return "modern" if claims_modern(method, params) else "legacy"


def refusal(era: Era, method: str, params: dict[str, Any]) -> Refusal | None:
    """Why a request is refused on a connection of era (None: it is served). A modern
    request's envelope is checked as the revision orders it: the _meta object with both
    required keys, then the version's type, then whether it is served."""
    if era == "legacy":
        if claims_modern(method, params):
            return Refusal(
                INVALID_REQUEST,
                "this connection opened with the initialize handshake (revisions up to "
                "2025-11-25); a request with the 2026-07-28 envelope is not taken on it",
            )
        return None
    if method == "initialize":
        asked = params.get("protocolVersion")
        return Refusal(
            UNSUPPORTED_VERSION,
            "this connection serves revision 2026-07-28, which has no initialize handshake; "
            "start a new connection to use it",
            _unsupported(asked) if isinstance(asked, str) else {"supported": [*MODERN_REVISIONS]},
        )
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return Refusal(
            INVALID_PARAMS,
            f"params._meta is an object with {VERSION_KEY!r} and {CAPABILITIES_KEY!r}: this "
            "connection serves revision 2026-07-28, where each request carries them",
        )
    missing = [key for key in (VERSION_KEY, CAPABILITIES_KEY) if key not in meta]
    if missing:
        return Refusal(INVALID_PARAMS, f"params._meta lacks {', '.join(map(repr, missing))}")
    version = meta[VERSION_KEY]
    if not isinstance(version, str):
        return Refusal(INVALID_PARAMS, f"{VERSION_KEY!r} is a string")
    if version not in MODERN_REVISIONS:
        return Refusal(
            UNSUPPORTED_VERSION,
            f"revision {version!r} is not served here; this connection serves "
            f"{', '.join(MODERN_REVISIONS)}",
            _unsupported(version),
        )
    return None


def _unsupported(asked: str) -> dict[str, Any]:
    return {"supported": [*MODERN_REVISIONS], "requested": asked}


def discovered(capabilities: dict[str, Any], instructions: str) -> dict[str, Any]:
    """server/discover's result: the revisions served (the 2026 ones: a client that asks is
    of that era, and the connection is now), what the server offers, and how to use it."""
    result: dict[str, Any] = {
        "supportedVersions": [*MODERN_REVISIONS],
        "capabilities": capabilities,
        "ttlMs": TTL_MS,
        "cacheScope": CACHE_SCOPE,
    }
    return {**result, "instructions": instructions} if instructions else result


def modern_result(method: str, result: dict[str, Any], server: dict[str, str]) -> dict[str, Any]:
    """result as the 2026 revision shapes it: its resultType (this server's are all
    complete: it never asks the client for input), the caching hint the list methods require,
    and the server's name and version in _meta, which a server should put on every result."""
    shaped = {**result, "resultType": "complete", "_meta": {SERVER_INFO_KEY: server}}
    if method == "tools/list":
        shaped = {"ttlMs": TTL_MS, "cacheScope": CACHE_SCOPE, **shaped}
    return shaped
