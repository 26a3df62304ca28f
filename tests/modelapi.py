"""A stand-in model API on loopback, so the real agent CLIs run offline with their own screens.

The AI services are the one part of an agent session that cannot run here. This server speaks
enough of four wire formats for each real CLI to start a turn, ask to run a shell command (a
tool call, so the CLI draws its own approval dialog), and finish:

- Anthropic Messages (``POST /v1/messages``), for Claude Code;
- OpenAI Chat Completions (``POST …/chat/completions``), for Qwen Code, OpenCode, Copilot, Aider;
- OpenAI Responses (``POST …/responses``), for Codex;
- Gemini (``POST …/models/M:streamGenerateContent`` and ``:generateContent``), for Gemini CLI.

What the model does is scripted by the last user message (tests/modelscript.py), so a test
drives it by what it types:

- a tool result in the request: the turn ends with "Done: the command ran." (held as below
  when the user's text said ``slow``);
- ``run`` and ``dangerous``: the same call, with a command a permission gate asks about
  (``rm -rf ./scratch && touch …``);
- ``run`` anywhere: a call to the CLI's shell tool, whose arguments are filled from the tool's
  own JSON schema (every CLI names and shapes its shell tool differently);
- ``slow``: the reply holds after its first words until ``POST /control/release`` (or 120 s), so
  a test can see "working" without racing the model;
- ``overloaded``: HTTP 529 (Anthropic) or 503, every time, so the CLI shows its retrying;
- every reply says it used the tokens of modelscript.SERVED, in the format's own words;
- ``refused``: HTTP 400, every time: a failure no CLI retries, so it shows the error and its
  prompt again;
- ``write /abs/path``: a call to the CLI's file-writing tool, for its edit approval;
- ``question``: an answer that asks a numbered question in prose (not a dialog);
- ``delegate TASK`` (first word): hostagent's MCP tools, step by step: create a child session of
  the stand-in agent with TASK as its prompt, wait for it, then quote its answer
  (modelscript.delegation);
- anything else: a one-line answer that quotes the prompt.

Run it with ``python3 tests/modelapi.py PORT [LOG]``; each request is appended to LOG as a JSON
line (path and body), which is how a test shows which API a CLI spoke.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from modelscript import (
    EDIT_TOOLS,
    HOLDING,
    SERVED,
    TOOL_COMMAND,
    calls_tool,
    fill,
    last_user_text,
    pick_tool,
    script,
)

HOLD_LIMIT = 120.0
release = threading.Event()


def hold() -> None:
    release.wait(HOLD_LIMIT)


# --- wire formats -----------------------------------------------------------------------------


def anthropic_usage() -> dict[str, int]:
    """Anthropic's input_tokens leaves out what was read from or written to the cache."""
    return {
        "input_tokens": SERVED["input"] - SERVED["cache_read"] - SERVED["cache_write"],
        "cache_read_input_tokens": SERVED["cache_read"],
        "cache_creation_input_tokens": SERVED["cache_write"],
        "output_tokens": SERVED["output"],
    }


def chat_usage() -> dict[str, Any]:
    return {
        "prompt_tokens": SERVED["input"],
        "completion_tokens": SERVED["output"],
        "total_tokens": SERVED["input"] + SERVED["output"],
        "prompt_tokens_details": {"cached_tokens": SERVED["cache_read"]},
        "completion_tokens_details": {"reasoning_tokens": SERVED["reasoning"]},
    }


def anthropic(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    last = users[-1] if users else {}
    parts = last.get("content") if isinstance(last.get("content"), list) else []
    result = any(isinstance(p, dict) and p.get("type") == "tool_result" for p in parts)
    tools = [(t["name"], t.get("input_schema", {})) for t in body.get("tools", []) if "name" in t]
    kind, text, step = script(body, result, tools)
    usage = {**anthropic_usage(), "output_tokens": 1}
    message = {
        "id": f"msg_{time.time_ns()}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "stand-in"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    yield "message_start", {"type": "message_start", "message": message}
    words = text.split(" ")
    yield (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    for i, word in enumerate(words):
        delta = {"type": "text_delta", "text": word + (" " if i < len(words) - 1 else "")}
        yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        if kind in HOLDING and i == 0:
            hold()
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    stop = "end_turn"
    if calls_tool(kind, tools):
        name, args = step or pick_tool(tools, kind, text)
        block = {"type": "tool_use", "id": f"toolu_{time.time_ns()}", "name": name, "input": {}}
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": 1, "content_block": block},
        )
        delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
        yield "content_block_delta", {"type": "content_block_delta", "index": 1, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": 1}
        stop = "tool_use"
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": SERVED["output"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def anthropic_whole(body: dict[str, Any]) -> dict[str, Any]:
    """The non-streaming reply: the streamed events folded into one message."""
    message: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    for _, ev in anthropic(body):
        if ev["type"] == "message_start":
            message = ev["message"]
        elif ev["type"] == "content_block_start":
            blocks.append(dict(ev["content_block"]))
        elif ev["type"] == "content_block_delta":
            d = ev["delta"]
            if d["type"] == "text_delta":
                blocks[-1]["text"] += d["text"]
            else:
                blocks[-1]["input"] = json.loads(d["partial_json"])
        elif ev["type"] == "message_delta":
            message["stop_reason"] = ev["delta"]["stop_reason"]
    return {**message, "content": blocks, "usage": anthropic_usage()}


def chat(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    msgs = body.get("messages", [])
    last = msgs[-1] if msgs else {}
    result = last.get("role") == "tool"
    tools = [
        (t["function"]["name"], t["function"].get("parameters", {}))
        for t in body.get("tools", [])
        if isinstance(t, dict) and "function" in t
    ]
    kind, text, step = script(body, result, tools)
    if kind in ("tool", "late-tool") and not tools:
        # A CLI without tools (Aider) runs the shell blocks of an answer, once the user agrees.
        text += f"\n\n```bash\n{TOOL_COMMAND}\n```\n"
    base = {
        "id": f"chatcmpl-{time.time_ns()}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "stand-in"),
    }
    words = text.split(" ")
    for i, word in enumerate(words):
        delta: dict[str, Any] = {"content": word + (" " if i < len(words) - 1 else "")}
        if i == 0:
            delta["role"] = "assistant"
        yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        if kind in HOLDING and i == 0:
            hold()
    finish = "stop"
    patch_tool = any(
        t.get("type") == "custom" and t["custom"].get("name") == "apply_patch"
        for t in body.get("tools", [])
    )
    if kind == "edit" and patch_tool and not any(n in EDIT_TOOLS for n, _ in tools):
        # A free-form patch tool (Copilot's): its input is the patch text, not JSON.
        path = next((w for w in text.split() if w.startswith("/")), "notes.txt")
        patch = f"*** Begin Patch\n*** Add File: {path}\n+written by the stand-in model\n*** End Patch\n"
        call = {
            "index": 0,
            "id": f"call_{time.time_ns()}",
            "type": "custom",
            "custom": {"name": "apply_patch", "input": patch},
        }
        yield {
            **base,
            "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
        }
        finish = "tool_calls"
    elif calls_tool(kind, tools):
        name, args = step or pick_tool(tools, kind, text)
        call = {
            "index": 0,
            "id": f"call_{time.time_ns()}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        yield {
            **base,
            "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
        }
        finish = "tool_calls"
    usage = chat_usage()
    yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage}


def chat_whole(body: dict[str, Any]) -> dict[str, Any]:
    content, calls, finish = "", [], "stop"
    for chunk in chat(body):
        for choice in chunk["choices"]:
            content += choice["delta"].get("content", "")
            calls += choice["delta"].get("tool_calls", [])
            finish = choice["finish_reason"] or finish
    for call in calls:
        call.pop("index", None)
    message = {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}
    return {
        "id": f"chatcmpl-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "stand-in"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": chat_usage(),
    }


def responses(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    items = body.get("input", [])
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items
    result = bool(items) and items[-1].get("type") in (
        "function_call_output",
        "custom_tool_call_output",
    )
    tools = [
        (t["name"], t.get("parameters", {}))
        for t in body.get("tools", [])
        if isinstance(t, dict) and t.get("type") == "function" and "name" in t
    ]
    # A namespace groups tools (Codex's MCP servers, mcp__SERVER): each is called by its own
    # name with the namespace beside it.
    spaces = {
        f"{t['name']}__{f['name']}": (t["name"], f["name"])
        for t in body.get("tools", [])
        if isinstance(t, dict) and t.get("type") == "namespace"
        for f in t.get("tools", [])
        if f.get("type") == "function"
    }
    tools += [
        (full, f.get("parameters", {}))
        for t in body.get("tools", [])
        if isinstance(t, dict) and t.get("type") == "namespace"
        for f in t.get("tools", [])
        if (full := f"{t['name']}__{f.get('name')}") in spaces
    ]
    kind, text, step = script(body, result, tools)
    rid = f"resp_{time.time_ns()}"
    response = {"id": rid, "object": "response", "status": "in_progress", "output": []}
    yield "response.created", {"type": "response.created", "response": response}
    msg_id = f"msg_{time.time_ns()}"
    item = {
        "type": "message",
        "id": msg_id,
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    yield (
        "response.output_item.added",
        {"type": "response.output_item.added", "output_index": 0, "item": item},
    )
    words = text.split(" ")
    for i, word in enumerate(words):
        yield (
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "item_id": msg_id,
                "output_index": 0,
                "content_index": 0,
                "delta": word + (" " if i < len(words) - 1 else ""),
            },
        )
        if kind in HOLDING and i == 0:
            hold()
    done = {
        **item,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    yield (
        "response.output_item.done",
        {"type": "response.output_item.done", "output_index": 0, "item": done},
    )
    output = [done]
    if calls_tool(kind, tools):
        name, args = step or pick_tool(tools, kind, text)
        call = {
            "type": "function_call",
            "id": f"fc_{time.time_ns()}",
            "status": "completed",
            "call_id": f"call_{time.time_ns()}",
            "name": name,
            "arguments": json.dumps(args),
        }
        if name in spaces:
            call["namespace"], call["name"] = spaces[name]
        yield (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 1, "item": call},
        )
        yield (
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": 1, "item": call},
        )
        output.append(call)
    usage = {
        "input_tokens": SERVED["input"],
        "input_tokens_details": {"cached_tokens": SERVED["cache_read"]},
        "output_tokens": SERVED["output"],
        "output_tokens_details": {"reasoning_tokens": SERVED["reasoning"]},
        "total_tokens": SERVED["input"] + SERVED["output"],
    }
    final = {**response, "status": "completed", "output": output, "usage": usage}
    yield "response.completed", {"type": "response.completed", "response": final}


def gemini(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    contents = body.get("contents", [])
    last = contents[-1] if contents else {}
    parts = last.get("parts", [])
    result = any("functionResponse" in p for p in parts)
    config = body.get("generationConfig", {})
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    # Gemini counts the tool-use prompt beside the prompt, and the thoughts beside the answer.
    usage = {
        "promptTokenCount": SERVED["input"] - SERVED["tool"],
        "toolUsePromptTokenCount": SERVED["tool"],
        "cachedContentTokenCount": SERVED["cache_read"],
        "candidatesTokenCount": SERVED["output"] - SERVED["reasoning"],
        "thoughtsTokenCount": SERVED["reasoning"],
        "totalTokenCount": SERVED["input"] + SERVED["output"],
    }

    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            cand["finishReason"] = finish
        return {"candidates": [cand], "usageMetadata": usage, "modelVersion": "stand-in"}

    if schema:  # the CLI's own side questions (next speaker, routing) want JSON
        yield chunk([{"text": json.dumps(fill(schema))}], "STOP")
        return
    tools = [
        (d["name"], d.get("parametersJsonSchema") or d.get("parameters") or {})
        for t in body.get("tools", [])
        for d in t.get("functionDeclarations", [])
    ]
    kind, text, step = script(body, result, tools)
    words = text.split(" ")
    for i, word in enumerate(words):
        last_word = i == len(words) - 1
        finish = "STOP" if last_word and not calls_tool(kind, tools) else None
        yield chunk([{"text": word + ("" if last_word else " ")}], finish)
        if kind in HOLDING and i == 0:
            hold()
    if calls_tool(kind, tools):
        name, args = step or pick_tool(tools, kind, text)
        yield chunk([{"functionCall": {"name": name, "args": args}}], "STOP")


# --- the server -------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        return body if isinstance(body, dict) else {}

    def _json(self, obj: Any, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: Iterator[Any], named: bool, done: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for ev in events:
            if named:
                name, data = ev
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            else:
                self.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
            self.wfile.flush()
        if done:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path.endswith("/models"):
            models = [
                {
                    "id": m,
                    "object": "model",
                    "created": 0,
                    "owned_by": "stand-in",
                    "name": f"models/{m}",
                    "supportedGenerationMethods": ["generateContent"],
                }
                for m in ("stand-in", "gpt-4o", "gemini-2.5-pro")
            ]
            self._json({"object": "list", "data": models, "models": models})
        else:
            self._json({"ok": True})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _failed(self, body: dict[str, Any]) -> bool:
        """An error reply when the script says so; False when the request goes on."""
        said = json.dumps(last_user_text(body)).lower()
        if "overloaded" in said:
            status = 529 if self.path.startswith("/v1/messages") else 503
            err = {"type": "overloaded_error", "message": "Overloaded", "code": status}
        elif "refused" in said:
            status = 400
            err = {
                "type": "invalid_request_error",
                "message": "Refused by the stand-in model",
                "code": status,
            }
        else:
            return False
        self._json({"type": "error", "error": err}, status)
        return True

    def do_POST(self) -> None:
        body = self._body()
        path = self.path.split("?")[0]
        if not path.startswith("/control/") and self._failed(body):
            return
        if path == "/control/release":
            release.set()
            self._json({"released": True})
        elif path == "/control/hold":
            release.clear()
            self._json({"held": True})
        elif path.endswith("/messages/count_tokens"):
            self._json({"input_tokens": 12})
        elif path.endswith("/messages"):
            if body.get("stream"):
                self._sse(anthropic(body), named=True)
            else:
                self._json(anthropic_whole(body))
        elif path.endswith("/chat/completions"):
            if body.get("stream"):
                self._sse(chat(body), named=False, done=True)
            else:
                self._json(chat_whole(body))
        elif path.endswith("/responses"):
            self._sse(responses(body), named=True)
        elif path.endswith(":countTokens"):
            self._json({"totalTokens": 12})
        elif path.endswith(":streamGenerateContent"):
            self._sse(gemini(body), named=False)
        elif path.endswith(":generateContent"):
            chunks = list(gemini(body))
            parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
            whole = chunks[-1]
            whole["candidates"][0]["content"]["parts"] = parts
            whole["candidates"][0]["finishReason"] = "STOP"
            self._json(whole)
        else:
            self._json({"ok": True})


def serve(port: int, log_path: str = "") -> ThreadingHTTPServer:
    Handler.log_path = log_path
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


if __name__ == "__main__":
    srv = serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "")
    srv.serve_forever()
