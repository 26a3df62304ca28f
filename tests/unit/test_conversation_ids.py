"""Hook reports, the hooks file, and discovery on disk (run as the current user on tmp files)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from hostagent.daemon import hooks
from hostagent.daemon.discovery import discover
from hostagent.daemon.owner import Owner
from hostagent.presets import BUILTIN_DIR, Discovery, load_presets

ID_A = "0b9c2a3e-1111-4222-8333-444455556666"
ID_B = "7d1f0c9e-aaaa-4bbb-8ccc-ddddeeeeffff"


@pytest.mark.parametrize(
    ("data", "agent_session", "source"),
    [
        ({"session_id": ID_A, "source": "clear"}, ID_A, "clear"),
        ({"sessionId": ID_A}, ID_A, ""),
        ({"conversation_id": ID_A}, ID_A, ""),
        ({"session_id": "../../etc/passwd"}, "", ""),
        ({"session_id": "x" * 200}, "", ""),
        ({"session_id": 42, "source": 7}, "", ""),
        ({}, "", ""),
    ],
)
def test_read_report_keeps_only_well_formed_ids(
    data: dict[str, object], agent_session: str, source: str
) -> None:
    report = hooks.read_report("SessionStart", data)
    assert (report.agent_session, report.source) == (agent_session, source)


@pytest.mark.parametrize("event", ["", "Session Start", "x;rm -rf /", "a" * 65])
def test_bad_event_names(event: str) -> None:
    assert hooks.event_problem(event)


def test_claude_settings_quote_the_command(tmp_path: Path) -> None:
    settings = hooks.settings("claude", ["/opt/my tools/hostagentctl", "--system", "hook"], {})
    command = settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]  # type: ignore[index]
    assert command == "'/opt/my tools/hostagentctl' --system hook SessionStart"
    path = tmp_path / "s.hooks.json"
    hooks.write_settings(path, settings)
    assert json.loads(path.read_text()) == settings
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_write_settings_replaces_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = tmp_path / "s.hooks.json"
    path.symlink_to(victim)
    hooks.write_settings(path, {"hooks": {}})
    assert victim.read_text() == "precious" and not path.is_symlink()


def _rollout(home: Path, day: str, stamp: str, agent_id: str, cwd: str, age: float) -> Path:
    path = home / ".codex/sessions" / day / f"rollout-{stamp}-{agent_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"type": "session_meta", "payload": {"id": agent_id, "cwd": cwd}}
    path.write_text(json.dumps(meta) + "\n")
    when = time.time() - age
    os.utime(path, (when, when))
    return path


def _me(home: Path) -> Owner:
    me = Owner.from_uid(os.getuid())
    return Owner(me.uid, me.gid, me.name, str(home), me.shell, me.groups)


def test_codex_rollouts_are_found_by_cwd_newest_first(tmp_path: Path) -> None:
    rule = load_presets([BUILTIN_DIR], strict=True)["codex"].discover
    assert rule is not None
    since = int((time.time() - 100) * 1e6)
    _rollout(tmp_path, "2026/11/29", "2026-11-29T10-00-00", ID_A, "/srv/app", 50)
    _rollout(tmp_path, "2026/11/30", "2026-11-30T10-00-00", ID_B, "/srv/app", 10)
    _rollout(tmp_path, "2026/11/30", "2026-11-30T11-00-00", "1" * 8 + ID_A[8:], "/srv/other", 1)
    owner = _me(tmp_path)
    assert asyncio.run(discover(rule, owner, "/srv/app", since, set())) == ID_B
    # Claimed by another session: the next newest one that is free.
    assert asyncio.run(discover(rule, owner, "/srv/app", since, {ID_B})) == ID_A
    # Written before this run started: not this run's conversation.
    late = int(time.time() * 1e6)
    assert asyncio.run(discover(rule, owner, "/srv/app", late, set())) == ""


def test_discovery_without_cwd_field_and_nothing_there(tmp_path: Path) -> None:
    rule = Discovery("{home}/.demo-agent/sessions/*.jsonl", r"([0-9a-f-]{36})\.jsonl$")
    owner = _me(tmp_path)
    assert asyncio.run(discover(rule, owner, "/x", 0, set())) == ""
    (tmp_path / ".demo-agent/sessions").mkdir(parents=True)
    (tmp_path / f".demo-agent/sessions/{ID_A}.jsonl").write_text("{}\n")
    assert asyncio.run(discover(rule, owner, "/x", 0, set())) == ID_A


def test_gemini_settings_keep_the_admin_defaults_and_their_hooks() -> None:
    admin = {
        "ui": {"theme": "corporate"},
        "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "audit"}]}]},
    }
    settings = hooks.settings("gemini", ["hostagentctl", "--user", "hook"], admin)
    assert settings["ui"] == {"theme": "corporate"}
    start = settings["hooks"]["SessionStart"]  # type: ignore[index]
    assert [g["hooks"][0]["command"] for g in start] == [
        "audit",
        "hostagentctl --user hook SessionStart",
    ]
    assert "AfterAgent" in settings["hooks"]  # type: ignore[operator]
