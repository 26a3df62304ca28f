from __future__ import annotations

import subprocess
import sys
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


R, A, U, K = (
    launch.Conversation.RESUMABLE,
    launch.Conversation.ABSENT,
    launch.Conversation.UNUSABLE,
    launch.Conversation.UNKNOWN,
)


def test_first_launch_assigns_the_id_and_gives_the_prompt_once() -> None:
    first = launch.first_launch(CLAUDE, ["claude"], ["--model", "x"], "ID", "fix the bug")
    assert first.argv == ["claude", "--session-id", "ID", "--model", "x", "fix the bug"]
    qwen = Preset("qwen", command=["qwen"], prompt_args=["-i", "{prompt}"])
    assert launch.first_launch(qwen, ["qwen"], [], "", "hi").argv == ["qwen", "-i", "hi"]
    assert launch.first_launch(qwen, ["qwen"], [], "", "").argv == ["qwen"]


@pytest.mark.parametrize(
    ("preset", "agent_id", "state", "argv", "fresh"),
    [
        pytest.param(CLAUDE, "ID", R, ["claude", "--resume", "ID", "-v"], False, id="resume"),
        pytest.param(CLAUDE, "ID", K, ["claude", "--resume", "ID", "-v"], False, id="unknowable"),
        pytest.param(
            CLAUDE, "ID", A, ["claude", "--session-id", "ID", "-v"], True, id="absent-same-id"
        ),
        pytest.param(
            CLAUDE, "ID", U, ["claude", "--session-id", "NEW", "-v"], True, id="unusable-new-id"
        ),
        pytest.param(CODEX, "R", R, ["codex", "resume", "R", "-v"], False, id="codex-resume"),
        pytest.param(CODEX, "R", A, ["codex", "-v"], True, id="codex-fresh"),
        pytest.param(CODEX, "R", U, ["codex", "-v"], True, id="codex-unusable-fresh"),
        pytest.param(CODEX, "", A, ["codex", "-v"], True, id="codex-unknown-id"),
        pytest.param(
            AIDER, "", A, ["aider", "--restore-chat-history", "-v"], False, id="aider-history"
        ),
        pytest.param(SHELL, "", A, ["bash", "-v"], True, id="relaunch"),
    ],
)
def test_resume_table(
    preset: Preset, agent_id: str, state: launch.Conversation, argv: list[str], fresh: bool
) -> None:
    command = preset.command or ["bash"]
    plan = launch.resume_launch(preset, command, ["-v"], agent_id, state, new_id="NEW")
    assert plan.argv == argv
    assert plan.fresh is fresh
    assert "prompt" not in plan.argv


@pytest.mark.parametrize(
    ("template", "env", "path"),
    [
        ("{home}/.claude/projects/*/{id}.jsonl", {}, "/home/a/.claude/projects/*/0123456789.jsonl"),
        (
            "{$CLAUDE_CONFIG_DIR:-{home}/.claude}/projects/*/{id}.jsonl",
            {"CLAUDE_CONFIG_DIR": "/srv/c"},
            "/srv/c/projects/*/0123456789.jsonl",
        ),
        (
            "{$CLAUDE_CONFIG_DIR:-{home}/.claude}/projects/*/{id}.jsonl",
            {},
            "/home/a/.claude/projects/*/0123456789.jsonl",
        ),
        (
            "{home}/.gemini/tmp/*/chats/session-*-{id8}.jsonl",
            {},
            "/home/a/.gemini/tmp/*/chats/session-*-01234567.jsonl",
        ),
        ("{home}/.qwen/projects/{cwd_dashed}/x", {}, "/home/a/.qwen/projects/-home-a-my-proj/x"),
    ],
)
def test_conversation_glob(template: str, env: dict[str, str], path: str) -> None:
    assert (
        launch.conversation_glob(template, "0123456789", "/home/a", "/home/a/my_proj", env) == path
    )


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
        "agy",
        "kilo",
        "pi",
        "hermes",
    }
    assert all(Path(p.source).parent == BUILTIN_DIR for p in presets.values())
    assert launch.new_agent_id(presets["claude"])
    assert not launch.new_agent_id(presets["codex"])


def test_a_command_line_longer_than_tmux_carries_starts_intact(tmp_path: Path) -> None:
    """tmux passes a new session's command to its server in one message of 16 KiB; the
    documented limit is the kernel's 128 KiB, so a longer command goes through a script
    that removes itself and execs the same argv."""
    from hostagent.daemon.host.scope import TMUX_COMMAND_MAX, launch_argv
    from hostagent.options import MAX_ARGV_BYTES

    sock = tmp_path / "s.sock"
    short = ["claude", "--prompt", "hi"]
    assert launch_argv(short, sock) == short
    # One word alone tmux would give to the owner's shell to parse: sh runs it as it is.
    word = str(tmp_path / "my $tool")
    Path(word).write_text("#!/bin/sh\necho ran\n")
    Path(word).chmod(0o755)
    pane = launch_argv([word], sock)
    assert pane[:2] == ["/bin/sh", "-c"] and pane[-1] == word
    assert subprocess.run(pane, capture_output=True, text=True, check=True).stdout == "ran\n"
    tricky = 'it\'s "quoted" $HOME `x` \\ ✓\nsecond line\t' + "€" * 20000
    argv = [sys.executable, "-c", "import sys; print(repr(sys.argv[1:]))", tricky, "'", ""]
    assert TMUX_COMMAND_MAX < sum(len(a.encode()) + 1 for a in argv) < MAX_ARGV_BYTES
    pane = launch_argv(argv, sock)
    assert pane[0] == "/bin/sh" and len(" ".join(pane)) < 200
    out = subprocess.run(pane, capture_output=True, text=True, check=True).stdout
    assert out.strip() == repr([tricky, "'", ""])
    assert not Path(pane[1]).exists()  # it removed itself before the exec
