"""Building the command line of a session's first launch and of each resume. Pure.

First launch: ``command + assign_args(id) + caller args + prompt_args(prompt)``. The prompt is
given once: a resume never sends it again (Qwen would even run a positional prompt one-shot
and exit). The caller's args are flags and go with every launch.

Resume, by what is known of the conversation (``Conversation``, found as the owner by
daemon/transcript.py):

| agent id known | conversation              | argv                                       |
|----------------|---------------------------|--------------------------------------------|
| yes            | resumable (or unknowable) | command + resume_args(id) + args           |
| yes, assigned  | absent                    | command + assign_args(same id) + args      |
| yes, assigned  | unusable                  | command + assign_args(NEW id) + args       |
| yes, learned   | absent or unusable        | command + args (fresh; id re-learned)      |
| no             | -                         | command + args, or resume_args without {id} |

"Unusable" is a conversation the CLI created but will not resume: Gemini and Grok write a
session file at start, then refuse ``--resume`` of a session without a turn ("No previous
sessions found") and refuse the same id for a new one ("already exists"). Such a session,
stopped before its first prompt, starts fresh under a new id.
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass

from hostagent.presets import IdSource, Preset


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    agent_session: str
    fresh: bool  # True: a new conversation starts (no resume flags)


class Conversation(enum.Enum):
    RESUMABLE = "resumable"
    ABSENT = "absent"  # never written: the id is still free
    UNUSABLE = "unusable"  # written, but the CLI will not resume it (no turn yet)
    UNKNOWN = "unknown"  # the preset gives no way to tell: try to resume


def new_agent_id(preset: Preset) -> str:
    return str(uuid.uuid4()) if preset.id_source is IdSource.ASSIGNED else ""


def _render(templates: list[str], agent_id: str) -> list[str]:
    return [t.replace("{id}", agent_id) for t in templates]


def first_launch(
    preset: Preset, command: list[str], args: list[str], agent_id: str, prompt: str = ""
) -> Launch:
    argv = list(command)
    if preset.id_source is IdSource.ASSIGNED and agent_id:
        argv += _render(preset.assign_args, agent_id)
    argv += list(args)
    if prompt:
        argv += [a.replace("{prompt}", prompt) for a in preset.prompt_args]
    return Launch(argv, agent_id, fresh=True)


def resume_launch(
    preset: Preset,
    command: list[str],
    args: list[str],
    agent_id: str,
    conversation: Conversation,
    new_id: str = "",
) -> Launch:
    """new_id: the id an assigned conversation that cannot be reused starts under."""
    usable = conversation in (Conversation.RESUMABLE, Conversation.UNKNOWN)
    if agent_id and usable and preset.resume_args:
        return Launch(
            list(command) + _render(preset.resume_args, agent_id) + list(args), agent_id, False
        )
    if agent_id and preset.id_source is IdSource.ASSIGNED:
        if conversation is Conversation.UNUSABLE:
            agent_id = new_id or new_agent_id(preset)
        return first_launch(preset, command, args, agent_id)
    if not agent_id and preset.resume_args and not any("{id}" in a for a in preset.resume_args):
        return Launch(list(command) + list(preset.resume_args) + list(args), "", False)
    return Launch(list(command) + list(args), "", fresh=True)


def cwd_dashed(cwd: str) -> str:
    """Claude's and Qwen's project directory name: every non [A-Za-z0-9-] becomes '-'."""
    return re.sub(r"[^A-Za-z0-9-]", "-", cwd)


_ENV_DEFAULT = re.compile(r"\{\$([A-Za-z_][A-Za-z0-9_]*):-([^{}]*(?:\{[a-z_]+\}[^{}]*)*)\}")


def conversation_glob(
    template: str, agent_id: str, home: str, cwd: str, env: dict[str, str]
) -> str:
    """A preset path template made concrete: ``{$VAR:-default}`` takes the session's
    environment (Claude's CLAUDE_CONFIG_DIR), then ``{home}``, ``{cwd}``, ``{cwd_dashed}``,
    ``{id}`` and ``{id8}`` (the id's first 8 characters, as Gemini names its files)."""
    path = _ENV_DEFAULT.sub(lambda m: env.get(m.group(1)) or m.group(2), template)
    return (
        path.replace("{home}", home)
        .replace("{cwd_dashed}", cwd_dashed(cwd))
        .replace("{cwd}", cwd)
        .replace("{id8}", agent_id[:8])
        .replace("{id}", agent_id)
    )
