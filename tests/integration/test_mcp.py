"""hostagentctl mcp on a real system bus: alice's agent-side client creates a session through
it, types into it, waits for it and reads its answer; bob's server may list hers (reading is
open to every local user, as ps is) and is refused acting on each, as the daemon refuses bob."""

from __future__ import annotations

import json
import secrets
import subprocess
from typing import Any

from tests.integration.helpers import create, props, until
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

    def tool(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        return self.call("tools/call", {"name": tool, "arguments": arguments})

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
        # Its answer, once the agent has read the line (idle before and after it).
        until(lambda: "You said: hello from a parent"
              in alice.tool("capture_screen", name=made)["structuredContent"]["screen"],
              "the child's answer read through the server")  # fmt: skip
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


# Run inside a session: each call to hostagentctl mcp, its answer read before the next; the
# answers go to the file named first.
CALLER = """
import json, subprocess, sys, time
server = subprocess.Popen(["hostagentctl", "--system", "mcp"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
answers = []
deadline = time.monotonic() + 60
for i, call in enumerate(json.load(open(sys.argv[2]))):
    until = call.pop("until", None)  # asked again until its text holds this, as a poll
    while True:
        server.stdin.write(json.dumps(dict(jsonrpc="2.0", id=i, **call)) + "\\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())
        text = json.dumps(answer)
        if until is None or until in text or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    answers.append(answer)
server.stdin.close()
server.wait()
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump(answers, f)
"""

AGENT_SHELL = """\
name: agent-shell
description: a shell with an agent's rights, for the test
command: []
prompt_args: []
"""


def test_from_inside_an_agents_session_only_the_sessions_it_made_are_driven(sb: Sandbox) -> None:
    """A session whose preset has an agent's rights (rights: tree, the default) makes a child
    through the MCP server from inside, types into it and reads it; its owner's other session
    is refused. The child names its parent, and outlives its removal."""
    sb.sh("mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/agent-shell.yaml",
          input=AGENT_SHELL).check()  # fmt: skip
    sb.ctl("reload").check()
    other = create(sb, "shell", user="alice")
    parent = create(sb, "agent-shell", user="alice", cwd="/home/alice")
    child = f"child-{secrets.token_hex(3)}"
    out = f"/dev/shm/mcp-{secrets.token_hex(3)}"
    calls = [
        {"method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
        {"method": "tools/call", "params": {"name": "create_session", "arguments": {
            "preset": "demo-agent", "name": child, "env": {"DEMO_AGENT_THINK": "0"}}}},
        {"method": "tools/call", "params": {"name": "wait_sessions", "arguments": {
            "names": [child], "activities": ["idle"], "timeout_seconds": 30}}},
        {"method": "tools/call", "params": {"name": "send_text", "arguments": {
            "name": child, "text": "from my parent"}}},
        {"method": "tools/call", "params": {"name": "wait_sessions", "arguments": {
            "names": [child], "activities": ["idle"], "timeout_seconds": 30}}},
        {"method": "tools/call", "params": {"name": "capture_screen", "arguments": {
            "name": child}}, "until": "You said: from my parent"},
        {"method": "tools/call", "params": {"name": "send_text", "arguments": {
            "name": other, "text": "not yours to type into"}}},
    ]  # fmt: skip
    sb.sh(f"cat > {out}.py", input=CALLER).check()
    sb.sh(f"cat > {out}.json", input=json.dumps(calls)).check()
    try:
        # Typed into the parent's own shell: the server runs inside it, as its agent's would.
        sb.ctl("send", parent, f"python3 {out}.py {out} {out}.json && mv {out}.tmp {out}",
               user="alice", system=True).check()  # fmt: skip
        until(lambda: sb.run("test", "-e", out).returncode == 0, "the calls were made", 90)
        results = [a.get("result", {}) for a in json.loads(sb.run("cat", out).check().stdout)]
        assert results[1]["isError"] is False, results[1]
        assert "You said: from my parent" in results[5]["structuredContent"]["screen"]
        assert results[6]["isError"] is True
        assert "only the sessions it made" in results[6]["content"][0]["text"], results[6]
        assert props(sb, child, user="alice")["Parent"] == parent
        # Outside every session, alice acts on the child as on any session of hers; removing
        # the parent keeps the child.
        sb.ctl("rm", parent, user="alice", system=True).check()
        assert props(sb, child, user="alice")["State"] == "running"
        assert not props(sb, child, user="alice")["Parent"]  # its parent is gone
    finally:
        for name in (other, parent, child):
            sb.ctl("rm", "--force", name)
        sb.run("sh", "-c", f"rm -f {out} {out}.py {out}.json {out}.tmp")
        sb.run("rm", "-f", "/etc/hostagent/presets.d/agent-shell.yaml")
        sb.ctl("reload")
