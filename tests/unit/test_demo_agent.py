"""The stand-in agent behaves like a real CLI where hostagent depends on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def agent(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "DEMO_AGENT_THINK": "0"}
    return subprocess.run(
        [sys.executable, "-m", "hostagent.cli.demo_agent", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=20,
    )


def conversation(home: Path, sid: str) -> Path:
    return home / ".demo-agent" / "sessions" / f"{sid}.jsonl"


def test_no_file_before_the_first_message(tmp_path: Path) -> None:
    out = agent(tmp_path, "--session-id", "s1", stdin="/exit\n")
    assert out.returncode == 0 and "Demo Agent" in out.stdout and "> " in out.stdout
    assert not conversation(tmp_path, "s1").exists()


def test_resume_shows_earlier_turns(tmp_path: Path) -> None:
    agent(tmp_path, "--session-id", "s2", stdin="hello\n/exit\n")
    turns = [json.loads(x) for x in conversation(tmp_path, "s2").read_text().splitlines()]
    assert [t["role"] for t in turns] == ["user", "assistant"]
    out = agent(tmp_path, "--resume", "s2", stdin="/exit\n")
    assert "[user] hello" in out.stdout and "Resumed" in out.stdout


def test_resume_of_an_unknown_id_fails_like_claude(tmp_path: Path) -> None:
    out = agent(tmp_path, "--resume", "nope")
    assert out.returncode == 1 and "No conversation found" in out.stderr


def test_session_id_in_use_fails(tmp_path: Path) -> None:
    agent(tmp_path, "--session-id", "s3", stdin="hi\n/exit\n")
    out = agent(tmp_path, "--session-id", "s3")
    assert out.returncode == 1 and "already in use" in out.stderr


@pytest.mark.parametrize("answer", ["y", "n"])
def test_asks_for_approval(tmp_path: Path, answer: str) -> None:
    out = agent(tmp_path, stdin=f"/ask\n{answer}\n/exit\n")
    assert "Do you want to proceed? (y/n)" in out.stdout
    assert ("Proceeding" if answer == "y" else "Cancelled") in out.stdout


def test_clear_rotates_the_id(tmp_path: Path) -> None:
    out = agent(tmp_path, "--session-id", "s4", stdin="one\n/clear\ntwo\n/exit\n")
    assert "Started a new conversation" in out.stdout
    files = sorted(p.name for p in (tmp_path / ".demo-agent" / "sessions").iterdir())
    assert len(files) == 2 and "s4.jsonl" in files


def test_spinner_while_working(tmp_path: Path) -> None:
    out = agent(tmp_path, stdin="/work 0.3\n/exit\n")
    assert "esc to interrupt" in out.stdout and "You said: /work 0.3" in out.stdout


def test_hooks_from_a_settings_file_report_each_id(tmp_path: Path) -> None:
    log = tmp_path / "hooks.log"
    settings = tmp_path / "settings.json"
    command = f"cat >> {log}; echo >> {log}"
    settings.write_text(
        json.dumps(
            {
                "hooks": {
                    e: [{"hooks": [{"type": "command", "command": command}]}]
                    for e in ("SessionStart", "UserPromptSubmit", "Stop")
                }
            }
        )
    )
    agent(tmp_path, "--session-id", "s5", "--settings", str(settings), stdin="hi\n/clear\n/exit\n")
    events = [json.loads(x) for x in log.read_text().splitlines() if x]
    assert [(e["hook_event_name"], e.get("source")) for e in events] == [
        ("SessionStart", "startup"),
        ("UserPromptSubmit", None),
        ("Stop", None),
        ("SessionStart", "clear"),
    ]
    assert events[0]["session_id"] == "s5" != events[-1]["session_id"]


def test_each_answer_is_recorded_as_a_model_call_in_claudes_usage_fields(tmp_path: Path) -> None:
    """So that hostagent follows the stand-in's usage as it follows Claude Code's."""
    from hostagent.usage import Usage
    from hostagent.usage.readers import READERS

    agent(tmp_path, "--session-id", "s9", "--model", "demo-2", stdin="one\ntwo\n/exit\n")
    used = READERS["claude"](conversation(tmp_path, "s9").read_text())
    assert used == Usage(2400, 100, 400, 0, None, 2, "demo-2")
