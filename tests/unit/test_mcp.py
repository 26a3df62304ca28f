"""hostagentctl mcp's protocol: the handshake, tools/list and tools/call, errors for broken
lines and bad arguments (the server reads on), a refusal as the tool's error, a wait that does
not hold up a ping, and a closed stdin that ends the server."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from hostagent.cli import mcp, mcp_stdio
from hostagent.cli.ctl_list import as_tree
from hostagent.cli.mcp_protocol import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    NO_METHOD,
    PARSE_ERROR,
    REVISIONS,
    Server,
    Tool,
    ToolError,
    check,
)
from hostagent.client.library import SessionRow
from hostagent.errors import AccessDenied, Timeout


async def _echo(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if args.get("text") == "refuse":
        raise ToolError("refused: ask its owner")
    return args["text"], {"text": args["text"]}


ECHO = Tool(
    "echo",
    "says it back",
    {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
    _echo,
)


def ask(server: Server, message: object) -> dict[str, Any] | None:
    line = message if isinstance(message, bytes) else json.dumps(message).encode()
    answer = asyncio.run(server.answer(line))
    return None if answer is None else json.loads(answer)


def request(method: str, params: object = None, ident: object = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    return message if params is None else {**message, "params": params}


@pytest.mark.parametrize(
    ("asked", "agreed"),
    [
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", REVISIONS[0]),
        ("1999-01-01", REVISIONS[0]),
    ],
)
def test_the_handshake_agrees_a_revision_and_offers_tools(asked: str, agreed: str) -> None:
    answer = ask(Server([ECHO], version="9"), request("initialize", {"protocolVersion": asked}))
    assert answer is not None
    assert answer["result"]["protocolVersion"] == agreed
    assert answer["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert answer["result"]["serverInfo"] == {"name": "hostagent", "version": "9"}


def test_tools_are_listed_with_their_schemas_and_called() -> None:
    server = Server([ECHO])
    listed = ask(server, request("tools/list"))
    assert listed is not None and listed["result"]["tools"][0]["inputSchema"] == ECHO.schema
    called = ask(server, request("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert called is not None
    assert called["result"] == {
        "content": [{"type": "text", "text": "hi"}],
        "structuredContent": {"text": "hi"},
        "isError": False,
    }
    refused = ask(server, request("tools/call", {"name": "echo", "arguments": {"text": "refuse"}}))
    assert refused is not None and refused["result"]["isError"] is True
    assert refused["result"]["content"][0]["text"] == "refused: ask its owner"
    assert ask(server, request("ping")) == {"jsonrpc": "2.0", "id": 1, "result": {}}


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"{not json", PARSE_ERROR),
        (b"\xff\xfe", PARSE_ERROR),
        (b"[]", INVALID_REQUEST),
        (b'{"id": 1, "method": "ping"}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 1}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "resources/list"}', NO_METHOD),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}', INVALID_PARAMS),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}',
            INVALID_PARAMS,
        ),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
            b'{"name": "echo", "arguments": {"text": 3}}}',
            INVALID_PARAMS,
        ),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": []}', INVALID_PARAMS),
    ],
)
def test_a_broken_message_gets_its_error_and_the_server_reads_on(line: bytes, code: int) -> None:
    server = Server([ECHO])
    answer = ask(server, line)
    assert answer is not None and answer["error"]["code"] == code
    assert ask(server, request("ping", ident="next")) == {
        "jsonrpc": "2.0",
        "id": "next",
        "result": {},
    }


def test_notifications_and_responses_get_no_answer() -> None:
    server = Server([ECHO])
    assert ask(server, {"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    assert (
        ask(
            server,
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
        )
        is None
    )
    assert ask(server, {"jsonrpc": "2.0", "id": 7, "result": {}}) is None


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"names": ["a"]}, ""),
        ({}, "'names' is required"),
        ({"names": "a"}, "'names' must be of type array"),
        ({"names": [1]}, "'names' holds an item that must be of type string"),
        ({"names": ["a"], "timeout_seconds": -1}, "'timeout_seconds' must be at least 0"),
        ({"names": ["a"], "timeout_seconds": True}, "'timeout_seconds' must be of type number"),
        (
            {"names": ["a"], "activities": ["asleep"]},
            "'activities' holds an item that must be "
            "one of working, blocked, idle, exited, unknown",
        ),
        (
            {"names": ["a"], "colour": "red"},
            "no argument 'colour'; it takes names, activities, timeout_seconds, all",
        ),
        ([], "arguments are an object"),
    ],
)
def test_arguments_are_checked_against_the_tools_schema(arguments: object, problem: str) -> None:
    wait = next(t for t in mcp.tools(FakeClient()) if t.name == "wait_sessions")  # type: ignore[arg-type]
    assert check(wait.schema, arguments) == problem


ALICE = 1000


class FakeClient:
    """The client library's calls the tools make, answered from memory; a wait parks until
    released, and alice's other session is refused as the daemon would refuse it."""

    def __init__(self) -> None:
        self.typed: list[tuple[str, str, bool]] = []
        self.release = asyncio.Event()

    async def send_text(self, name: str, text: str, enter: bool) -> None:
        if name == "other":
            raise AccessDenied("Session 'other' is not yours to type into.")
        self.typed.append((name, text, enter))

    async def wait_any(
        self, names: list[str], activities: list[str], timeout: int
    ) -> tuple[str, str]:
        await self.release.wait()
        return names[0], "idle"

    async def list_sessions(self) -> list[SessionRow]:
        """Hers, and bob's (which her server does not show her)."""
        mine, bobs = ALICE, ALICE + 1
        return [
            SessionRow(n, "shell", "running", "idle", uid, f"/s/{n}")
            for n, uid in (("a", mine), ("other", mine), ("bobs", bobs))
        ]

    async def capture(self, name: str, lines: int) -> str:
        return "Demo Agent\n\n● You said: hello\n> \n\n\n"


def test_a_refusal_is_the_tools_error_and_a_wait_holds_up_no_ping() -> None:
    async def body() -> list[dict[str, Any]]:
        client = FakeClient()
        server = Server(mcp.tools(client, ALICE))  # type: ignore[arg-type]
        reader = asyncio.StreamReader()
        written: list[dict[str, Any]] = []
        pinged = asyncio.Event()

        def write(data: bytes) -> None:
            written.append(json.loads(data))
            if written[-1].get("id") == "ping":
                pinged.set()

        lines = [
            request("tools/call", {"name": "wait_sessions", "arguments": {"names": ["a"]}}, "wait"),
            request("ping", ident="ping"),
            request(
                "tools/call",
                {"name": "send_text", "arguments": {"name": "other", "text": "hi"}},
                "other",
            ),
        ]
        for message in lines:
            reader.feed_data(json.dumps(message).encode() + b"\n")
        serving = asyncio.create_task(mcp_stdio.serve(server, reader, write))
        await asyncio.wait_for(pinged.wait(), 5)  # answered while the wait still waits
        assert not any(w.get("id") == "wait" for w in written)
        client.release.set()
        while not any(w.get("id") == "wait" for w in written):
            await asyncio.sleep(0)
        reader.feed_data(b"{broken\n")
        reader.feed_eof()  # the client is gone: the server ends
        await asyncio.wait_for(serving, 5)
        return written

    written = {str(w.get("id")): w for w in asyncio.run(body())}
    # What it last said comes with the wait: the screen's last lines that hold anything.
    screen = "Demo Agent\n● You said: hello\n>"
    assert written["wait"]["result"]["structuredContent"] == {
        "name": "a",
        "activity": "idle",
        "screen": screen,
    }
    assert written["wait"]["result"]["content"][0]["text"].endswith(screen)
    assert written["other"]["result"]["isError"] is True
    assert "not yours" in written["other"]["result"]["content"][0]["text"]
    assert written["None"]["error"]["code"] == PARSE_ERROR


def test_a_closed_stdin_cancels_what_still_waits() -> None:
    async def body() -> None:
        client = FakeClient()
        reader = asyncio.StreamReader()
        call = request("tools/call", {"name": "wait_sessions", "arguments": {"names": ["a"]}})
        reader.feed_data(json.dumps(call).encode() + b"\n")
        reader.feed_eof()
        tools = mcp.tools(client, ALICE)  # type: ignore[arg-type]
        await asyncio.wait_for(mcp_stdio.serve(Server(tools), reader, lambda d: None), 5)

    asyncio.run(body())


@pytest.mark.parametrize("given", ["/dev/null", "file", "pipe", "closed"])
def test_the_server_ends_when_its_input_ends_whatever_the_input_is(
    given: str, tmp_path: Path
) -> None:
    """`hostagentctl mcp </dev/null` printed a traceback (epoll cannot wait on /dev/null or a
    file) and then waited for ever; each kind of input is read to its end and answered."""
    ping = json.dumps(request("ping")).encode() + b"\n"

    async def body() -> list[bytes]:
        if given == "closed":
            stream = None
        elif given == "pipe":
            read_end, write_end = os.pipe()
            os.write(write_end, ping)
            os.close(write_end)
            stream = open(read_end, "rb")  # noqa: SIM115 (closed below)
        else:
            path = tmp_path / "in" if given == "file" else Path(given)
            if given == "file":
                path.write_bytes(ping)
            stream = path.open("rb")
        written: list[bytes] = []
        try:
            reader = await mcp_stdio.input_reader(stream)
            tools = mcp.tools(FakeClient(), ALICE)  # type: ignore[arg-type]
            await asyncio.wait_for(mcp_stdio.serve(Server(tools), reader, written.append), 5)
        finally:
            if stream is not None:
                stream.close()
        return written

    written = asyncio.run(body())
    assert len(written) == (0 if given in ("/dev/null", "closed") else 1)


def test_an_agent_is_shown_its_own_users_sessions_only() -> None:
    async def body() -> tuple[dict[str, Any], ...]:
        server = Server(mcp.tools(FakeClient(), ALICE))  # type: ignore[arg-type]
        asked = [
            request("tools/call", {"name": "list_sessions", "arguments": {}}, 1),
            request("tools/call", {"name": "session_status", "arguments": {"name": "bobs"}}, 2),
            request("tools/call", {"name": "wait_sessions", "arguments": {"names": ["bobs"]}}, 3),
        ]
        answers = [await server.answer(json.dumps(m).encode()) for m in asked]
        return tuple(json.loads(a or b"{}")["result"] for a in answers)

    listed, status, waited = asyncio.run(body())
    assert [r["name"] for r in listed["structuredContent"]["sessions"]] == ["a", "other"]
    for refused in (status, waited):
        assert refused["isError"] is True
        assert "No session 'bobs' is yours to see" in refused["content"][0]["text"]


@pytest.mark.parametrize(
    ("parents", "shown"),
    [
        ({"a": "", "b": ""}, [("a", 0), ("b", 0)]),
        # made from inside: under its maker, its own under it; the rest keep their order
        ({"a": "", "b": "", "c": "a", "d": "c"}, [("a", 0), ("c", 1), ("d", 2), ("b", 0)]),
        ({"c": "gone", "d": "c"}, [("c", 0), ("d", 1)]),  # its maker not listed (removed)
        ({"x": "y", "y": "x"}, [("x", 0), ("y", 1)]),  # a loop no create makes: each once
    ],
)
def test_list_shows_the_sessions_made_from_inside_another_under_it(
    parents: dict[str, str], shown: list[tuple[str, int]]
) -> None:
    items = [{"name": n, **({"parent": p} if p else {})} for n, p in parents.items()]
    ordered, depths = as_tree(items, lambda i: i["name"], lambda i: i.get("parent", ""))
    assert [(i["name"], d) for i, d in zip(ordered, depths, strict=True)] == shown


class Arrivals(FakeClient):
    """Sessions that reach an activity in a given order; "late" never does (the daemon's
    Timeout once the time asked for is up)."""

    async def wait_any(
        self, names: list[str], activities: list[str], timeout: int
    ) -> tuple[str, str]:
        ready = [n for n in ("b", "a") if n in names]
        if not ready:
            raise Timeout("No session reached the activities in time.")
        return ready[0], "blocked" if ready[0] == "b" else "idle"

    async def list_sessions(self) -> list[SessionRow]:
        return [SessionRow(n, "shell", "running", "idle", ALICE, f"/s/{n}") for n in "ab"] + [
            SessionRow("late", "shell", "running", "working", ALICE, "/s/late")
        ]


@pytest.mark.parametrize(
    ("names", "waits_for_all", "shown", "waiting"),
    [
        (["a", "b"], False, ["b"], None),  # the first to arrive
        (["a", "b"], True, ["b", "a"], []),  # every one, in the order they arrived
        (["a", "late"], True, ["a"], ["late"]),  # the timeout came first: what did arrive
    ],
)
def test_a_wait_returns_the_first_or_every_one(
    names: list[str], waits_for_all: bool, shown: list[str], waiting: list[str] | None
) -> None:
    async def body() -> dict[str, Any]:
        server = Server(mcp.tools(Arrivals(), ALICE))  # type: ignore[arg-type]
        args = {"names": names, "all": waits_for_all, "timeout_seconds": 1}
        call = request("tools/call", {"name": "wait_sessions", "arguments": args})
        answer = await server.answer(json.dumps(call).encode())
        return json.loads(answer or b"{}")["result"]  # type: ignore[no-any-return]

    result = asyncio.run(body())
    assert result["isError"] is False, result
    structured = result["structuredContent"]
    if waiting is None:
        assert structured["name"] == shown[0]
    else:
        assert [s["name"] for s in structured["sessions"]] == shown
        assert structured["waiting"] == waiting
