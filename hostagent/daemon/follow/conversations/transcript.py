"""Whether an agent's conversation can be resumed, found out as the session's owner.

The resume decision (launch.resume_launch) needs to know, before the CLI is started, whether
``--resume ID`` will work. Two ways are known, per preset:

- the conversation's file (``resume.conversation``, a glob, so Claude's transcript is found
  whatever project directory Claude filed it under: a cwd reached through a symlink, or one
  whose dashed name Claude shortened), and, where the CLI writes that file before the first
  turn (Gemini), a regex the file holds once a turn was taken (``resume.turn``);
- the CLI's own listing (``resume.list``), run in the session's cwd, which names every id it
  will resume.

Like discovery, the look runs as the owner: nothing under a user's home is opened as root.
"""

from __future__ import annotations

import logging
import sys

from hostagent import launch
from hostagent.daemon.follow.conversations import discovery
from hostagent.daemon.host.ports import OwnerPort
from hostagent.identity import Owner
from hostagent.launch import Conversation
from hostagent.presets import Preset

log = logging.getLogger(__name__)


# Exit 0: a file with a turn; 1: a file without; 2: no file.
_LOOK = r"""
import glob, re, sys
pattern, turn = sys.argv[1:3]
rx = re.compile(turn) if turn else None
found = False
for path in glob.glob(pattern, recursive=True):
    found = True
    if rx is None:
        sys.exit(0)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            if rx.search(f.read(16 << 20)):
                sys.exit(0)
    except OSError:
        continue
sys.exit(1 if found else 2)
"""
_LOOK_CODES = {0: Conversation.RESUMABLE, 1: Conversation.UNUSABLE, 2: Conversation.ABSENT}


def with_program(argv: list[str], preset: Preset, program: str) -> list[str]:
    """argv with the preset's program replaced by the path it was found at for this owner."""
    if argv and preset.command and argv[0] == preset.command[0]:
        return [program, *argv[1:]]
    return list(argv)


async def conversation_state(
    owners: OwnerPort,
    preset: Preset,
    owner: Owner,
    cwd: str,
    env: dict[str, str],
    program: str,
    agent_id: str,
) -> Conversation:
    if not agent_id:
        return Conversation.ABSENT
    if preset.conversation:
        pattern = launch.conversation_glob(preset.conversation, agent_id, owner.home, cwd, env)
        argv = [sys.executable, "-I", "-S", "-c", _LOOK, pattern, preset.resume_turn]
        result = await owners.run(owner, argv)
        if result is not None and result[0] in _LOOK_CODES:
            return _LOOK_CODES[result[0]]
        log.warning("Failed to look for conversation %s at %s", agent_id, pattern)
        return Conversation.UNKNOWN
    if preset.resume_list:
        command = with_program(preset.resume_list, preset, program)
        out = await discovery.run_listing(owners, owner, cwd, command, env)
        if out is None:
            log.warning("'%s' failed; resuming %s blindly", " ".join(preset.resume_list), agent_id)
            return Conversation.UNKNOWN
        return Conversation.RESUMABLE if agent_id in out else Conversation.UNUSABLE
    return Conversation.UNKNOWN
