"""hostagentctl mcp on a real system bus: alice's agent-side client creates a session through
it, types into it, waits for it and reads its answer; bob's server may list hers (reading is
open to every local user, as ps is) and is refused acting on each, as the daemon refuses bob."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.sandbox import Sandbox


class McpClient:
    """hostagentctl mcp run as user, spoken to line by line, as an agent CLI speaks to it."""

    def __init__(self, sb: Sandbox, user: str) -> None:
        self.proc: subprocess.Popen = sb.popen("hostagentctl", "--system", "mcp", user=user)
        self.next_id = 0
        hello = self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": "test", "version": "0"}})  # fmt: skip
        assert hello["protocolVersion"] == "2025-06-18"
        self.notify("notifications/initialized")

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def notify(self, method: str) -> None:
        self.send({"jsonrpc": "2.0", "method": method})

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.proc.stdout is not None
        answer = json.loads(self.proc.stdout.readline())
        assert answer["id"] == self.next_id, answer
        assert "result" in answer, answer
        return answer["result"]

    def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        return self.call("tools/call", {"name": name, "arguments": arguments})

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # how a client ends a stdio server
        return self.proc.wait(timeout=30)


def test_an_agent_drives_a_session_through_the_mcp_server(sb: Sandbox) -> None:
    alice = McpClient(sb, "alice")
    made = ""
    try:
        names = [t["name"] for t in alice.call("tools/list", {})["tools"]]
        assert {"create_session", "send_text", "wait_sessions", "capture_screen"} <= set(names)
        created = alice.tool("create_session", preset="demo-agent", cwd="/home/alice",
                             env={"DEMO_AGENT_THINK": "0"})  # fmt: skip
        assert created["isError"] is False, created
        made = created["structuredContent"]["name"]
        waited = alice.tool("wait_sessions", names=[made], activities=["idle"], timeout_seconds=30)
        assert waited["structuredContent"] == {"name": made, "activity": "idle"}
        assert alice.tool("send_text", name=made, text="hello from a parent")["isError"] is False
        alice.tool("wait_sessions", names=[made], activities=["idle"], timeout_seconds=30)
        screen = alice.tool("capture_screen", name=made)["structuredContent"]["screen"]
        assert "You said: hello from a parent" in screen, screen
        status = alice.tool("session_status", name=made)["structuredContent"]
        assert (status["state"], status["preset"]) == ("running", "demo-agent")
    finally:
        assert alice.close() == 0
    bob = McpClient(sb, "bob")
    try:
        listed = bob.tool("list_sessions")["structuredContent"]["sessions"]
        # Reading is open to every local user, as ps is; acting is not.
        assert made in [s["name"] for s in listed]
        refused = bob.tool("send_text", name=made, text="typed by bob")
        assert refused["isError"] is True
        assert "belongs to another user" in refused["content"][0]["text"], refused
        assert bob.tool("stop_session", name=made)["isError"] is True
        assert bob.tool("remove_session", name=made)["isError"] is True
        # A broken line is answered with an error, and the server serves on.
        assert bob.proc.stdin is not None and bob.proc.stdout is not None
        bob.proc.stdin.write("{not json\n")
        bob.proc.stdin.flush()
        assert json.loads(bob.proc.stdout.readline())["error"]["code"] == -32700
        assert bob.call("ping", {}) == {}
    finally:
        assert bob.close() == 0
        if made:
            sb.ctl("rm", made)
