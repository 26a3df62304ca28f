from __future__ import annotations

from pathlib import Path

import pytest

from hostagent import launch
from hostagent.presets import BUILTIN_DIR, IdSource, Preset, load_presets

CLAUDE = Preset(
    "claude",
    command=["claude"],
    id_source=IdSource.ASSIGNED,
    assign_args=["--session-id", "{id}"],
    resume_args=["--resume", "{id}"],
    conversation="{home}/.claude/projects/{cwd_dashed}/{id}.jsonl",
)
CODEX = Preset(
    "codex", command=["codex"], id_source=IdSource.DISCOVERED, resume_args=["resume", "{id}"]
)
AIDER = Preset("aider", command=["aider"], resume_args=["--restore-chat-history"])
SHELL = Preset("shell")


def test_first_launch_assigns_the_id() -> None:
    first = launch.first_launch(CLAUDE, ["claude"], ["--model", "x"], "ID")
    assert first.argv == ["claude", "--session-id", "ID", "--model", "x"]


@pytest.mark.parametrize(
    ("preset", "agent_id", "exists", "argv", "fresh"),
    [
        pytest.param(
            CLAUDE, "ID", True, ["claude", "--resume", "ID", "-v"], False, id="claude-resume"
        ),
        pytest.param(
            CLAUDE,
            "ID",
            False,
            ["claude", "--session-id", "ID", "-v"],
            True,
            id="claude-no-conversation-same-id",
        ),
        pytest.param(CODEX, "R", True, ["codex", "resume", "R", "-v"], False, id="codex-resume"),
        pytest.param(CODEX, "R", False, ["codex", "-v"], True, id="codex-fresh"),
        pytest.param(CODEX, "", False, ["codex", "-v"], True, id="codex-unknown-id"),
        pytest.param(
            AIDER, "", False, ["aider", "--restore-chat-history", "-v"], False, id="aider-history"
        ),
        pytest.param(SHELL, "", False, ["bash", "-v"], True, id="relaunch"),
    ],
)
def test_resume_table(
    preset: Preset, agent_id: str, exists: bool, argv: list[str], fresh: bool
) -> None:
    command = preset.command or ["bash"]
    plan = launch.resume_launch(preset, command, ["-v"], agent_id, exists)
    assert plan.argv == argv
    assert plan.fresh is fresh


def test_conversation_path() -> None:
    path = launch.conversation_path(CLAUDE, "ID", "/home/a", "/home/a/my_proj")
    assert path == "/home/a/.claude/projects/-home-a-my-proj/ID.jsonl"
    assert launch.conversation_path(CODEX, "ID", "/h", "/") is None


def test_builtin_presets_cover_the_agents() -> None:
    presets = load_presets([BUILTIN_DIR], strict=True)
    assert set(presets) >= {
        "shell",
        "demo-agent",
        "claude",
        "codex",
        "gemini",
        "opencode",
        "aider",
        "qwen",
        "cursor-agent",
        "copilot",
        "grok",
    }
    assert all(Path(p.source).parent == BUILTIN_DIR for p in presets.values())
    assert launch.new_agent_id(presets["claude"])
    assert not launch.new_agent_id(presets["codex"])
