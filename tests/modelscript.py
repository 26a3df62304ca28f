"""What the stand-in model (tests/modelapi.py) does, whatever wire format it speaks: its
script, keyed by the last user message, and the tool call it makes in each CLI's own tools.

Kept apart from the wire formats so that what a test types, and what the model answers, can be
read in one place; modelapi.py imports it (both run as scripts inside the test machine).
"""

from __future__ import annotations

import json
import re
from typing import Any

TOOL_COMMAND = "touch approved-by-user.txt"
# The same, in the shape a permission gate asks about (Pi's example gate, Hermes): asked for by
# a prompt that says "dangerous".
DANGEROUS_COMMAND = "rm -rf ./scratch && touch approved-by-user.txt"
SHELL_TOOLS = (
    "Bash",
    "bash",
    "run_shell_command",
    "shell",
    "exec_command",
    "shell_command",
    "terminal",
    "run_commands",
)
EDIT_TOOLS = ("Write", "write_file", "write", "create", "str_replace_based_edit_tool", "edit")
# The tools with which each CLI lets the model ask the user a question with choices: Claude's,
# Codex's, Gemini's and Qwen's, OpenCode's and Pi's, Copilot's form (ask_user with a schema),
# Hermes's, Cline's, Vibe's and Continue's.
QUESTION_TOOLS = (
    "AskUserQuestion",
    "request_user_input",
    "ask_user",
    "question",
    "clarify",
    "ask_question",
    "ask_user_question",
    "AskQuestion",
)
# The kinds answered with a call of one of the CLI's tools; "late-tool" holds its reply first.
TOOL_KINDS = ("tool", "late-tool", "edit", "ask")
HOLDING = ("slow", "late-tool")  # the kinds whose reply waits for POST /control/release
QUESTION = "Which approach do you want?"
CHOICES = (("Refactor it", "Clean the code up first"), ("Leave it", "Keep the code as it is"))
# What every reply says it used, in tokens: figures found nowhere else, so that where a CLI
# records them can be found, and what it recorded summed (docs/presets.md, "Usage"). Each wire
# format says them in its own words; as hostagent counts them, input holds the cached parts
# and the tool-use prompt, output the reasoning (cache_write: Anthropic's format only).
SERVED = {
    "input": 4321,
    "output": 876,
    "cache_read": 1111,
    "cache_write": 2222,
    "reasoning": 55,
    "tool": 66,
}
_CONTEXT = re.compile(r"^\s*(<([\w:-]+)[^>]*>.*?</\2>\s*)+", re.S)


def decide(last_user: str, tool_result: bool) -> tuple[str, str]:
    """(kind, text): kind is one of TOOL_KINDS, "text", "slow" or "error"."""
    # What the user typed, without the context some CLIs put before it in the same text
    # (Copilot's <current_datetime>), and only its first line: Aider appends its rules after.
    last_user = _CONTEXT.sub("", last_user)
    last_user = (last_user.strip().splitlines() or [""])[0]
    lowered = last_user.lower()
    if tool_result:
        if "question tool" in lowered:
            return "text", "Thanks, I will go with your choice."
        return ("slow" if "slow" in lowered else "text"), "Done: the command ran."
    if "question tool" in lowered:
        return "ask", f"I have a question for you. {QUESTION}"
    if "overloaded" in lowered:
        return "error", "The stand-in model is overloaded; try again later."
    if "after a wait" in lowered:  # an approval drawn after a slow request
        return "late-tool", "I will run a command."
    if ("run" in lowered.split() or "run " in lowered) and "dangerous" in lowered:
        return "tool", "I will run a dangerous command."
    if "run" in lowered.split() or "run " in lowered:
        return "tool", "I will run a command."
    if "slow" in lowered:
        return "slow", "Thinking about it slowly. Finished now."
    if "write" in lowered.split():
        path = next((w for w in last_user.split() if w.startswith("/")), "notes.txt")
        return "edit", f"I will write {path} for you."
    if "question" in lowered:
        return "text", "Which one do you want?\n\n1. Yes, the first\n2. No, the second\n"
    return "text", f"Hello from the stand-in model. You said: {last_user.strip()[:60]}"


# Delegation: "delegate TASK" makes the model hand TASK to a child session of the stand-in
# agent through hostagent's MCP tools (whatever prefix the CLI gives their names), wait for it
# and quote its answer: each step is read from the tool results the CLI sent back, as their
# text ("created session NAME") or their structured content (Codex gives the model that).
# Where the CLI defers its MCP tools (Claude Code: known by name only, until its ToolSearch
# fetches them), they are fetched first.
CHILD_PRESET = "demo-agent"
_CREATED = re.compile(
    r"created session ([a-z0-9][a-z0-9_.-]*)|^name: ([a-z0-9][a-z0-9_.-]*)$", re.M
)
_ANSWER = re.compile(r"You said: ([^\n]*)")
_WAITED = r"\b{child} is (idle|blocked|exited)|^activity: (idle|blocked|exited)$"
Call = tuple[str, dict[str, Any]]


def delegation(
    last_user: str, outputs: list[str], tools: list[str], said: str = ""
) -> tuple[str, Call | None]:
    """The next step of a delegation: (text, the tool call to make, or None to answer).
    said: the whole request, where a CLI names the tools it defers."""
    task = last_user.split("delegate", 1)[1].strip(" :")
    results = "\n".join(outputs)
    created = [a or b for a, b in _CREATED.findall(results)]

    def call(tool: str, args: dict[str, Any]) -> Call | None:
        name = next((t for t in tools if t.endswith(tool)), None)
        if name:
            return name, args
        deferred = sorted(set(re.findall(rf"(mcp__\w+?__{tool})\b", said)))
        if not deferred or "ToolSearch" not in tools:
            return None
        if not any(deferred[0] in o for o in outputs):  # not fetched yet
            wanted = re.findall(r"(mcp__\w+?__(?:create_session|wait_sessions))\b", said)
            return "ToolSearch", {"query": "select:" + ",".join(sorted(set(wanted)))}
        return deferred[0], args

    if not created:
        step = call("create_session", {"preset": CHILD_PRESET, "prompt": task})
        return ("I will hand this to a helper." if step else "I have no hostagent tools."), step
    child = created[-1]
    answer = _ANSWER.findall(results)
    if not re.search(_WAITED.format(child=re.escape(child)), results, re.M):
        return "Waiting for my helper.", call("wait_sessions", {"names": [child]})
    if answer:
        return f"My helper {child} answered: {answer[-1].strip()}", None
    return f"My helper {child} said nothing I could read.", None


def tool_outputs(body: dict[str, Any]) -> list[str]:
    """The text of every tool result in a request, in any of the four formats."""
    found: list[str] = []

    def walk(item: Any) -> None:
        if isinstance(item, list):
            for x in item:
                walk(x)
        elif isinstance(item, dict):
            if item.get("type") in ("tool_result", "function_call_output"):
                found.append(_text(item.get("content", item.get("output"))))
            elif item.get("role") == "tool":
                found.append(_text(item.get("content")))
            elif isinstance(item.get("functionResponse"), dict):
                found.append(_text(item["functionResponse"].get("response")))
            else:
                for x in item.values():
                    walk(x)

    walk([body.get(k) for k in ("messages", "input", "contents")])
    return found


def _text(value: Any) -> str:
    """A tool result's text, and each field of JSON in it a line "key: value" (a CLI may
    give the model the structured content, or wrap the text in JSON of its own)."""
    if isinstance(value, str):
        found = re.search(r"\{.*\}\s*$", value, re.S)
        if found:
            try:
                return value + "\n" + _text(json.loads(found.group(0)))
            except ValueError:
                pass
        return value
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "\n".join(f"{k}: {_text(v)}" for k, v in value.items())
    return str(value)


def script(
    body: dict[str, Any], tool_result: bool, tools: list[tuple[str, dict[str, Any]]]
) -> tuple[str, str, Call | None]:
    """(kind, text, call): decide's, or a delegation's step with the call it makes."""
    last_user = last_user_text(body)
    first = (_CONTEXT.sub("", last_user).strip().splitlines() or [""])[0]
    if first.lower().startswith("delegate"):
        said = json.dumps(body)
        text, step = delegation(first, tool_outputs(body), [n for n, _ in tools], said)
        return ("tool" if step else "text"), text, step
    kind, text = decide(last_user, tool_result)
    return kind, text, None


def fill(schema: dict[str, Any], name: str = "") -> Any:
    """A value that satisfies a tool's JSON schema, with a shell command where one is asked."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind or "").lower()
    if schema.get("enum"):
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    if kind == "object" or "properties" in schema:
        props: dict[str, Any] = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {k: fill(props[k], k) for k in required if k in props}
    if kind == "array":
        if name in ("command", "cmd", "argv"):
            return ["bash", "-lc", TOOL_COMMAND]
        if name == "commands":  # a list of command lines (Cline's run_commands)
            return [TOOL_COMMAND]
        return []
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        return 30000 if "timeout" in name else 1
    if name in ("command", "cmd"):
        return TOOL_COMMAND
    if name in ("description", "justification", "reason"):
        return "Create a file to show the tool ran"
    if name in ("reasoning", "explanation"):
        return "The user spoke last."
    return "."


def question_args(schema: dict[str, Any]) -> dict[str, Any]:
    """One question with two choices, in the shape the CLI's question tool takes."""
    props = schema.get("properties", {})
    if "requestedSchema" in props:  # a form: one field whose values are the choices
        field = {"type": "string", "title": "Approach", "enum": [c[0] for c in CHOICES]}
        return {
            "message": QUESTION,
            "requestedSchema": {
                "type": "object",
                "properties": {"approach": field},
                "required": ["approach"],
            },
        }
    question: dict[str, Any] = {
        "question": QUESTION,
        "header": "Approach",
        "id": "approach",
        "type": "choice",
        "options": [{"label": label, "description": why} for label, why in CHOICES],
        "multiSelect": False,
        "multiple": False,
        "choices": [label for label, _ in CHOICES],
    }
    if props.get("options", {}).get("items", {}).get("type") == "string":  # Cline's: labels
        question["options"] = question["choices"]
    if "questions" not in props:  # one question, not a list of them (Pi's example tool)
        return {k: v for k, v in question.items() if k in props}
    items = props.get("questions", {}).get("items", {})
    if "$ref" in items:  # "#/$defs/UserQuestion" (Vibe's schema names its parts)
        items = schema.get("$defs", {}).get(items["$ref"].rsplit("/", 1)[-1], {})
    item = items.get("properties", {})
    return {"questions": [{k: v for k, v in question.items() if k in item}]}


def calls_tool(kind: str, tools: list[tuple[str, dict[str, Any]]]) -> bool:
    """Whether the answer of kind is a call of one of tools: a question only where the CLI
    has a question tool (Qwen and Aider have none, and get the question as text)."""
    if kind == "ask":
        return any(name in QUESTION_TOOLS for name, _ in tools)
    return kind in TOOL_KINDS and bool(tools)


def pick_tool(
    tools: list[tuple[str, dict[str, Any]]], kind: str, text: str
) -> tuple[str, dict[str, Any]]:
    """The CLI's shell tool (kind "tool"), file-writing tool (kind "edit") or question tool
    (kind "ask"), and arguments."""
    by_name = dict(tools)
    kind = "tool" if kind == "late-tool" else kind
    if kind == "ask":
        for name in QUESTION_TOOLS:
            if name in by_name:
                return name, question_args(by_name[name])
    if kind == "edit":
        for name in EDIT_TOOLS:
            if name in by_name:
                args = fill(by_name[name])
                path = next((w for w in text.split() if w.startswith("/")), "notes.txt")
                for key in args:
                    if "path" in key.lower() or key == "file":
                        args[key] = path
                    elif key in ("content", "contents", "file_text", "new_str"):
                        args[key] = "written by the stand-in model\n"
                return name, args
        if "exec_command" in by_name:
            # Codex offers no file tool to a model it does not know: edits go through its shell
            # tool as an apply_patch command, which Codex shows as an edit to approve.
            path = next((w for w in text.split() if w.startswith("/")), "notes.txt")
            patch = (
                f"apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: {path}\n"
                "+written by the stand-in model\n*** End Patch\nEOF\n"
            )
            return "exec_command", {**fill(by_name["exec_command"]), "cmd": patch}
    for name in SHELL_TOOLS:
        if name in by_name:
            args = fill(by_name[name])
            if "dangerous" in text:
                args = json.loads(json.dumps(args).replace(TOOL_COMMAND, DANGEROUS_COMMAND))
            if "sandbox_permissions" in by_name[name].get("properties", {}):
                # Codex asks the user only for a command that asks to leave its sandbox.
                args["sandbox_permissions"] = "require_escalated"
                args["justification"] = "May I create a file to show the tool ran?"
            return name, args
    for name, schema in tools:
        if "command" in json.dumps(schema):
            return name, fill(schema)
    return "bash", {"command": TOOL_COMMAND}


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(text_of(p.get("text", "") if isinstance(p, dict) else p) for p in content)
    return ""


def last_user_text(body: dict[str, Any]) -> str:
    """The text the user typed last, in any of the four formats (tool results and reminders
    that the CLIs add to a user message are not what the user typed)."""
    for key in ("messages", "input", "contents"):
        items = body.get(key)
        if isinstance(items, str):
            return items
        for item in reversed(items or []):
            if item.get("role") not in ("user", None) or (
                "type" in item and item["type"] != "message"
            ):
                continue
            content = item.get("content", item.get("parts", []))
            if isinstance(content, str):
                return content
            if any(
                isinstance(p, dict) and (p.get("type") == "tool_result" or "functionResponse" in p)
                for p in content
            ):
                continue  # tool results, and what the CLI says beside them ("Tool loaded.")
            texts = [p.get("text", "") for p in content if isinstance(p, dict)]
            texts = [t for t in texts if t and not t.lstrip().startswith("<")]
            if texts:
                return " ".join(texts)
            # Tool results only: what the user typed is further back.
    return ""
