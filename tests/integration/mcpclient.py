"""hostagentctl mcp as an agent CLI speaks to it: started as a user inside a test machine,
one JSON-RPC line at a time, each answer read before the next."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.sandbox import Sandbox


class McpClient:
    """hostagentctl mcp run as user, spoken to line by line, as an agent CLI speaks to it."""

    def __init__(self, sb: Sandbox, user: str, *where: str) -> None:
        """where: hostagentctl's options before the verb (default: --system)."""
        where = where or ("--system",)
        self.proc: subprocess.Popen = sb.popen("hostagentctl", *where, "mcp", user=user)
        self.next_id = 0
        hello = self.call(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
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

    def tool(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        return self.call("tools/call", {"name": tool, "arguments": arguments})

    def close(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()  # how a client ends a stdio server
        code = self.proc.wait(timeout=30)
        self.proc.stdout.close()
        if self.proc.stderr is not None:  # read by nobody, but a pipe all the same
            self.proc.stderr.close()
        return code
