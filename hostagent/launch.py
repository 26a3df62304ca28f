"""Building the command line of a session's first launch and of each resume. Pure.

First launch: ``command + assign_args(id) + caller args``. Resume, by what is known:

| agent id known | conversation exists | argv                                   |
|----------------|---------------------|----------------------------------------|
| yes            | yes                 | command + resume_args(id) + args       |
| yes, assigned  | no                  | command + assign_args(same id) + args  |
| yes, learned   | no                  | command + args (fresh; id re-learned)  |
| no             | -                   | command + args, or resume_args without {id} |

A conversation that does not exist yet (stopped before its first message) therefore starts
fresh instead of failing with "no saved session".
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from hostagent.presets import IdSource, Preset


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    agent_session: str
    fresh: bool  # True: a new conversation starts (no resume flags)


def new_agent_id(preset: Preset) -> str:
    return str(uuid.uuid4()) if preset.id_source is IdSource.ASSIGNED else ""


def _render(templates: list[str], agent_id: str) -> list[str]:
    return [t.replace("{id}", agent_id) for t in templates]


def first_launch(preset: Preset, command: list[str], args: list[str], agent_id: str) -> Launch:
    argv = list(command)
    if preset.id_source is IdSource.ASSIGNED and agent_id:
        argv += _render(preset.assign_args, agent_id)
    return Launch(argv + list(args), agent_id, fresh=True)


def resume_launch(
    preset: Preset,
    command: list[str],
    args: list[str],
    agent_id: str,
    conversation_exists: bool,
) -> Launch:
    if agent_id and conversation_exists and preset.resume_args:
        return Launch(
            list(command) + _render(preset.resume_args, agent_id) + list(args), agent_id, False
        )
    if agent_id and preset.id_source is IdSource.ASSIGNED:
        return first_launch(preset, command, args, agent_id)
    if not agent_id and preset.resume_args and not any("{id}" in a for a in preset.resume_args):
        return Launch(list(command) + list(preset.resume_args) + list(args), "", False)
    return Launch(list(command) + list(args), "", fresh=True)


def cwd_dashed(cwd: str) -> str:
    """Claude's and Qwen's project directory name: every non [A-Za-z0-9-] becomes '-'."""
    return re.sub(r"[^A-Za-z0-9-]", "-", cwd)


def conversation_path(preset: Preset, agent_id: str, home: str, cwd: str) -> str | None:
    """Where the conversation's file should be, or None when the preset cannot tell."""
    if not preset.conversation or not agent_id:
        return None
    return (
        preset.conversation.replace("{home}", home)
        .replace("{cwd_dashed}", cwd_dashed(cwd))
        .replace("{id}", agent_id)
    )
