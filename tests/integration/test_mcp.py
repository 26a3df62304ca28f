"""hostagentctl mcp on a real system bus: alice's agent-side client creates a session through
it, types into it, waits for it and reads its answer; bob's server shows him none of hers and
is refused each of them (acting, by the daemon; reading, which the bus leaves open to every
local user as ps is, by the server, which shows an agent its own user's sessions only)."""

from __future__ import annotations

import json
import secrets

from tests.integration.helpers import create, props, until
from tests.integration.mcpclient import McpClient
from tests.sandbox import Sandbox


def test_an_agent_drives_a_session_through_the_mcp_server(sb: Sandbox) -> None:
    alice = McpClient(sb, "alice")
    made = ""
    try:
        names = [t["name"] for t in alice.call("tools/list", {})["tools"]]
        assert {"create_session", "send_text", "wait_sessions", "capture_screen"} <= set(names)
        created = alice.tool(
            "create_session", preset="demo-agent", cwd="/tmp", env={"DEMO_AGENT_THINK": "0"}
        )
        assert created["isError"] is False, created
        made = created["structuredContent"]["name"]
        waited = alice.tool("wait_sessions", names=[made], activities=["idle"], timeout_seconds=30)
        assert waited["structuredContent"]["activity"] == "idle", waited
        assert "Demo Agent" in waited["structuredContent"]["screen"]  # what it shows, with it
        every = alice.tool("wait_sessions", names=[made], all=True, timeout_seconds=30)
        assert [w["name"] for w in every["structuredContent"]["sessions"]] == [made], every
        assert alice.tool("send_text", name=made, text="hello from a parent")["isError"] is False
        # Its answer, once the agent has read the line (idle before and after it).
        until(
            lambda: (
                "You said: hello from a parent"
                in alice.tool("capture_screen", name=made)["structuredContent"]["screen"]
            ),
            "the child's answer read through the server",
        )
        status = alice.tool("session_status", name=made)["structuredContent"]
        assert (status["state"], status["preset"]) == ("running", "demo-agent")
    finally:
        assert alice.close() == 0
    bob = McpClient(sb, "bob")
    try:
        listed = bob.tool("list_sessions")["structuredContent"]["sessions"]
        assert made not in [s["name"] for s in listed]
        refused = bob.tool("send_text", name=made, text="typed by bob")
        assert refused["isError"] is True
        assert "belongs to another user" in refused["content"][0]["text"], refused
        for tool in (
            "session_status",
            "explain_activity",
            "capture_screen",
            "stop_session",
            "resume_session",
            "remove_session",
        ):
            assert bob.tool(tool, name=made)["isError"] is True, tool
        assert bob.tool("wait_sessions", names=[made], timeout_seconds=1)["isError"] is True
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


def called_inside(sb: Sandbox, session: str, out: str, calls: list[dict]) -> list[dict]:
    """Each call's result, made by hostagentctl mcp run inside alice's session (typed into its
    shell, as its agent would run the server), through files at out (where it may write)."""
    sb.sh(f"cat > {out}.py", input=CALLER, user="alice").check()
    sb.sh(f"cat > {out}.json", input=json.dumps(calls), user="alice").check()
    command = f"python3 {out}.py {out} {out}.json && mv {out}.tmp {out}"
    sb.ctl("send", session, command, user="alice", system=True).check()
    until(lambda: sb.run("test", "-e", out).returncode == 0, "the calls were made", 90)
    return [a.get("result", {}) for a in json.loads(sb.run("cat", out).check().stdout)]


AGENT_SHELL = """\
name: agent-shell
description: a shell with an agent's rights, for the test
command: []
prompt_args: []
"""


SANDBOX = ("ProtectSystem=strict", "ProtectHome=read-only", "ReadWritePaths=%{cwd}")


def test_from_inside_an_agents_session_only_the_sessions_it_made_are_driven(sb: Sandbox) -> None:
    """A sandboxed session whose preset has an agent's rights (rights: tree, the default)
    makes a child through the MCP server from inside, types into it and reads it; it sees only
    itself and the child, and its owner's other session is refused. The child is confined as
    its parent, names it, shows under it in list, and outlives its removal."""
    sb.sh(
        "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/agent-shell.yaml",
        input=AGENT_SHELL,
    ).check()
    sb.ctl("reload").check()
    other = create(sb, "shell", user="alice")
    # Its child's state given to it, as a user gives a planner its workers' (else the agent
    # profile hides another CLI's state, and a child it could not write is refused).
    words = [x for w in (*SANDBOX, "ReadWritePaths=-%h/.demo-agent") for x in ("-p", w)]
    sb.sh("mkdir -p /home/alice/proj", user="alice").check()
    parent = create(sb, "agent-shell", *words, user="alice", cwd="/home/alice/proj")
    child = f"child-{secrets.token_hex(3)}"
    out = f"/home/alice/proj/mcp-{secrets.token_hex(3)}"  # where the parent may write
    calls = [
        {"method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
        {
            "method": "tools/call",
            "params": {
                "name": "create_session",
                "arguments": {
                    "preset": "demo-agent",
                    "name": child,
                    "env": {"DEMO_AGENT_THINK": "0"},
                },
            },
        },
        {
            "method": "tools/call",
            "params": {
                "name": "wait_sessions",
                "arguments": {"names": [child], "activities": ["idle"], "timeout_seconds": 30},
            },
        },
        {
            "method": "tools/call",
            "params": {"name": "send_text", "arguments": {"name": child, "text": "from my parent"}},
        },
        {
            "method": "tools/call",
            "params": {
                "name": "wait_sessions",
                "arguments": {"names": [child], "activities": ["idle"], "timeout_seconds": 30},
            },
        },
        {
            "method": "tools/call",
            "params": {"name": "capture_screen", "arguments": {"name": child}},
            "until": "You said: from my parent",
        },
        {
            "method": "tools/call",
            "params": {
                "name": "send_text",
                "arguments": {"name": other, "text": "not yours to type into"},
            },
        },
        {"method": "tools/call", "params": {"name": "list_sessions", "arguments": {}}},
        {
            "method": "tools/call",
            "params": {"name": "session_status", "arguments": {"name": other}},
        },
    ]
    try:
        results = called_inside(sb, parent, out, calls)
        assert results[1]["isError"] is False, results[1]
        assert "You said: from my parent" in results[5]["structuredContent"]["screen"]
        assert results[6]["isError"] is True
        assert "only the sessions it made" in results[6]["content"][0]["text"], results[6]
        # It sees itself and what it made: its owner's other session is not shown.
        shown = {r["name"] for r in results[7]["structuredContent"]["sessions"]}
        assert shown == {parent, child}, results[7]
        assert results[8]["isError"] is True, results[8]
        made = props(sb, child, user="alice")
        assert made["Parent"] == parent
        pinned = [w.replace("%{cwd}", "/home/alice/proj") for w in SANDBOX]
        assert all(w in made["Properties"] for w in pinned), made["Properties"]
        # Outside, alice's list shows the child under its parent, and its JSON names it.
        table = sb.ctl("list", user="alice", system=True).check().stdout.splitlines()
        rows = [
            line.split()[0] + (line.split()[1] if line.startswith("└") else "")
            for line in table
            if line.strip()
        ]
        assert rows.index(f"└{child}") == rows.index(parent) + 1, table
        listed = json.loads(sb.ctl("list", "-o", "json", user="alice", system=True).stdout)
        assert next(i for i in listed if i["name"] == child)["parent"] == parent
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


# A CLI that shows how it was started: its arguments, the file its first one names
# (--mcp-config=FILE), and OpenCode's variable.
SHOWS_ITS_SERVER = """\
name: shows-server
description: prints how hostagent's MCP server was given to it
command: ["/bin/sh", "-c", "echo ARGS $*; cat \\"${1#*=}\\"; echo; echo ENV $OPENCODE_CONFIG_CONTENT; exec sleep infinity", "sh"]
prompt_args: []
mcp: {format: claude}
"""


def test_a_session_that_asks_for_the_tools_gets_the_server_in_its_cli_and_keeps_it(
    sb: Sandbox,
) -> None:
    """--mcp registers `hostagentctl --system mcp` the way the preset's CLI takes a server for
    one run (here Claude's --mcp-config, a file of the session's own), at every start; a
    preset whose CLI takes none is refused saying so; without --mcp nothing is added."""
    sb.sh(
        "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/shows-server.yaml",
        input=SHOWS_ITS_SERVER,
    ).check()
    sb.ctl("reload").check()
    names: list[str] = []
    try:
        given = create(sb, "shows-server", "--mcp", user="alice", cwd="/tmp")
        plain = create(sb, "shows-server", user="alice", cwd="/tmp")
        names += [given, plain]
        assert props(sb, given, user="alice")["Mcp"] is True
        screen = sb.screen_showing(given, '"hostagent"', user="alice", timeout=30)
        assert screen and "ARGS --mcp-config=/run/hostagent/" in screen, screen
        assert '"args": [' in screen and '"--system",' in screen and '"mcp"' in screen, screen
        assert "Mcp: yes" in sb.ctl("status", given, user="alice", system=True).stdout
        sb.ctl("stop", given, user="alice", system=True).check()
        sb.ctl("resume", given, user="alice", system=True).check()
        assert sb.screen_showing(given, "ARGS --mcp-config=", user="alice", timeout=30)
        shown = sb.screen_showing(plain, "ENV", user="alice", timeout=30)
        assert shown and "--mcp-config" not in shown, shown
        refused = sb.ctl("new", "--preset", "demo-agent", "--mcp", user="alice", system=True)
        assert refused.returncode != 0
        assert "names no way to give its CLI one" in refused.stderr, refused.stderr
    finally:
        for name in names:
            sb.ctl("rm", "--force", name)
        sb.run("rm", "-f", "/etc/hostagent/presets.d/shows-server.yaml")
        sb.ctl("reload")


def test_a_planner_answers_its_childs_question_through_mcp_and_no_other(sb: Sandbox) -> None:
    """A planner (an agent's rights) makes a child that asks; list_questions shows it the
    child's question alone (not its owner's other session's), answer_question answers it,
    and the other session's question and its own are refused."""
    sb.sh(
        "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/agent-shell.yaml",
        input=AGENT_SHELL,
    ).check()
    sb.ctl("reload").check()
    other = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="alice")
    words = [x for w in (*SANDBOX, "ReadWritePaths=-%h/.demo-agent") for x in ("-p", w)]
    sb.sh("mkdir -p /home/alice/proj", user="alice").check()
    planner = create(sb, "agent-shell", *words, user="alice", cwd="/home/alice/proj")
    child = f"child-{secrets.token_hex(3)}"
    out = f"/home/alice/proj/mcp-{secrets.token_hex(3)}"
    sb.ctl("wait", other, "--for", "idle", "--timeout", "30", system=True).check()
    sb.ctl("send", other, "/ask", user="alice", system=True).check()
    sb.ctl("wait", other, "--for", "blocked", "--timeout", "30", system=True).check()
    tool = "tools/call"
    calls = [
        {"method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
        {
            "method": tool,
            "params": {
                "name": "create_session",
                "arguments": {
                    "preset": "demo-agent",
                    "name": child,
                    "env": {"DEMO_AGENT_THINK": "0"},
                },
            },
        },
        {
            "method": tool,
            "params": {
                "name": "wait_sessions",
                "arguments": {"names": [child], "activities": ["idle"], "timeout_seconds": 30},
            },
        },
        {
            "method": tool,
            "params": {"name": "send_text", "arguments": {"name": child, "text": "/ask"}},
        },
        {
            "method": tool,
            "params": {"name": "list_questions", "arguments": {}},
            "until": "Do you want to proceed?",
        },
        {
            "method": tool,
            "params": {"name": "answer_question", "arguments": {"name": child, "choice": "yes"}},
        },
        {
            "method": tool,
            "params": {"name": "capture_screen", "arguments": {"name": child}},
            "until": "Proceeding.",
        },
        {
            "method": tool,
            "params": {"name": "answer_question", "arguments": {"name": other, "choice": "yes"}},
        },
        {
            "method": tool,
            "params": {"name": "answer_question", "arguments": {"name": planner, "choice": "yes"}},
        },
    ]
    try:
        results = called_inside(sb, planner, out, calls)
        listed = results[4]["structuredContent"]["questions"]
        assert [q["session"] for q in listed] == [child], listed  # not the other's
        assert results[5]["isError"] is False, results[5]
        assert results[5]["structuredContent"]["answered"] == "Yes"
        assert "Proceeding." in results[6]["structuredContent"]["screen"]
        assert results[7]["isError"] is True
        assert "only the sessions it made" in results[7]["content"][0]["text"], results[7]
        assert results[8]["isError"] is True
        assert "its own terminal" in results[8]["content"][0]["text"], results[8]
        # The other session's question still waits for alice, outside every session.
        sb.ctl("answer", other, "no", user="alice", system=True).check()
    finally:
        for name in (other, planner, child):
            sb.ctl("rm", "--force", name)
        sb.run("sh", "-c", f"rm -f {out} {out}.py {out}.json {out}.tmp")
        sb.run("rm", "-f", "/etc/hostagent/presets.d/agent-shell.yaml")
        sb.ctl("reload")
