"""hostagent-demo-agent: a stand-in agent CLI that needs no network.

It behaves like the real CLIs where hostagent cares: a banner and a prompt, a spinner while it
"thinks", an approval question, a conversation file that exists only from the first message
on, ``--session-id`` / ``--resume`` with Claude's failure modes, and an id rotation like
``/clear``. Tests and the demo drive it through tmux.

Input lines:
  /work SECONDS     show the spinner for that long, then answer
  /ask              ask "Do you want to proceed? (y/n)" and wait for the answer
  /clear            rotate to a new conversation id
  /exit             exit 0
  anything else     a message: think briefly, answer, append both to the conversation
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
PROMPT = "> "
QUESTION = "Do you want to proceed? (y/n) "


def sessions_dir() -> Path:
    return Path(os.path.expanduser("~/.demo-agent/sessions"))


class Agent:
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id

    @property
    def path(self) -> Path:
        return sessions_dir() / f"{self.session_id}.jsonl"

    def record(self, role: str, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"role": role, "text": text, "ts": time.time()}) + "\n")

    def history(self) -> list[dict[str, str]]:
        with self.path.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def spin(self, seconds: float, label: str = "Thinking") -> None:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            sys.stdout.write(f"\r{SPINNER[i % len(SPINNER)]} {label}… (esc to interrupt)")
            sys.stdout.flush()
            time.sleep(0.1)
            i += 1
        sys.stdout.write("\r\033[K")

    def answer(self, text: str, seconds: float) -> None:
        self.record("user", text)
        self.spin(seconds)
        reply = f"You said: {text}"
        print(f"● {reply}")
        self.record("assistant", reply)

    def ask(self) -> None:
        while True:
            sys.stdout.write(QUESTION)
            sys.stdout.flush()
            line = sys.stdin.readline()
            if not line:
                return
            if line.strip().lower() in ("y", "n"):
                print("● Proceeding." if line.strip().lower() == "y" else "● Cancelled.")
                return

    def rotate(self) -> None:
        self.session_id = str(uuid.uuid4())
        print(f"● Started a new conversation: {self.session_id}")

    def loop(self) -> int:
        while True:
            sys.stdout.write(PROMPT)
            sys.stdout.flush()
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
            elif text == "/ask":
                self.ask()
            elif text.startswith("/work"):
                parts = text.split()
                seconds = float(parts[1]) if len(parts) > 1 else 5.0
                self.answer(text, seconds)
            else:
                self.answer(text, float(os.environ.get("DEMO_AGENT_THINK", "0.5")))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hostagent-demo-agent")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--session-id", help="start a new conversation with this id")
    g.add_argument("--resume", help="continue the conversation with this id")
    p.add_argument("--model", default="demo-1", help="accepted and shown, like a real CLI")
    args = p.parse_args(argv)
    if args.resume:
        agent = Agent(args.resume)
        if not agent.path.exists():
            print(f"No conversation found with session ID: {args.resume}", file=sys.stderr)
            return 1
    else:
        agent = Agent(args.session_id or str(uuid.uuid4()))
        if agent.path.exists():
            print(f"Error: Session ID {agent.session_id} is already in use.", file=sys.stderr)
            return 1
    print(f"Demo Agent ({args.model}) · session {agent.session_id}")
    print(f"cwd: {os.getcwd()}")
    if args.resume:
        for turn in agent.history():
            print(f"  [{turn['role']}] {turn['text']}")
        print("● Resumed the conversation.")
    try:
        return agent.loop()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
