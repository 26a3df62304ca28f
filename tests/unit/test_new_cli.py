"""A new CLI is its preset file: one whose formats hostagent already reads (here a fork of
Claude Code's, its transcript, hooks and MCP settings in Claude's shapes) needs nothing else.
The file is written into a preset directory as an admin would; everything the daemon does for
a session of it is then made from the file alone: its launch and resume command lines, its
hooks settings with its dialog asked through its hook, its MCP server's registration, its
usage read from its record, its screen read for its activity and its questions."""

from __future__ import annotations

import json
from pathlib import Path

from hostagent import launch, mcp_registration, question
from hostagent.activity import View, classify
from hostagent.daemon.follow.hooks import formats
from hostagent.presets import BUILTIN_DIR, IdSource, load_presets
from hostagent.session import Activity
from hostagent.usage import readers

PRESET = """\
name: forked-claude
description: A fork of Claude Code that kept its formats
command: [forked-claude]
state: ["{home}/.forked/"]
agent_id: {source: assigned, assign_args: ["--session-id", "{id}"]}
resume:
  args: ["--resume", "{id}"]
  conversation: "{home}/.forked/projects/{cwd_dashed}/{id}.jsonl"
usage: {format: claude, file: "{home}/.forked/projects/{cwd_dashed}/{id}.jsonl"}
hooks:
  format: claude
  args: ["--settings", "{hooks_file}"]
  ask: PermissionRequest
  activity: {UserPromptSubmit: working, PermissionRequest: blocked, Stop: idle}
mcp: {format: claude}
activity:
  rules:
    - {activity: blocked, screen: 'Do you want to proceed\\?', lines: 20, visible: true}
    - {activity: working, screen: '(?i)esc to interrupt', lines: 12}
  fallback: idle
"""
# One call, as Claude Code's transcript records it.
TRANSCRIPT = json.dumps(
    {
        "type": "assistant",
        "message": {
            "id": "msg_1",
            "model": "fork-1",
            "usage": {
                "input_tokens": 100,
                "cache_read_input_tokens": 20,
                "cache_creation_input_tokens": 0,
                "output_tokens": 7,
            },
        },
    }
)
DIALOG = "Bash command\n  make\nDo you want to proceed?\n❯ 1. Yes\n  2. No\n"


def test_a_cli_with_formats_hostagent_reads_is_its_preset_file_alone(tmp_path: Path) -> None:
    (tmp_path / "forked-claude.yaml").write_text(PRESET)
    preset = load_presets([BUILTIN_DIR, tmp_path], strict=True)["forked-claude"]
    assert preset.id_source is IdSource.ASSIGNED
    first = launch.first_launch(preset, preset.command, [], "id-1", "hello")
    assert first.argv == ["forked-claude", "--session-id", "id-1", "hello"]
    again = launch.resume_launch(preset, preset.command, [], "id-1", launch.Conversation.RESUMABLE)
    assert again.argv == ["forked-claude", "--resume", "id-1"]
    # Its hooks: every Claude event reported, its permission dialog asked through its hook.
    ask = (preset.hooks_ask, ["hostagentctl", "--system", "hook", "PermissionRequest", "--ask"], 9)
    made = formats.settings(preset.hooks_format, ["/bin/sh", "-c", "s"], {}, ask)["hooks"]
    assert isinstance(made, dict) and set(made) == set(formats.FORMAT_EVENTS["claude"])
    assert len(made["PermissionRequest"][0]["hooks"]) == 2
    # Its MCP server, as Claude takes one; its usage, from its transcript.
    server = mcp_registration.registration(preset.mcp_format, ["hostagentctl", "mcp"], "/x.json")
    assert server.args == ["--mcp-config=/x.json"]
    used = readers.READERS[preset.usage_format](TRANSCRIPT + "\n")
    assert (used.input, used.output, used.cache_read, used.calls) == (120, 7, 20, 1)
    # Its screen: blocked on its dialog, whose question the inbox reads.
    verdict = classify(preset.activity, View(DIALOG, ""))
    assert verdict.activity is Activity.BLOCKED
    asked = question.read(DIALOG)
    assert asked is not None and [c.label for c in asked.choices] == ["Yes", "No"]
