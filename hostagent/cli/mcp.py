"""hostagentctl mcp: the tools an agent uses to drive sessions, served over the Model Context
Protocol (mcp_protocol.py) on stdin and stdout (mcp_stdio.py).

Each tool is a call of the daemon's bus API through the client library, as the verb of the
same name makes it, so what a caller may do is the daemon's to decide (docs/security.md), never
this server's: from inside a sandboxed session, only sessions at least as confined. A refusal
comes back to the agent as the tool's error, with the daemon's one-line message. The protocol is
written on the standard library; docs/decisions.md says why.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from dbus_fast import Variant

from hostagent import __version__
from hostagent.cli.ctl_inbox import shown
from hostagent.cli.ctl_output import as_json
from hostagent.cli.mcp_protocol import Server, Tool, ToolError
from hostagent.cli.mcp_stdio import serve_stdio
from hostagent.client.library import Client, SessionRow
from hostagent.errors import HostAgentError, Timeout

TAIL_LINES = 30  # of a session's screen, with what wait_sessions answers
ACTIVITIES = ["working", "blocked", "idle", "exited", "unknown"]
NAME = {"type": "string", "description": "the session's name, as list_sessions shows it"}
INSTRUCTIONS = (
    "Sessions are agents (or shells) that hostagent runs, each in a terminal of its own. To "
    "hand work to another agent: create_session with its preset and a prompt, wait_sessions "
    "until it is idle or blocked, then capture_screen to read what it said; send_text to "
    "answer it, or answer_question when it waits on a choice (list_questions). What you may act on is the daemon's decision: a refusal says why."
)


def tools(client: Client, me: int | None = None) -> list[Tool]:
    """The session tools, each a call of client's, for user me (default: whom the bus knows
    the connection by)."""

    async def visible() -> list[SessionRow]:
        """The sessions an agent is shown: its user's own (root's: all), as far as the daemon
        shows them to the caller (from inside a session, that session's tree). Its user is the
        one the daemon's bus knows it by (with -H, the ssh user there)."""
        nonlocal me
        if me is None:
            me = await client.own_uid()
        return [r for r in await client.list_sessions() if me in (0, r.owner)]

    async def mine(*names: str) -> None:
        """A read of a session the agent is not shown is refused like one it may not act on:
        reads are open to every local user on the bus, not through this server."""
        shown = {r.name for r in await visible()}
        for name in names:
            if name not in shown:
                raise ToolError(f"No session '{name}' is yours to see; list_sessions shows yours.")

    async def list_sessions(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        rows = [
            {
                "name": r.name,
                "preset": r.preset,
                "state": r.state,
                "activity": r.activity,
                "owner": r.owner,
            }
            for r in await visible()
        ]
        text = "\n".join(f"{r['name']} {r['preset']} {r['state']} {r['activity']}" for r in rows)
        return text or "no sessions", {"sessions": rows}

    async def session_status(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        await mine(args["name"])
        shown = as_json(await client.properties(args["name"]))
        return "\n".join(f"{k}: {v}" for k, v in shown.items() if v is not None), shown

    async def create_session(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        options: dict[str, Variant] = {}
        for key, signature in (
            ("prompt", "s"),
            ("args", "as"),
            ("env", "a{ss}"),
            ("worktree", "s"),
            ("properties", "as"),
        ):
            if key in args:
                options[key] = Variant(signature, args[key])
        cwd = os.path.abspath(args.get("cwd") or os.getcwd())
        path = await client.create(args.get("name", ""), args["preset"], cwd, options)
        name = client.session_name(path)
        return f"created session {name}", {"name": name}

    async def send_text(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        await client.send_text(args["name"], args["text"], args.get("enter", True))
        return f"typed into {args['name']}", {"name": args["name"]}

    async def list_questions(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        waiting = await client.questions()
        text = "\n\n".join(shown(q) for q in waiting)
        return text or "no questions waiting", {"questions": [q._asdict() for q in waiting]}

    async def answer_question(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        label = await client.answer(args["name"], args["choice"], args.get("id", ""))
        return f"answered {args['name']}: {label}", {"name": args["name"], "answered": label}

    async def arrived(name: str, activity: str) -> dict[str, str]:
        """A session a wait returned, with what it last said: a parent that waited on a child
        reads its answer (or its question) without another call. Left out where the caller
        may not read it."""
        try:
            tail = _last_lines(await client.capture(name, 0), TAIL_LINES)
        except HostAgentError:
            tail = ""
        return {"name": name, "activity": activity, "screen": tail}

    async def wait_sessions(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        waiting = list(dict.fromkeys(args["names"]))
        await mine(*waiting)
        activities = args.get("activities") or ["idle", "blocked"]
        deadline = time.monotonic() + args.get("timeout_seconds", 600)
        done: list[dict[str, str]] = []
        while waiting:
            # The daemon takes 0 for no limit: a deadline reached is the least it takes.
            left = max(1, int((deadline - time.monotonic()) * 1_000_000))
            try:
                name, activity = await client.wait_any(waiting, activities, left)
            except Timeout:
                if not done:
                    raise
                break
            done.append(await arrived(name, activity))
            if not args.get("all"):
                break
            waiting.remove(name)
        shown = "\n".join(
            f"{d['name']} is {d['activity']}"
            + (f". The end of its screen:\n{d['screen']}" if d["screen"] else "")
            for d in done
        )
        if not args.get("all"):
            return shown, done[0]
        if waiting:
            shown += f"\nStill waiting for: {', '.join(waiting)} (the timeout came first)."
        return shown, {"sessions": done, "waiting": waiting}

    async def capture_screen(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        screen = await client.capture(args["name"], args.get("lines", 0))
        return screen, {"name": args["name"], "screen": screen}

    async def explain_activity(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        await mine(args["name"])
        info = await client.explain(args["name"])
        return "\n".join(f"{k}: {v}" for k, v in info.items() if v), dict(info)

    async def stop_session(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        await client.stop(args["name"])
        return f"stopped {args['name']}", {"name": args["name"]}

    async def resume_session(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        await client.resume(args["name"])
        return f"resumed {args['name']}", {"name": args["name"]}

    async def remove_session(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        note = await client.remove_with_flags(args["name"], args.get("force", False))
        return note or f"removed {args['name']}", {"name": args["name"], "note": note}

    one = {"type": "object", "properties": {"name": NAME}, "required": ["name"]}
    strings = {"type": "array", "items": {"type": "string"}}
    return [
        Tool(
            "list_sessions",
            "Every session you can see: name, preset, state (running, "
            "stopped, dormant, failed) and activity (working, blocked, idle, exited).",
            {"type": "object", "properties": {}},
            _refusals(list_sessions),
        ),
        Tool(
            "list_questions",
            "The questions the sessions you made wait on (a permission dialog, a choice), "
            "oldest first: each with its session, id, text and numbered choices.",
            {"type": "object", "properties": {}},
            _refusals(list_questions),
        ),
        Tool(
            "answer_question",
            "Answer a session's question with a choice: its number or the words it starts "
            "with. Refused for your own question and your makers': ask your user instead.",
            {
                "type": "object",
                "required": ["name", "choice"],
                "properties": {
                    "name": NAME,
                    "choice": {"type": "string", "description": "its number, or its words"},
                    "id": {
                        "type": "string",
                        "description": "the question's id, to answer only that one",
                    },
                },
            },
            _refusals(answer_question),
        ),
        Tool(
            "session_status",
            "A session's properties: state, activity, preset, working "
            "directory, conversation id, usage, last error.",
            one,
            _refusals(session_status),
        ),
        Tool(
            "create_session",
            "Start a new session of an agent (a preset: claude, codex, "
            "shell, ...) in a directory, optionally with its first prompt. Returns its name.",
            {
                "type": "object",
                "required": ["preset"],
                "properties": {
                    "preset": {"type": "string", "description": "the agent to run"},
                    "name": {"type": "string", "description": "a name; made up when left out"},
                    "cwd": {
                        "type": "string",
                        "description": "its working directory (default: this server's)",
                    },
                    "prompt": {"type": "string", "description": "its first message"},
                    "args": {**strings, "description": "more arguments for the agent's command"},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "worktree": {
                        "type": "string",
                        "description": "run it in a git worktree of "
                        "its own on this branch ('' for hostagent/NAME)",
                    },
                    "properties": {
                        **strings,
                        "description": "systemd properties and sandboxing "
                        "words, as ProtectSystem=strict",
                    },
                },
            },
            _refusals(create_session),
        ),
        Tool(
            "send_text",
            "Type text into a session's terminal, then Enter (unless enter is "
            "false): to answer its question or give it work.",
            {
                "type": "object",
                "required": ["name", "text"],
                "properties": {
                    "name": NAME,
                    "text": {"type": "string"},
                    "enter": {"type": "boolean"},
                },
            },
            _refusals(send_text),
        ),
        Tool(
            "wait_sessions",
            "Wait until the first of the named sessions (or, with all, every "
            "one) reaches one of the activities (default idle or blocked; exited always ends "
            "a wait). Returns which, its activity, and the end of its screen: what it "
            "answered or asks.",
            {
                "type": "object",
                "required": ["names"],
                "properties": {
                    "names": {**strings, "description": "the sessions to wait for"},
                    "activities": {
                        "type": "array",
                        "items": {"type": "string", "enum": ACTIVITIES},
                    },
                    "timeout_seconds": {"type": "number", "minimum": 0},
                    "all": {"type": "boolean", "description": "wait for every one, not the first"},
                },
            },
            _refusals(wait_sessions),
        ),
        Tool(
            "capture_screen",
            "What a session's terminal shows now (its last screen once it "
            "ended): read what its agent answered or asks.",
            {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": NAME,
                    "lines": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "scrollback lines above the screen",
                    },
                },
            },
            _refusals(capture_screen),
        ),
        Tool(
            "explain_activity",
            "Why a session's activity is what it is: the rule and the text it matched.",
            one,
            _refusals(explain_activity),
        ),
        Tool(
            "stop_session",
            "Stop a session; it can be resumed into the same conversation.",
            one,
            _refusals(stop_session),
        ),
        Tool(
            "resume_session",
            "Start a stopped or dormant session again, into its conversation.",
            one,
            _refusals(resume_session),
        ),
        Tool(
            "remove_session",
            "Stop and forget a session (its worktree too when clean, or with force).",
            {
                "type": "object",
                "required": ["name"],
                "properties": {"name": NAME, "force": {"type": "boolean"}},
            },
            _refusals(remove_session),
        ),
    ]


def _last_lines(screen: str, count: int) -> str:
    """The last count lines of a screen that hold anything."""
    lines = screen.rstrip().splitlines()
    return "\n".join(line.rstrip() for line in lines[-count:] if line.strip())


def _refusals(run: Any) -> Any:
    """run, with the daemon's refusals (and the bus's) said to the agent as the tool's error."""

    async def guarded(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        try:
            result: tuple[str, dict[str, Any]] = await run(args)
        except HostAgentError as e:
            raise ToolError(e.message) from None
        return result

    return guarded


async def verb_mcp(c: Client, a: argparse.Namespace) -> int:
    """Serve the tools on stdin and stdout until stdin ends."""
    await serve_stdio(Server(tools(c), version=__version__, instructions=INSTRUCTIONS))
    return 0
