"""hostagentctl mcp's server as the official MCP SDK's client sees it: the handshake, the tools
and their schemas, a call's structured answer and a refusal as the tool's error all parse as
the SDK's own types. The SDK is in the test venv only (docs/decisions.md)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

mcp_sdk = pytest.importorskip("mcp", reason="the official MCP SDK is in the test extras")

ROOT = Path(__file__).resolve().parents[2]
# The real tools and protocol over a stand-in for the daemon's client.
SERVER = """
import asyncio
from hostagent.cli import mcp, mcp_stdio
from hostagent.cli.mcp_protocol import Server
from hostagent.client.library import SessionRow
from hostagent.errors import AccessDenied

class Daemon:
    async def list_sessions(self):
        return [SessionRow("worker", "demo-agent", "running", "idle", 1000, "/w")]
    async def wait_any(self, names, activities, timeout):
        return names[0], "idle"
    async def capture(self, name, lines):
        return "You said: hi"
    async def send_text(self, name, text, enter):
        raise AccessDenied(f"Access denied: session {name!r} belongs to another user.")

server = Server(mcp.tools(Daemon(), 1000), version="test", instructions="drive sessions")
asyncio.run(mcp_stdio.serve_stdio(server))
"""


def test_the_official_client_speaks_with_the_server() -> None:
    """The handshake of the SDK's own ClientSession, as clients of 2025-11-25 do it."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def body() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-c", SERVER], cwd=ROOT)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            hello = await session.initialize()
            assert hello.server_info.name == "hostagent"
            listed = await session.list_tools()
            assert {t.name for t in listed.tools} >= {"create_session", "wait_sessions"}
            waited = await session.call_tool("wait_sessions", {"names": ["worker"]})
            assert not waited.is_error
            assert waited.structured_content == {
                "name": "worker",
                "activity": "idle",
                "screen": "You said: hi",
            }
            refused = await session.call_tool("send_text", {"name": "other", "text": "hi"})
            assert refused.is_error
            assert "belongs to another user" in refused.content[0].text  # type: ignore[union-attr]

    asyncio.run(asyncio.wait_for(body(), 30))


@pytest.mark.parametrize(
    ("mode", "revision"),
    [
        ("legacy", "2025-11-25"),  # the initialize handshake
        ("auto", "2026-07-28"),  # server/discover answered: the stateless revision, no handshake
        ("2026-07-28", "2026-07-28"),  # pinned: each request's envelope, not even a discover
    ],
)
def test_the_official_client_speaks_each_era_with_the_server(mode: str, revision: str) -> None:
    """The SDK's Client in each of its modes: it validates every result against the revision
    it speaks (2026-07-28's resultType, caching hints, discover's fields)."""
    from mcp import Client, StdioServerParameters

    async def body() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-c", SERVER], cwd=ROOT)
        async with Client(params, mode=mode) as client:
            assert client.protocol_version == revision
            if mode == "auto":
                discovered = client.session.discover_result
                assert discovered is not None and discovered.supported_versions == [revision]
                assert client.instructions == "drive sessions"
                assert client.server_info is not None and client.server_info.name == "hostagent"
                assert client.server_capabilities.tools is not None
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} >= {"create_session", "wait_sessions"}
            waited = await client.call_tool("wait_sessions", {"names": ["worker"]})
            assert not waited.is_error
            assert waited.structured_content == {
                "name": "worker",
                "activity": "idle",
                "screen": "You said: hi",
            }
            refused = await client.call_tool("send_text", {"name": "other", "text": "hi"})
            assert refused.is_error
            assert "belongs to another user" in refused.content[0].text  # type: ignore[union-attr]

    asyncio.run(asyncio.wait_for(body(), 30))
