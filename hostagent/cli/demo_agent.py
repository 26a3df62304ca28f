"""hostagent-demo-agent: a stand-in agent CLI that needs no network.

It behaves like the real CLIs where hostagent cares: a banner and a prompt, a spinner while it
"thinks", an approval question, a conversation file that exists only from the first message
on, ``--session-id`` / ``--resume`` with Claude's failure modes, an id rotation like ``/clear``, and
Claude-format lifecycle hooks from ``--settings FILE`` (SessionStart with its source,
UserPromptSubmit, Notification for approvals, Stop). Without ``--session-id`` it mints its own
id, like a CLI whose id must be discovered on disk. Tests and the demo drive it through tmux.

Input lines:
  /work SECONDS     show the spinner for that long, then answer
  /ask [COMMAND]    ask "Do you want to proceed? (y/n)" and wait for the answer, from the
                    terminal or, as Claude Code takes it, from a PermissionRequest hook that
                    prints a decision (the hooks run while the question is drawn)
  /clear            rotate to a new conversation id
  /exit             exit 0
  anything else     a message: think briefly, answer, append both to the conversation

Each answer is recorded as one model call with Claude's usage fields (USAGE below), so that
hostagent follows its usage as it follows Claude Code's.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
PROMPT = "> "
# What each answer "used", in Anthropic's names: 1000 fresh input tokens, 200 read from the
# cache, 50 out; hostagent counts that as 1200 in (200 of them cache reads) and 50 out.
USAGE = {
    "input_tokens": 1000,
    "cache_read_input_tokens": 200,
    "cache_creation_input_tokens": 0,
    "output_tokens": 50,
}
QUESTION = "Do you want to proceed? (y/n) "
HOOK_TIMEOUT = 10.0  # seconds, where the settings say none (Claude's unit)
DRAW_AFTER_HOOKS = 0.3  # seconds a dialog waits for its quick hooks, at most
Hooks = dict[str, list[tuple[str, float]]]  # event -> (command, timeout), in order


def trace(event: str) -> None:
    """With DEMO_AGENT_TRACE set, note when a screen appeared, for bench/ to measure latency."""
    path = os.environ.get("DEMO_AGENT_TRACE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{event} {time.time():.6f}\n")


def sessions_dir() -> Path:
    return Path(os.path.expanduser("~/.demo-agent/sessions"))


class Agent:
    def __init__(self, session_id: str, hooks: Hooks | None = None, model: str = "demo-1") -> None:
        self.session_id = session_id
        self.hooks = hooks or {}
        self.model = model

    def hook(self, event: str, **extra: object) -> list[str]:
        """Run the settings file's commands for event, with Claude's JSON on stdin; what each
        printed."""
        return [self._run(event, c, t, self._payload(event, extra)) for c, t in self._of(event)]

    def _payload(self, event: str, extra: dict[str, object]) -> str:
        return json.dumps(
            {
                "session_id": self.session_id,
                "transcript_path": str(self.path),
                "cwd": os.getcwd(),
                "hook_event_name": event,
                **extra,
            }
        )

    def _of(self, event: str) -> list[tuple[str, float]]:
        return self.hooks.get(event, [])

    def _run(
        self,
        event: str,
        command: str,
        timeout: float,
        payload: str,
        started: list[subprocess.Popen[str]] | None = None,
    ) -> str:
        try:
            with subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # as Claude Code keeps it off the screen
                text=True,
            ) as run:
                if started is not None:
                    started.append(run)
                out, _ = run.communicate(payload, timeout=timeout)
                return out
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"hook {event} failed: {e}", file=sys.stderr)
            return ""

    @property
    def path(self) -> Path:
        return sessions_dir() / f"{self.session_id}.jsonl"

    def record(self, role: str, text: str, model: str = "") -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        entry: dict[str, object] = {"role": role, "text": text, "ts": time.time()}
        if role == "assistant":  # as Claude Code writes a call: its message, model and usage
            message = {"id": f"msg_{uuid.uuid4().hex}", "model": model, "usage": USAGE}
            entry.update(type="assistant", message=message)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    def history(self) -> list[dict[str, str]]:
        with self.path.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def spin(self, seconds: float, label: str = "Thinking") -> None:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            sys.stdout.write(f"\r{SPINNER[i % len(SPINNER)]} {label}… (esc to interrupt)")
            sys.stdout.flush()
            if i == 0:
                trace("working")
            time.sleep(0.1)
            i += 1
        sys.stdout.write("\r\033[K")

    def answer(self, text: str, seconds: float) -> None:
        self.hook("UserPromptSubmit", prompt=text)
        self.record("user", text)
        self.spin(seconds)
        reply = f"You said: {text}"
        print(f"● {reply}")
        self.record("assistant", reply, self.model)
        self.hook("Stop")

    def ask(self, command: str) -> None:
        """Ask to run command; the first answer wins: a key in the terminal or a decision a
        PermissionRequest hook prints (whose hooks are stopped once the terminal answers)."""
        self.hook("Notification", notification_type="permission_prompt")
        decided: list[str] = []
        running: list[subprocess.Popen[str]] = []
        request: dict[str, object] = {
            "tool_name": "Bash",
            "tool_input": {"command": command or "true"},
        }
        payload = self._payload("PermissionRequest", request)
        threads = [
            threading.Thread(
                target=lambda c=cmd, t=timeout: decided.extend(
                    _decision(self._run("PermissionRequest", c, t, payload, running))
                ),
                daemon=True,
            )
            for cmd, timeout in self._of("PermissionRequest")
        ]
        for thread in threads:
            thread.start()
        # Claude Code draws its dialog about a third of a second after its hooks start.
        drawn_at = time.monotonic() + DRAW_AFTER_HOOKS
        for thread in threads:
            thread.join(max(0.0, drawn_at - time.monotonic()))
        said = ""
        while said not in ("y", "n"):
            sys.stdout.write(QUESTION)
            sys.stdout.flush()
            trace("blocked")
            said = self._answer(decided)
            if said == "eof":
                return
        for run in running:  # Claude Code stops the hooks of a dialog answered
            run.terminate()
        self.hook("PostToolUse")
        print("● Proceeding." if said == "y" else "● Cancelled.")
        self.hook("Stop")

    def _answer(self, decided: list[str]) -> str:
        """A line typed ("eof" at its end) or a hook's decision ("y" or "n"), the first."""
        while not decided:
            if select.select([sys.stdin], [], [], 0.02)[0]:
                line = sys.stdin.readline()
                return line.strip().lower() if line else "eof"
        return "y" if decided[0] == "allow" else "n"

    def rotate(self) -> None:
        self.hook("SessionEnd", reason="clear")
        self.session_id = str(uuid.uuid4())
        print(f"● Started a new conversation: {self.session_id}")
        self.hook("SessionStart", source="clear")

    def loop(self) -> int:
        while True:
            sys.stdout.write(PROMPT)
            sys.stdout.flush()
            trace("idle")
            line = sys.stdin.readline()
            if not line:
                return 0
            text = line.strip()
            if not text:
                continue
            if text == "/exit":
                return 0
            if text == "/clear":
                self.rotate()
            elif text == "/ask" or text.startswith("/ask "):
                self.ask(text[len("/ask") :].strip())
            elif text.startswith("/work"):
                parts = text.split()
                seconds = float(parts[1]) if len(parts) > 1 else 5.0
                self.answer(text, seconds)
            else:
                self.answer(text, float(os.environ.get("DEMO_AGENT_THINK", "0.5")))


def _decision(printed: str) -> list[str]:
    """The decision a PermissionRequest hook printed, as Claude Code reads it: [] for none."""
    try:
        said = json.loads(printed)["hookSpecificOutput"]["decision"]["behavior"]
    except (ValueError, KeyError, TypeError):
        return []
    return [said] if said in ("allow", "deny") else []


def load_hooks(path: str) -> Hooks:
    """{event: [(command, timeout), ...]} from Claude's settings format; a bad file means no
    hooks."""
    try:
        with open(path, encoding="utf-8") as f:
            settings = json.load(f)
        return {
            event: [
                (h["command"], float(h.get("timeout", HOOK_TIMEOUT)))
                for group in groups
                for h in group["hooks"]
            ]
            for event, groups in settings.get("hooks", {}).items()
        }
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"Ignoring settings {path}: {e}", file=sys.stderr)
        return {}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hostagent-demo-agent")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--session-id", help="start a new conversation with this id")
    g.add_argument("--resume", help="continue the conversation with this id")
    p.add_argument("--model", default="demo-1", help="accepted and shown, like a real CLI")
    p.add_argument("--settings", help="a JSON settings file with Claude-format hooks")
    p.add_argument("prompt", nargs="?", help="a first message, answered before the prompt")
    args = p.parse_args(argv)
    hooks = load_hooks(args.settings) if args.settings else {}
    if args.resume:
        agent = Agent(args.resume, hooks, args.model)
        if not agent.path.exists():
            print(f"No conversation found with session ID: {args.resume}", file=sys.stderr)
            return 1
    else:
        agent = Agent(args.session_id or str(uuid.uuid4()), hooks, args.model)
        if agent.path.exists():
            print(f"Error: Session ID {agent.session_id} is already in use.", file=sys.stderr)
            return 1
    print(f"Demo Agent ({args.model}) · session {agent.session_id}")
    print(f"cwd: {os.getcwd()}")
    if args.resume:
        for turn in agent.history():
            print(f"  [{turn['role']}] {turn['text']}")
        print("● Resumed the conversation.")
    agent.hook("SessionStart", source="resume" if args.resume else "startup")
    if args.prompt:
        agent.answer(args.prompt, float(os.environ.get("DEMO_AGENT_THINK", "0.5")))
    try:
        return agent.loop()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
