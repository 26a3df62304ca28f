"""The two eras of hostagentctl mcp: which one a connection's first request opens, the
2026-07-28 envelope each modern request carries (refused when missing, broken, or of a
revision not served), a request of the other era once one is decided, and the shape of a
modern answer (server/discover, resultType, the caching hint, the server's name)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from hostagent.cli import mcp_stdio
from hostagent.cli.mcp_envelope import (
    CAPABILITIES_KEY,
    INVALID_PARAMS,
    INVALID_REQUEST,
    NO_METHOD,
    SERVER_INFO_KEY,
    UNSUPPORTED_VERSION,
    VERSION_KEY,
    Era,
    opening_era,
    refusal,
)
from hostagent.cli.mcp_protocol import Server, Tool, ToolError


def envelope(version: object = "2026-07-28", **more: Any) -> dict[str, Any]:
    return {"_meta": {VERSION_KEY: version, CAPABILITIES_KEY: {}}, **more}


@pytest.mark.parametrize(
    ("method", "params", "era"),
    [
        ("server/discover", envelope(), "modern"),
        ("tools/list", envelope("2027-01-01"), "modern"),  # a claim, served or not
        ("tools/list", {"_meta": {VERSION_KEY: "2026-07-28"}}, "modern"),  # half an envelope
        ("initialize", {"protocolVersion": "2025-11-25"}, "legacy"),
        ("initialize", envelope(protocolVersion="2025-11-25"), "legacy"),  # 2026 has none
        ("tools/list", {}, "legacy"),
        ("tools/call", {"name": "echo", "_meta": {"progressToken": 1}}, "legacy"),
        ("tools/list", {"_meta": [VERSION_KEY]}, "legacy"),
    ],
)
def test_the_first_request_opens_an_era(method: str, params: dict[str, Any], era: Era) -> None:
    assert opening_era(method, params) == era


SUPPORTED = ["2026-07-28"]


@pytest.mark.parametrize(
    ("era", "method", "params", "code", "data"),
    [
        # A modern connection: every request carries a served revision and capabilities.
        ("modern", "tools/list", envelope(), None, None),
        ("modern", "tools/list", {}, INVALID_PARAMS, None),
        ("modern", "tools/list", {"_meta": "2026-07-28"}, INVALID_PARAMS, None),
        ("modern", "tools/list", {"_meta": {VERSION_KEY: "2026-07-28"}}, INVALID_PARAMS, None),
        ("modern", "tools/list", {"_meta": {CAPABILITIES_KEY: {}}}, INVALID_PARAMS, None),
        ("modern", "tools/list", envelope(20260728), INVALID_PARAMS, None),
        (
            "modern",
            "tools/call",
            envelope("2025-11-25"),
            UNSUPPORTED_VERSION,
            {"supported": SUPPORTED, "requested": "2025-11-25"},
        ),
        (
            "modern",
            "server/discover",
            envelope("2027-01-01"),
            UNSUPPORTED_VERSION,
            {"supported": SUPPORTED, "requested": "2027-01-01"},
        ),
        # The handshake after a modern opening: the revision's own error, naming what is served.
        (
            "modern",
            "initialize",
            {"protocolVersion": "2025-11-25"},
            UNSUPPORTED_VERSION,
            {"supported": SUPPORTED, "requested": "2025-11-25"},
        ),
        ("modern", "initialize", {}, UNSUPPORTED_VERSION, {"supported": SUPPORTED}),
        # A legacy connection: served as before, whatever its _meta, until a 2026 claim.
        ("legacy", "tools/list", {}, None, None),
        ("legacy", "tools/call", {"_meta": {"progressToken": "t"}}, None, None),
        ("legacy", "initialize", envelope(protocolVersion="2025-11-25"), None, None),
        ("legacy", "tools/list", envelope(), INVALID_REQUEST, None),
        ("legacy", "server/discover", envelope(), INVALID_REQUEST, None),
    ],
)
def test_the_envelope_rules(
    era: Era, method: str, params: dict[str, Any], code: int | None, data: object
) -> None:
    refused = refusal(era, method, params)
    assert (refused and refused.code) == code
    assert (refused and refused.data) == data


async def _echo(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if args["text"] == "refuse":
        raise ToolError("refused: ask its owner")
    return args["text"], {"text": args["text"]}


ECHO = Tool(
    "echo",
    "says it back",
    {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
    _echo,
)


def talk(server: Server, *messages: dict[str, Any]) -> list[dict[str, Any] | None]:
    """server's answers to messages, sent in order on one connection."""

    async def run() -> list[bytes | None]:
        return [await server.answer(json.dumps(m).encode()) for m in messages]

    return [None if a is None else json.loads(a) for a in asyncio.run(run())]


def request(method: str, params: dict[str, Any] | None = None, ident: int = 1) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": ident, "method": method}
    return message if params is None else {**message, "params": params}


def code(answer: dict[str, Any] | None) -> int | None:
    assert answer is not None
    return answer["error"]["code"] if "error" in answer else None


def test_a_modern_connection_discovers_lists_and_calls() -> None:
    server = Server([ECHO], version="9", instructions="use echo")
    discover, listed, called, refused = talk(
        server,
        request("server/discover", envelope()),
        request("tools/list", envelope(), 2),
        request("tools/call", envelope(name="echo", arguments={"text": "hi"}), 3),
        request("tools/call", envelope(name="echo", arguments={"text": "refuse"}), 4),
    )
    stamp = {SERVER_INFO_KEY: {"name": "hostagent", "version": "9"}}
    assert discover == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": False}},
            "instructions": "use echo",
            "ttlMs": 0,
            "cacheScope": "private",
            "resultType": "complete",
            "_meta": stamp,
        },
    }
    assert listed is not None and listed["result"]["tools"][0]["name"] == "echo"
    assert {k: listed["result"][k] for k in ("resultType", "ttlMs", "cacheScope", "_meta")} == {
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": stamp,
    }
    assert called is not None and called["result"] == {
        "content": [{"type": "text", "text": "hi"}],
        "structuredContent": {"text": "hi"},
        "isError": False,
        "resultType": "complete",
        "_meta": stamp,
    }
    assert refused is not None and refused["result"]["isError"] is True
    assert refused["result"]["resultType"] == "complete"
    assert server.era == "modern"


def test_a_modern_connection_refuses_each_bad_request_and_serves_on() -> None:
    answers = talk(
        Server([ECHO]),
        request("tools/list", envelope()),
        request("tools/list", {}, 2),  # no envelope
        request("tools/list", envelope("2025-11-25"), 3),  # a handshake revision
        request("initialize", {"protocolVersion": "2025-11-25"}, 4),
        request("ping", envelope(), 5),  # 2026-07-28 has no ping
        request("tools/call", envelope(name="nope", arguments={}), 6),
        request("tools/list", envelope(), 7),
    )
    assert [code(a) for a in answers] == [
        None,
        INVALID_PARAMS,
        UNSUPPORTED_VERSION,
        UNSUPPORTED_VERSION,
        NO_METHOD,
        INVALID_PARAMS,
        None,
    ]
    assert answers[2] is not None
    assert answers[2]["error"]["data"] == {"supported": SUPPORTED, "requested": "2025-11-25"}


def test_a_legacy_connection_refuses_a_modern_request_and_serves_on() -> None:
    server = Server([ECHO])
    hello, modern, discover, listed = talk(
        server,
        request("initialize", {"protocolVersion": "2025-11-25"}),
        request("tools/list", envelope(), 2),
        request("server/discover", {}, 3),  # no such method in the handshake's revisions
        request("tools/list", {}, 4),
    )
    assert hello is not None and hello["result"]["protocolVersion"] == "2025-11-25"
    assert [code(a) for a in (modern, discover, listed)] == [INVALID_REQUEST, NO_METHOD, None]
    assert listed is not None and "resultType" not in listed["result"]
    assert server.era == "legacy"


def test_a_notification_decides_no_era_and_a_refused_opening_does() -> None:
    # As the SDK's dual-era server: only a request decides, and an enveloped one opens a
    # modern connection even when its revision is not served (its error names the one that is).
    server = Server([ECHO])
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    answers = talk(
        server,
        note,
        request("server/discover", envelope("2027-01-01")),
        request("server/discover", envelope(), 2),
    )
    assert answers[0] is None
    assert [code(a) for a in answers[1:]] == [UNSUPPORTED_VERSION, None]
    assert server.era == "modern"


@pytest.mark.parametrize(
    ("first", "then", "codes"),
    [
        (
            request("server/discover", envelope(), 1),
            [
                request("initialize", {"protocolVersion": "2025-11-25"}, 2),
                request("tools/list", envelope(), 3),
            ],
            {1: None, 2: UNSUPPORTED_VERSION, 3: None},
        ),
        (
            request("initialize", {"protocolVersion": "2025-11-25"}, 1),
            [request("server/discover", envelope(), 2), request("tools/list", {}, 3)],
            {1: None, 2: INVALID_REQUEST, 3: None},
        ),
    ],
)
def test_the_first_line_read_decides_though_all_are_answered_at_once(
    first: dict[str, Any], then: list[dict[str, Any]], codes: dict[int, int | None]
) -> None:
    """serve() answers each line in a task of its own: the era is still the first line's."""

    async def body() -> dict[int, dict[str, Any]]:
        reader = asyncio.StreamReader()
        for message in (first, *then):
            reader.feed_data(json.dumps(message).encode() + b"\n")
        reader.feed_eof()
        written: dict[int, dict[str, Any]] = {}

        def write(data: bytes) -> None:
            answer = json.loads(data)
            written[answer["id"]] = answer

        await asyncio.wait_for(mcp_stdio.serve(Server([ECHO]), reader, write), 5)
        return written

    written = asyncio.run(body())
    assert {ident: code(answer) for ident, answer in written.items()} == codes
